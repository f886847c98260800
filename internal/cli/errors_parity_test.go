package cli_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/token"
	"github.com/keel-run/keel/service"
)

// The same bad command line fails the same way in the local and the
// --server form: one exit status and one message, the service's, with
// no API code glued to it. Both forms work on one journal (keel serve
// on the test's KEEL_HOME), so the runs and names are the same; only
// the hints differ, by the --server URL they name.
func TestLocalAndServerErrorsSame(t *testing.T) {
	setup(t)
	ws := demoProject(t)
	gitRepo(t, ws)
	if code, out, errOut := keel(t, "run", "--model", "scripted:demo", "--workspace", ws, "-q", "fix it"); code != 0 {
		t.Fatalf("keel run = %d\n%s%s", code, out, errOut)
	}
	db := filepath.Join(os.Getenv("KEEL_HOME"), "keel.db")
	done, _ := lastRun(t, db)
	if code, out, errOut := keel(t, "runs", "fork", done, "--at", "2", "--no-start"); code != 0 {
		t.Fatalf("keel runs fork = %d\n%s%s", code, out, errOut)
	}
	// Two runs whose ids start alike: a prefix of both is ambiguous.
	var ids []string
	store := openDB(t, filepath.Join(os.Getenv("KEEL_HOME"), "keel.db"))
	runs, err := store.Runs(t.Context(), nil)
	store.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if !journal.IsSystem(r.RunID) {
			ids = append(ids, r.RunID)
		}
	}
	if len(ids) != 2 {
		t.Fatalf("runs %v, want 2", ids)
	}
	n := 0
	for n < len(ids[0]) && ids[0][n] == ids[1][n] {
		n++
	}
	ambiguous := ids[0][:min(n, 6)]

	// A demo run waiting for its edit's approval (keel-demo, the shared
	// agent of every demo run).
	if code, out, errOut := keel(t, "demo", "--no-wait"); code != 3 {
		t.Fatalf("keel demo --no-wait = %d\n%s%s", code, out, errOut)
	}
	demoRun, _ := lastRun(t, db)

	allow := allowAllPolicy(t)
	sched := []string{"--every", "24h", "--task", "tidy", "--model", "scripted:demo", "--workspace", ws}
	trig := []string{"--on-agent", "keel-demo", "--on", "completed", "--task", "check", "--model", "scripted:demo", "--workspace", ws}
	for _, args := range [][]string{
		append([]string{"schedules", "create", "dup"}, append(sched, "--policy", allow)...),
		append([]string{"triggers", "create", "dup"}, append(trig, "--policy", allow)...),
	} {
		if code, out, errOut := keel(t, args...); code != 0 {
			t.Fatalf("keel %v = %d\n%s%s", args, code, out, errOut)
		}
	}
	// A policy file that does not parse: both forms name it (trial 9,
	// F16: the service named the text it was sent api:policy).
	badPolicy := filepath.Join(t.TempDir(), "bad.cedar")
	if err := os.WriteFile(badPolicy, []byte("this is not cedar\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A revoked token: revoking it again says when it was (report 14,
	// Q17).
	tokStore := openDB(t, db)
	gone, err := token.New(tokStore, nil).Create(t.Context(), &token.Params{Name: "gone", Scopes: []string{"runs:read"}, By: "ada"})
	if err == nil {
		err = token.New(tokStore, nil).Revoke(t.Context(), gone.ID, "ada")
	}
	// A standing approval given and removed: removing it again is a
	// conflict that says when (report 15, R9).
	if err == nil {
		dir := identity.NewDirectory(tokStore, nil)
		err = dir.Grant(t.Context(), "keel-cli", policy.Grant{ID: "g-gone", Scope: policy.ScopeAgent, Tool: "bash", Exact: "ls", By: "ada"})
		if err == nil {
			err = dir.Ungrant(t.Context(), "keel-cli", "g-gone", &identity.UngrantParams{By: "ada"})
		}
	}
	tokStore.Close()
	if err != nil {
		t.Fatal(err)
	}
	// Changes made already: a paused schedule and trigger, ones not
	// paused, a revoked agent (report 15, R9).
	for _, args := range [][]string{
		{"schedules", "pause", "dup"},
		{"triggers", "pause", "dup"},
		append([]string{"schedules", "create", "live"}, append(sched, "--policy", allow)...),
		append([]string{"triggers", "create", "live"}, append(trig, "--policy", allow)...),
		{"agents", "create", "tmpa"},
		{"agents", "revoke", "tmpa", "--reason", "a"},
	} {
		if code, out, errOut := keel(t, args...); code != 0 {
			t.Fatalf("keel %v = %d\n%s%s", args, code, out, errOut)
		}
	}
	s := startServe(t)

	const unknown = "01zzzzzz"
	cases := []struct {
		args []string
		code int
	}{
		// A run id that names no run.
		{[]string{"runs", "show", unknown}, 2},
		{[]string{"audit", "verify", unknown}, 2},
		{[]string{"runs", "resume", unknown}, 2},
		{[]string{"runs", "rewind", unknown, "--to", "2"}, 2},
		{[]string{"runs", "fork", unknown, "--at", "2", "--no-start"}, 2},
		{[]string{"approve", unknown, "c1"}, 2},
		{[]string{"deny", unknown, "c1", "--reason", "no"}, 2},
		{[]string{"inputs", "answer", unknown, "input-1", "--decline"}, 2},
		{[]string{"inputs", "answer", unknown, "input-1", "--set", "a=b"}, 2},
		{[]string{"auth", "connect", "--run", unknown}, 2},
		{[]string{"deny", ambiguous, "c1", "--reason", "no"}, 2},
		// An agent, a standing approval or a token that names nothing;
		// an agent that exists already.
		{[]string{"agents", "show", "nosuch"}, 2},
		{[]string{"agents", "grants", "nosuch"}, 2},
		{[]string{"agents", "revoke", "nosuch"}, 2},
		{[]string{"agents", "restore", "nosuch"}, 2},
		{[]string{"agents", "revoke", "keel-cli/nosuch"}, 2},
		{[]string{"agents", "show", "keel-cli/nosuch"}, 2},
		{[]string{"agents", "ungrant", "nosuch", "g1"}, 2},
		{[]string{"agents", "ungrant", "keel-cli", "g1"}, 2},
		{[]string{"tokens", "revoke", "nosuch"}, 2},
		{[]string{"tokens", "create", "--name", "ci", "--agent", "nosuch"}, 2},
		{[]string{"agents", "create", "keel-cli"}, 1},
		// Names of Keel's own principals, a sub-agent for a token, a
		// token revoked already (report 14, Q20, Q24, Q17).
		{[]string{"agents", "create", "keel.timeout"}, 2},
		{[]string{"agents", "create", "keel-scheduler"}, 2},
		{[]string{"tokens", "create", "--name", "sub", "--scope", "runs:write", "--agent", "keel-cli/reader"}, 2},
		{[]string{"tokens", "revoke", gone.ID}, 1},
		{[]string{"agents", "restore", "keel-cli"}, 2},
		// An unknown scope, in the service's words (report 15, R10).
		{[]string{"tokens", "create", "--name", "ok1", "--scope", "runs:reed"}, 2},
		// A change made already is a conflict, whatever the object
		// (report 15, R9).
		{[]string{"schedules", "pause", "dup"}, 1},
		{[]string{"schedules", "resume", "live"}, 1},
		{[]string{"triggers", "pause", "dup"}, 1},
		{[]string{"triggers", "resume", "live"}, 1},
		{[]string{"agents", "revoke", "tmpa", "--reason", "a"}, 1},
		{[]string{"agents", "ungrant", "keel-cli", "g-gone"}, 1},
		// An answer without its flag, whatever the run and the input.
		{[]string{"inputs", "answer", unknown, "input-1"}, 2},
		{[]string{"inputs", "answer", done, "input-1"}, 2},
		// A flag's value is checked before the run's state.
		{[]string{"runs", "resume", done, "--max-steps", "-1"}, 2},
		{[]string{"runs", "resume", done, "--max-steps", "-1", "--message", "hi"}, 2},
		{[]string{"runs", "resume", unknown, "--max-steps", "-1"}, 2},
		// A negative timeout is a Go duration, out of range: said as
		// keel run says it (fresh-user trial 9, N11).
		{[]string{"runs", "resume", done, "--command-timeout", "-5s"}, 2},
		{[]string{"runs", "resume", unknown, "--model-idle-timeout", "-1s"}, 2},
		// The limits and labels of keel run are the run's, sent to the
		// server and checked there as locally (report 13, P19 and P1).
		{[]string{"run", "--model", "scripted:demo", "--workspace", ws, "--max-tool-calls", "-1", "x"}, 2},
		{[]string{"run", "--model", "scripted:demo", "--workspace", ws, "--max-depth", "-2", "x"}, 2},
		{[]string{"run", "--model", "scripted:demo", "--workspace", ws, "--label", "keel.x=1", "x"}, 2},
		// A context window too small, with the window that fits
		// (report 15, R17: the server form dropped it).
		{[]string{"run", "--model", "scripted:demo", "--workspace", ws, "--context-window", "10", "x"}, 2},
		{[]string{"runs", "resume", done, "--context-window", "10"}, 2},
		// The run's state.
		{[]string{"runs", "resume", done}, 1},
		{[]string{"runs", "cancel", done}, 1},
		// An event that is no event, in each command that takes one;
		// the hints name the form (report 13, P6 and P9: runs diff
		// --at 0 showed the whole diff, the server form's hints named
		// the local commands).
		{[]string{"runs", "diff", done, "--at", "0"}, 2},
		{[]string{"runs", "diff", done, "--at", "-1", "--stat"}, 2},
		{[]string{"runs", "rewind", done, "--to", "-1"}, 2},
		{[]string{"runs", "rewind", done}, 2},
		{[]string{"runs", "fork", done, "--at", "0"}, 2},
		{[]string{"runs", "fork", done}, 2},
		{[]string{"runs", "fork", done, "--at", "2", "--no-start", "--max-steps", "3"}, 2},
		// No task: said before anything of the model, in one way
		// (report 13, P14: the server form spoke of API keys).
		{[]string{"run", "--model", "openai:gpt-4o", "--workspace", ws}, 2},
		// No run in this directory (the test's): the hint names the form.
		{[]string{"runs", "show", "last"}, 2},
		{[]string{"runs", "rewind", done, "--to", "99"}, 2},
		{[]string{"runs", "fork", done, "--at", "99", "--no-start"}, 2},
		{[]string{"approve", done, "c1"}, 2},
		{[]string{"inputs", "answer", done, "input-1", "--decline"}, 2},
		{[]string{"inputs", "answer", done, "input-1", "--set", "a=b"}, 2},
		{[]string{"inputs", "answer", done, "input-1", "--accept"}, 2},
		{[]string{"approve", demoRun, "demo_4", "--remember", "agent"}, 2},
		// A decision wrong in two ways: the service's first check, on
		// every front end (report 15, Q4); a call that is not waiting,
		// named in full or by a prefix (Q16).
		{[]string{"deny", unknown, "c1"}, 2},
		{[]string{"deny", demoRun, "nosuch"}, 2},
		{[]string{"approve", demoRun, "nosuch", "--remember", "forever"}, 2},
		{[]string{"approve", demoRun, "nosuch", "--prefix", "git"}, 2},
		{[]string{"approve", demoRun, "nosuch"}, 2},
		{[]string{"approve", demoRun, "demo_9"}, 2},
		{[]string{"auth", "connect", "--run", demoRun, "--call", "nosuch"}, 2},
		{[]string{"auth", "connect", "--run", done}, 2},
		// Refusals in plain words, with no library's name before them
		// (report 15, R16).
		{[]string{"approve", demoRun, "demo_4", "--remember", "run", "--prefix", "python"}, 2},
		{[]string{"cost", "--by", "bogus"}, 2},
		{[]string{"cost", "--since", "yesterday"}, 2},
		{[]string{"deny", demoRun, "demo_4"}, 2},
		// Schedules and triggers the service refuses.
		{append([]string{"schedules", "create", "s1"}, append(sched, "--policy", allow, "--max-steps", "-1")...), 2},
		{append([]string{"schedules", "create", "dup"}, append(sched, "--policy", allow)...), 2},
		{append([]string{"schedules", "create", "s1"}, sched...), 2},
		{append([]string{"schedules", "create", "s1"}, append(sched, "--policy", badPolicy)...), 2},
		{append([]string{"triggers", "create", "t1"}, append(trig, "--policy", badPolicy)...), 2},
		{append([]string{"triggers", "create", "t1"}, append(trig, "--policy", allow, "--max-steps", "-1")...), 2},
		{append([]string{"triggers", "create", "dup"}, append(trig, "--policy", allow)...), 2},
		{[]string{"triggers", "create", "typo", "--on-agent", "nosuch", "--on", "completed", "--task", "x", "--model", "scripted:demo", "--workspace", ws, "--policy", allow}, 2},
		{append([]string{"schedules", "create", "s1"}, append(sched, "--policy", allow, "--every", "1s")...), 2},
		{[]string{"triggers", "create", "loop", "--on-agent", "keel-cli", "--on", "completed", "--task", "again", "--model", "scripted:demo", "--workspace", ws, "--policy", allow}, 2},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			lcode, lout, lerr := keel(t, c.args...)
			rcode, rout, rerr := keel(t, append([]string{"--server", s.url}, c.args...)...)
			lerr, rerr = withoutLog(lerr), withoutLog(rerr)
			// Every command a hint names acts where the command did.
			if n := strings.Count(rerr, "keel --server "+s.url+" "); n != strings.Count(lerr, "keel ") {
				t.Errorf("the server form's hints name keel --server URL %d times, the local form's keel %d times:\n%s", n, strings.Count(lerr, "keel "), rerr)
			}
			rerr = strings.ReplaceAll(rerr, "keel --server "+s.url+" ", "keel ")
			t.Logf("local %d %q\nserver %d %q", lcode, lerr, rcode, rerr)
			if lcode != c.code || rcode != c.code {
				t.Errorf("exit status local %d, server %d, want %d", lcode, rcode, c.code)
			}
			if lerr != rerr {
				t.Errorf("stderr differs:\nlocal:  %q\nserver: %q", lerr, rerr)
			}
			if m := libraryPrefix.FindString(lerr + rerr); m != "" {
				t.Errorf("a library's name in the message (%q):\nlocal:  %q\nserver: %q", m, lerr, rerr)
			}
			if lout != "" || rout != "" {
				t.Errorf("stdout: local %q, server %q", lout, rout)
			}
		})
	}

	// A denial without a reason says what the API, MCP and the web UI
	// say (report 15, R16).
	if _, _, errOut := keel(t, "deny", demoRun, "demo_4"); !strings.Contains(errOut, service.NoReason().Error()) {
		t.Errorf("keel deny without --reason: %q, want the service's words %q", errOut, service.NoReason())
	}

	for _, form := range [][]string{nil, {"--server", s.url}} {
		args := append(form, append([]string{"schedules", "create", "s1"}, append(sched, "--policy", badPolicy)...)...)
		if code, _, errOut := keel(t, args...); code != 2 || !strings.Contains(errOut, badPolicy+":") || strings.Contains(errOut, "api:") {
			t.Errorf("keel %v = %d %q, want 2 and the file named", form, code, errOut)
		}
	}

	// A decision executes the demo run on: both forms say what keel run
	// says of a scripted model's usage (trial 9, N4).
	if code, out, errOut := keel(t, "demo", "--no-wait"); code != 3 {
		t.Fatalf("keel demo --no-wait = %d\n%s%s", code, out, errOut)
	}
	demoRun2, _ := lastRun(t, db)
	const usageNote = "keel: a scripted model has no token usage"
	for _, c := range []struct {
		run  string
		form []string
	}{{demoRun, []string{"--server", s.url}}, {demoRun2, nil}} {
		code, _, errOut := keel(t, append(c.form, "deny", c.run, "demo_4", "--reason", "no")...)
		if code != 0 || strings.Count(errOut, usageNote) != 1 {
			t.Errorf("keel %v deny = %d, want 0 and the usage note once:\n%s", c.form, code, errOut)
		}
	}

	// The server form's undo hint of a rewind names the server. (The
	// fork above put back the files of event 2 in place: another run's
	// change, which a rewind of this run leaves alone; a fork at its
	// newest checkpoint gives the run's files back, which a rewind to
	// its first then replaces.)
	seqs := checkpointSeqs(t, done)
	if code, _, errOut := keel(t, "runs", "fork", done, "--at", strings.Fields(seqs[len(seqs)-1])[0], "--no-start"); code != 0 {
		t.Fatalf("keel runs fork in place = %d\n%s", code, errOut)
	}
	code, out, errOut := keel(t, "--server", s.url, "runs", "rewind", done, "--to", strings.Fields(seqs[0])[0])
	if code != 0 || !strings.Contains(out, "undo: keel --server "+s.url+" runs rewind "+done+" --to ") {
		t.Errorf("keel --server URL runs rewind = %d\n%s%s", code, out, errOut)
	}
	// Both forms say what became of the completed run: only its files
	// went back (report 15, P10: "files restored to the checkpoint of
	// event 2" read as if the run had gone back there).
	const stays = "the run stays completed: only its files went back, not its conversation; a follow-up message continues it"
	lcode, lout, lerr := keel(t, "runs", "rewind", done, "--to", strings.Fields(seqs[len(seqs)-1])[0])
	if code != 0 || lcode != 0 || !strings.Contains(out, stays) || !strings.Contains(lout, stays) {
		t.Errorf("runs rewind of a completed run: server %d %q, local %d %q%s; want both to say %q", code, out, lcode, lout, lerr, stays)
	}
}

// libraryPrefix matches the name of one of Keel's libraries starting a
// message or a part of one ("keel: agent: resolve approval ..."); a
// policy file named after "policy: " is the file's name, not a library's.
var libraryPrefix = regexp.MustCompile(`(^keel: |: )(agent|policy|telemetry|cost|token|identity|schedule|trigger|journal|memory|server|service): [a-z]`)

// withoutLog is stderr without the log's lines (warnings of slow steps on
// a loaded machine).
func withoutLog(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if !strings.HasPrefix(line, "time=") {
			b.WriteString(line)
		}
	}
	return b.String()
}
