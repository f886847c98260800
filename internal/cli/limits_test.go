package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
)

// A run without limit flags gets the documented defaults (docs/limits.md):
// room for runs of hours, a bound on runaways.
func TestDefaultRunLimits(t *testing.T) {
	db := setup(t)
	traj := writeTrajectory(t, "answer", nil)
	if code, _, errOut := keel(t, "run", "--model", "replay:"+traj, "--workspace", t.TempDir(), "-q"); code != 0 {
		t.Fatalf("keel run = %d\n%s", code, errOut)
	}
	_, st := lastRun(t, db)
	want := agent.Limits{MaxSteps: 500, MaxTokens: 100_000_000, MaxCost: 50, Timeout: agent.Duration(12 * time.Hour)}
	if st.Created.Limits != want {
		t.Errorf("limits = %+v, want %+v", st.Created.Limits, want)
	}
}

// A run stopped by a limit says which one and the command that goes on;
// that command continues the run to its end.
func TestLimitStopSaysHowToGoOn(t *testing.T) {
	db := setup(t)
	traj := writeTrajectory(t, "three steps", []fcall{sh("true")}, []fcall{sh("true")}, []fcall{sh("true")}, nil)
	ws := t.TempDir()
	code, _, errOut := keel(t, "run", "--model", "replay:"+traj, "--workspace", ws, "--max-steps", "2")
	if code != 1 {
		t.Fatalf("keel run --max-steps 2 = %d, want 1\n%s", code, errOut)
	}
	id, _ := lastRun(t, db)
	for _, want := range []string{"step limit reached: 2 model calls", "to go on, raise the limit: keel runs resume " + id + " --max-steps 4"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	// Under the same limit it would stop at once: refused, saying so
	// (nothing journaled).
	if code, _, errOut := keel(t, "runs", "resume", id, "--message", "go on"); code != 2 || !strings.Contains(errOut, "raise max_steps (--max-steps), to 4 for example") {
		t.Errorf("keel runs resume under the same limit = %d, want 2 saying how to raise it\n%s", code, errOut)
	}
	if code, _, errOut := keel(t, "runs", "resume", id, "--max-steps", "4"); code != 0 {
		t.Fatalf("keel runs resume --max-steps 4 = %d\n%s", code, errOut)
	}
	if _, st := lastRun(t, db); st.Ended == nil || st.Ended.Reason != "answer" || st.Steps != 4 {
		t.Errorf("after the resume: %+v, %d steps", st.Ended, st.Steps)
	}
}

// A run stopped by its tool-call limit says how to go on, and the
// resume takes --max-tool-calls (new-user trial 19, R3: the refusal said
// to raise it, and no flag did).
func TestToolCallLimitStopSaysHowToGoOn(t *testing.T) {
	db := setup(t)
	traj := writeTrajectory(t, "three calls", []fcall{sh("true")}, []fcall{sh("true")}, []fcall{sh("true")}, nil)
	code, _, errOut := keel(t, "run", "--model", "replay:"+traj, "--workspace", t.TempDir(), "--max-tool-calls", "2")
	if code != 1 {
		t.Fatalf("keel run --max-tool-calls 2 = %d, want 1\n%s", code, errOut)
	}
	id, _ := lastRun(t, db)
	if want := "to go on, raise the limit: keel runs resume " + id + " --max-tool-calls 4"; !strings.Contains(errOut, want) {
		t.Errorf("stderr lacks %q:\n%s", want, errOut)
	}
	if code, _, errOut := keel(t, "runs", "resume", id); code != 2 || !strings.Contains(errOut, "raise max_tool_calls (--max-tool-calls), to 4 for example") {
		t.Errorf("keel runs resume under the same limit = %d, want 2\n%s", code, errOut)
	}
	if code, _, errOut := keel(t, "runs", "resume", id, "--max-tool-calls", "4"); code != 0 {
		t.Fatalf("keel runs resume --max-tool-calls 4 = %d\n%s", code, errOut)
	}
	if _, st := lastRun(t, db); st.Ended == nil || st.Ended.Reason != "answer" {
		t.Errorf("after the resume: %+v", st.Ended)
	}
}

// A run stopped by loop detection says how to go on; a person's message
// lets the model continue.
func TestLoopStopSaysHowToGoOn(t *testing.T) {
	db := setup(t)
	same := []fcall{sh("echo same")}
	traj := writeTrajectory(t, "loop", same, same, same, same, same, []fcall{sh("echo different")}, nil)
	code, _, errOut := keel(t, "run", "--model", "replay:"+traj, "--workspace", t.TempDir())
	if code != 1 {
		t.Fatalf("keel run = %d, want 1\n%s", code, errOut)
	}
	id, st := lastRun(t, db)
	want := "to go on, tell the model what to do differently: keel runs resume " + id + " --message TEXT"
	if st.Ended == nil || st.Ended.Reason != "repeated_calls" || !strings.Contains(errOut, want) {
		t.Fatalf("ended %+v; stderr lacks %q:\n%s", st.Ended, want, errOut)
	}
	if code, _, errOut := keel(t, "runs", "resume", id, "--message", "try something else"); code != 0 {
		t.Fatalf("keel runs resume --message = %d\n%s", code, errOut)
	}
}

// Hints printed after a run with --db name that journal, so pasting one
// does not open (or create) the default journal instead; an unknown
// subcommand and an empty --db are usage errors, not help and exit 0 or
// the default journal.
func TestHintsNameTheJournal(t *testing.T) {
	setup(t)
	db := t.TempDir() + "/team.db"
	traj := writeTrajectory(t, "three steps", []fcall{sh("true")}, []fcall{sh("true")}, nil)
	code, _, errOut := keel(t, "run", "--db", db, "--model", "replay:"+traj, "--workspace", t.TempDir(), "--max-steps", "1")
	if code != 1 || !strings.Contains(errOut, "keel --db "+db+" runs resume ") {
		t.Errorf("keel run --db --max-steps 1 = %d, want a hint naming --db:\n%s", code, errOut)
	}
	for _, args := range [][]string{{"runs", "lsit", "--db", db}, {"--db=", "runs", "list"}, {"audit", "bogus"}} {
		if code, _, errOut := keel(t, args...); code != 2 {
			t.Errorf("keel %q = %d, want 2\n%s", args, code, errOut)
		}
	}
}

// A mistyped db in config.toml is refused like a mistyped --db, by the
// commands that only read a journal; the default journal is still
// created on first use.
func TestConfigDBTypoRefused(t *testing.T) {
	setup(t)
	home := t.TempDir()
	t.Setenv("KEEL_HOME", home)
	missing := filepath.Join(t.TempDir(), "nonexist.db")
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte("db = \""+missing+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := keel(t, "runs", "list"); code != 2 || !strings.Contains(errOut, "db in ") {
		t.Errorf("runs list with a mistyped config db = %d, want 2\n%s", code, errOut)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("%s was created", missing)
	}
}

// keel --server URL run applies the [run] defaults of config.toml as keel
// run does (fresh-user trial 13, P11: the server form ignored them, and
// a run configured for 2 steps and $7 ran with the server's 500 and
// $50).
func TestServerRunTakesConfigDefaults(t *testing.T) {
	db := setup(t)
	if err := os.WriteFile(filepath.Join(os.Getenv("KEEL_HOME"), "config.toml"), []byte("[run]\nmax_steps = 2\nmax_cost = 7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServe(t)
	var limits []agent.Limits
	for _, form := range [][]string{nil, {"--server", s.url}} {
		code, _, errOut := keel(t, append(form, "run", "--model", "scripted:demo", "--workspace", demoProject(t), "-q", "fix it")...)
		if code != 1 || !strings.Contains(errOut, "max_steps") {
			t.Errorf("keel %v run = %d, want 1 at the configured step limit\n%s", form, code, errOut)
		}
		_, st := lastRun(t, db)
		limits = append(limits, st.Limits)
	}
	if limits[0].MaxSteps != 2 || limits[0].MaxCost != 7 || limits[0] != limits[1] {
		t.Errorf("limits journaled: local %+v, server %+v; want max_steps 2 and max_cost 7 in both", limits[0], limits[1])
	}
}
