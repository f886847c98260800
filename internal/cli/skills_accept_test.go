package cli_test

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/skill"
)

// TestSkillMarshmallow is the acceptance of agent-written skills on a
// real recorded task (issue 26): on marshmallow at the task's base
// commit, a scripted agent proposes a skill that runs the project's tests
// without installing it, and one whose test needs pip (no network: it
// fails); Keel tests both in the Linux sandbox; keel skills evaluate
// compares the first with the recorded agent's own commands
// (deepseek_chat_dev: pip installs and pytest runs) in the sandbox; a
// person approves its promotion; Keel signs and pins it; a later run is
// offered it, loads it and runs its script; the failed candidate is
// never offered and cannot be promoted. Skipped unless
// KEEL_MARSHMALLOW_GIT names a clone or mirror of
// marshmallow-code/marshmallow.
func TestSkillMarshmallow(t *testing.T) {
	ws := marshmallowAtBase(t)
	db := setup(t)
	run := func(want int, args ...string) string {
		t.Helper()
		code, out, errOut := keel(t, args...)
		if code != want {
			t.Fatalf("keel %s = %d, want %d\n%s%s", strings.Join(args, " "), code, want, out, errOut)
		}
		return out + errOut
	}
	run(0, "auth", "key", "generate")
	const target = `tests/test_fields.py -k "datetime or date"`
	good := map[string]any{"name": "marshmallow-tests", "description": "Run marshmallow's tests from a checkout without installing it (works offline).",
		"instructions": "Do not pip install the project or its test tools: run `sh $SKILL_DIR/scripts/run-tests.sh [pytest args]` from the repository.",
		"files":        map[string]string{"scripts/run-tests.sh": runTestsScript},
		"tests":        []map[string]string{{"name": "dates", "command": "sh $SKILL_DIR/scripts/run-tests.sh " + target}},
		"covers":       "pytest|pip install", "usage": []string{"sh $SKILL_DIR/scripts/run-tests.sh " + target}}
	bad := map[string]any{"name": "marshmallow-tests-pip", "description": "Install marshmallow, then run its tests.", "instructions": "pip install -e . first.",
		"tests": []map[string]string{{"name": "install", "command": "pip install -e . && python3 -m pytest -q -p no:cacheprovider " + target}}}
	traj := writeTrajectory(t, "run the date tests and keep what works as a skill",
		[]fcall{{"propose_skill", good}}, []fcall{{"propose_skill", bad}}, nil)
	t0 := time.Now()
	run(0, "run", "--model", "replay:"+traj, "--workspace", ws, "--mount-path", "/testbed", "--propose-skills", "-q")
	t.Logf("proposing and testing both candidates in the sandbox: %s", time.Since(t0).Round(time.Millisecond))
	_, st := lastRun(t, db)
	for i, turn := range st.Turns[:2] {
		t.Logf("propose_skill %d: %s", i+1, turn.Calls[0].Finished.Content)
	}
	out := run(0, "skills", "candidates")
	t.Logf("candidates:\n%s", out)
	if !regexp.MustCompile(`marshmallow-tests@\S+\s+tested`).MatchString(out) || !regexp.MustCompile(`marshmallow-tests-pip@\S+\s+failed`).MatchString(out) {
		t.Fatalf("candidates after the tests:\n%s", out)
	}

	recording, err := filepath.Abs(trajectory)
	if err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	out = run(0, "skills", "evaluate", "marshmallow-tests", "--recording", recording, "--repo", ws, "--mount-path", "/testbed")
	t.Logf("comparison on %s (%s):\n%s", filepath.Base(recording), time.Since(t0).Round(time.Millisecond), out)
	if !strings.Contains(out, ": evaluated") {
		t.Fatalf("evaluate:\n%s", out)
	}
	out = run(1, "skills", "evaluate", "marshmallow-tests-pip", "--recording", recording, "--repo", ws, "--mount-path", "/testbed")
	t.Logf("evaluating the failed candidate: %s", strings.TrimSpace(out))

	promote := writeTrajectory(t, "promote the skill", []fcall{{"promote_skill", map[string]any{"name": "marshmallow-tests"}}}, nil)
	run(3, "run", "--model", "replay:"+promote, "--workspace", ws, "--mount-path", "/testbed", "--propose-skills", "-q")
	id, st := lastRun(t, db)
	run(0, "approve", id, st.Turns[0].Calls[0].ID, "--by", "ann")
	_, st = lastRun(t, db)
	if res := st.Turns[0].Calls[0].Finished; res == nil || res.IsError || !strings.Contains(res.Content, "approved by ann, signed") {
		t.Fatalf("promote_skill after approval: %+v", res)
	}
	t.Logf("promote_skill: %s", st.Turns[0].Calls[0].Finished.Content)
	tryBad := writeTrajectory(t, "promote the pip one", []fcall{{"promote_skill", map[string]any{"name": "marshmallow-tests-pip"}}}, nil)
	run(3, "run", "--model", "replay:"+tryBad, "--workspace", ws, "--mount-path", "/testbed", "--propose-skills", "-q")
	id, st = lastRun(t, db)
	run(0, "approve", id, st.Turns[0].Calls[0].ID, "--by", "ann")
	_, st = lastRun(t, db)
	if res := st.Turns[0].Calls[0].Finished; res == nil || !res.IsError {
		t.Fatalf("promoting the failed candidate: %+v", res)
	}
	lock, _, err := skill.ReadLock(ws)
	if err != nil || len(lock.Skills) != 1 || lock.Skills[0].Name != "marshmallow-tests" || lock.Skills[0].Signature == nil {
		t.Fatalf("lockfile: %+v, %v", lock, err)
	}

	// A later run: offered the signed skill only, loads it, runs its script.
	use := writeTrajectory(t, "run the date tests", []fcall{{"use_skill", map[string]any{"name": "marshmallow-tests"}}}, nil)
	run(0, "run", "--model", "replay:"+use, "--workspace", ws, "--mount-path", "/testbed", "-q")
	_, st = lastRun(t, db)
	k := st.Created.Skills
	if k == nil || len(k.Entries) != 1 || k.Entries[0].Name != "marshmallow-tests" || !k.Entries[0].Signed || !k.Entries[0].Scripts {
		t.Fatalf("offered skills: %+v", k)
	}
	res := st.Turns[0].Calls[0].Finished
	m := regexp.MustCompile(`its files are in (\S+):`).FindStringSubmatch(res.Content)
	if res.IsError || m == nil || !strings.Contains(res.Content, "signature verified") {
		t.Fatalf("use_skill = %+v", res)
	}
	t.Logf("the later run was offered 1 skill in %d tokens; use_skill: %s", k.Tokens, strings.SplitN(res.Content, "\n", 2)[0])
	script := filepath.Join(m[1], "scripts", "run-tests.sh")
	again := writeTrajectory(t, "run the date tests", []fcall{{"use_skill", map[string]any{"name": "marshmallow-tests"}}},
		[]fcall{sh("sh " + script + " " + target)}, nil)
	run(0, "run", "--model", "replay:"+again, "--workspace", ws, "--mount-path", "/testbed", "-q")
	_, st = lastRun(t, db)
	res = st.Turns[1].Calls[0].Finished
	t.Logf("the skill's script in a later run: %s", lastLine([]byte(res.Content), "passed"))
	if res.IsError || !regexp.MustCompile(`\d+ passed`).MatchString(res.Content) {
		t.Errorf("the skill's script: %+v", res)
	}
}
