#!/usr/bin/env bash
# Records the journals of testdata/journals with the keel built from this
# tree. Run it once per release, into new file names (a recorded journal is
# never re-recorded: the test guards that what an older release wrote still
# folds and replays the same), then `go test ./agent/ -run Recorded -update`
# writes their goldens; review and commit both.
#
# usage: scripts/record-journals.sh RELEASE MARSHMALLOW_GIT_DIR
#   RELEASE            a name for the files, e.g. v0.1
#   MARSHMALLOW_GIT_DIR a clone or mirror of marshmallow-code/marshmallow,
#                      checked out at the recording's base commit
set -euo pipefail
cd "$(dirname "$0")/.."
rel=$1 repo=$2
out=testdata/journals
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KEEL_HOME="$tmp/home"
go build -o "$tmp/keel" ./cmd/keel
keel() { "$tmp/keel" "$@"; }
db="$tmp/keel.db"
last() { keel audit export --db "$db" "$1" | tail -1 | python3 -c 'import json,sys; e=json.loads(sys.stdin.read()); print(e["seq"], e["type"])'; }

# 1. The demo: the scripted model fixing the bundled project.
keel demo --db "$db" --keep=false >/dev/null
demo=$(keel runs list --db "$db" --json | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["run_id"])')
keel audit export --db "$db" "$demo" >"$out/$rel-demo.jsonl"

# 2. The recorded 74-turn trajectory on marshmallow, replayed with a policy
# that asks before pip, a context window small enough to compact, and a
# crash right after a tool started (repaired on resume).
ws="$tmp/ws"
git clone -q "$repo" "$ws"
git -C "$ws" checkout -q "$(python3 -c 'import json; print(json.load(open("testdata/trajectories/spec.json"))["base_commit"])')"
cat >"$tmp/ask-pip.cedar" <<'POLICY'
@id("all") permit(principal, action, resource);
@id("pip") @ask @reason("installing packages needs a person")
forbid(principal, action, resource) when { resource has name && resource.name == "pip" };
POLICY
set +e
keel run --db "$db" --model replay:testdata/trajectories/deepseek_chat_dev.traj.json --workspace "$ws" \
  --mount-path /testbed --policy "$tmp/ask-pip.cedar" --context-window 12000 --no-wait -q 2>"$tmp/err"
code=$?
set -e
run=$(keel runs list --db "$db" --json | python3 -c 'import json,sys; print([r for r in (json.loads(l)["run_id"] for l in sys.stdin) if r != sys.argv[1]][0])' "$demo")
n=0 crashed=
while [ "$code" = 3 ]; do
  call=$(keel approvals list --db "$db" --json | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["call_id"])')
  n=$((n + 1))
  if [ $((n % 3)) = 2 ]; then
    keel deny --db "$db" --no-resume --reason "not now" "$run" "$call"
  else
    keel approve --db "$db" --no-resume "$run" "$call"
  fi
  if [ -z "$crashed" ]; then
    # Crash right after the approved call's tool.started: the resume
    # appends run.resumed, then tool.started, and is killed there.
    read -r seq _ < <(last "$run")
    KEEL_DEBUG=crash_after_event=$((seq + 2)) "$tmp/keel" runs resume --db "$db" --no-wait -q "$run" 2>/dev/null || true
    read -r seq typ < <(last "$run")
    [ "$typ" = tool.started ] || { echo "the crash left $typ last, want tool.started" >&2; exit 1; }
    crashed=$seq
  fi
  set +e
  keel runs resume --db "$db" --no-wait -q "$run" 2>>"$tmp/err"
  code=$?
  set -e
done
keel audit export --db "$db" "$run" >"$out/$rel-replay-approvals-compaction-crash.jsonl"
echo "replay run $run ended with exit $code; crash after event $crashed"

# 3. System streams: agents created, granted and revoked; an API token.
keel agents create --db "$db" ci-bot >/dev/null
keel agents create --db "$db" --kind assistant --description "drafts replies" helper >/dev/null
keel agents revoke --db "$db" --reason "rotated" ci-bot >/dev/null
keel tokens create --db "$db" --name ops --scope runs:read >/dev/null
keel audit export --db "$db" --all | python3 -c '
import json, sys
out = {}
for line in sys.stdin:
    e = json.loads(line)
    if e["run_id"].startswith("_keel."):
        out.setdefault(e["run_id"], []).append(line)
for rid, lines in out.items():
    open(sys.argv[1] + "-system-" + rid[len("_keel."):] + ".jsonl", "w").writelines(lines)
' "$out/$rel"
ls -l "$out"
