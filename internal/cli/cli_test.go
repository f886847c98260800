package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/cli"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/sandbox/linux"
)

func TestMain(m *testing.M) {
	linux.Init()
	// The crash test re-executes this binary as the keel command.
	if args := os.Getenv("KEEL_TEST_MAIN"); args != "" {
		var argv []string
		if err := json.Unmarshal([]byte(args), &argv); err != nil {
			panic(err)
		}
		os.Exit(cli.Main(context.Background(), argv, os.Stdout, os.Stderr))
	}
	// The MCP conformance suite's client (TestMCPAuthConformance).
	if url := os.Getenv("KEEL_TEST_CONFORMANCE_URL"); url != "" {
		os.Exit(cli.Main(context.Background(), conformanceClientArgs(url), os.Stdout, os.Stderr))
	}
	// A TMPDIR of the tests' own: they fail when they leave anything
	// there (a demo's workspace, a server's scratch file).
	os.Exit(testenv.Main(m))
}

var trajectory = filepath.Join("..", "..", "testdata", "trajectories", "deepseek_chat_dev.traj.json")

func keel(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = cli.Main(t.Context(), args, &o, &e)
	return code, o.String(), e.String()
}

func setup(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	t.Setenv("KEEL_HOME", home)
	// What this process and the servers, workers and commands it starts
	// make with os.MkdirTemp (the demo's workspaces, which a demo keeps
	// for its user) lands in the test's own temporary directory, removed
	// with it.
	t.Setenv("TMPDIR", filepath.Dir(home))
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("ANTHROPIC_API_KEY", "")
	return filepath.Join(home, "keel.db")
}

func TestDemo(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	setup(t)
	code, out, errOut := keel(t, "demo", "--keep=false")
	if code != 0 {
		t.Fatalf("keel demo = %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	// The demo shows the gate on a first try: its edit asks, shown as a
	// diff; with stdin not a terminal a stand-in approves it, saying so.
	for _, want := range []string{"SCRIPTED DEMONSTRATION MODEL", "-    return len(text.split(\" \"))", "+    return len(text.split())", "hash chain verified", "run.completed",
		"call demo_4 (edit_file) needs a person's approval", "the edit (+1 −1)", "approved by keel demo (stand-in)", "approval.requested", "approval.resolved"} {
		if !strings.Contains(out+errOut, want) {
			t.Errorf("demo output lacks %q\nstdout:\n%s\nstderr:\n%s", want, out, errOut)
		}
	}
	if !strings.Contains(errOut, "OK") && !strings.Contains(errOut, "exit 0") {
		t.Errorf("the final test run should pass:\n%s", errOut)
	}
	// A fresh home: the default journal is created, saying where.
	if !strings.Contains(errOut, "keel.db did not exist: created a new journal there") {
		t.Errorf("the demo created its journal silently:\n%s", errOut)
	}
	// Each thing is said once: the ask (no "keel approve" hint: the
	// stand-in decides), the files changed (the start named as a commit,
	// not as a checkpoint), the answer (live, and under the timeline's
	// output).
	answer := "empty text are counted correctly; all tests pass."
	for want, n := range map[string]int{"the demo asks a person before the agent edits a file": 1, "approval needed": 0,
		"1 file(s) changed since the run started at commit ": 1, "(its first checkpoint: event 2)": 1, answer: 2} {
		if got := strings.Count(out+errOut, want); got != n {
			t.Errorf("demo output says %q %d times, want %d\nstdout:\n%s\nstderr:\n%s", want, got, n, out, errOut)
		}
	}
	// The run is in the default journal.
	code, out, _ = keel(t, "runs", "list")
	if code != 0 || !strings.Contains(out, "completed") {
		t.Errorf("runs list = %d:\n%s", code, out)
	}
	// A handoff of the completed run says "hand off", not "resume"
	// (trial 6, F24).
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) == 2 {
		hcode, _, herr := keel(t, "runs", "handoff", strings.Fields(lines[1])[0])
		if hcode == 0 || !strings.Contains(herr, "nothing to hand off") || strings.Contains(herr, "resume") {
			t.Errorf("runs handoff of a completed run = %d:\n%s", hcode, herr)
		}
	} else {
		t.Errorf("runs list:\n%s", out)
	}
	// --keep=false removed its workspace (named in the header).
	m := regexp.MustCompile(`workspace (\S+) → /workspace`).FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("no workspace in the demo's header:\n%s", errOut)
	}
	if _, err := os.Stat(m[1]); !errors.Is(err, os.ErrNotExist) || strings.Contains(errOut, "stays in") {
		t.Errorf("keel demo --keep=false left %s (%v):\n%s", m[1], err, errOut)
	}
	// Kept (the default), the workspace is named with how to remove it.
	code, _, errOut = keel(t, "demo")
	m = regexp.MustCompile(`the demo workspace stays in (\S+) \(remove it with: rm -rf (\S+);`).FindStringSubmatch(errOut)
	if code != 0 || m == nil || m[1] != m[2] {
		t.Fatalf("keel demo = %d, stderr lacks where its workspace stays:\n%s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(m[1], "textstats.py")); err != nil {
		t.Errorf("the kept demo workspace: %v", err)
	}
}

// keel demo --no-wait stops at the demo's approval; denied, the edit
// does not happen, and the scripted model says so instead of claiming
// that the tests pass.
func TestDemoDeniedEditIsNotClaimed(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	db := setup(t)
	// Its help says what --no-wait changes for the demo, not keel run's
	// default.
	if code, out, _ := keel(t, "demo", "--help"); code != 0 || !strings.Contains(out, "exit 3 instead of approving as a stand-in") || strings.Contains(out, "default when stdin is not a terminal") {
		t.Errorf("keel demo --help = %d:\n%s", code, out)
	}
	code, out, errOut := keel(t, "demo", "--no-wait")
	if code != 3 || !strings.Contains(errOut, "keel deny") {
		t.Fatalf("keel demo --no-wait = %d, want 3 at the approval\n%s%s", code, out, errOut)
	}
	// Paused: the timeline; textstats.py is not changed yet (files git
	// ignores that run on their own, __pycache__, may be listed).
	// Its hint is what the person types: keel, not keel --db with
	// KEEL_HOME's default journal.
	id, _ := lastRun(t, db)
	if !strings.Contains(out, "== timeline (keel runs show "+id+")") || !strings.Contains(out, "hash chain verified") || strings.Contains(out, "M textstats.py") {
		t.Errorf("keel demo --no-wait's stdout: want the timeline and textstats.py unchanged:\n%s", out)
	}
	code, out, errOut = keel(t, "deny", id, "demo_4", "--reason", "not now")
	id, st := lastRun(t, db)
	// A person's no ends the demo as an answer saying what did not
	// happen, not as a "model error (mismatch)" (fresh-user trial 6, F7).
	if code != 0 || st.Status != journal.StatusCompleted {
		t.Fatalf("deny = %d, run %s %s; want 0 and completed\n%s%s", code, id, st.Status, out, errOut)
	}
	if strings.Contains(out+errOut, "all tests pass") || strings.Contains(out+errOut, "model error") || st.Ended == nil ||
		!strings.Contains(st.Ended.Output, "You denied the edit of textstats.py (not now), so the demo stops here: nothing changed") {
		t.Errorf("the run claims what did not happen, or does not say what: %+v\n%s%s", st.Ended, out, errOut)
	}
}

// keel demo --keep=false keeps the workspace of a run that waits for a
// person (--no-wait, or Ctrl-C at the question), says so, and the run
// can be approved and goes on there (fresh-user trial 12, N14: the
// workspace was removed, and keel approve then failed).
func TestDemoKeepFalseKeepsAPausedRunsWorkspace(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	db := setup(t)
	code, out, errOut := keel(t, "demo", "--no-wait", "--keep=false")
	if code != 3 {
		t.Fatalf("keel demo --no-wait --keep=false = %d, want 3 at the approval\n%s%s", code, out, errOut)
	}
	m := regexp.MustCompile(`workspace (\S+) → /workspace`).FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("no workspace in the demo's header:\n%s", errOut)
	}
	if _, err := os.Stat(filepath.Join(m[1], "textstats.py")); err != nil || !strings.Contains(errOut, "is paused, so its workspace stays in "+m[1]) {
		t.Fatalf("the paused demo's workspace: %v\n%s", err, errOut)
	}
	id, _ := lastRun(t, db)
	code, out, errOut = keel(t, "approve", id, "demo_4")
	if _, st := lastRun(t, db); code != 0 || st.Status != journal.StatusCompleted {
		t.Errorf("approve = %d, run %s; want 0 and completed\n%s%s", code, st.Status, out, errOut)
	}
}

// The scripted demo model on any other workspace (a real repository, as
// a server's runs:write token could ask for) changes nothing and fails,
// saying why, instead of a fake completed run.
func TestScriptedModelOnlyOnItsProject(t *testing.T) {
	db := setup(t)
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "main.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := keel(t, "run", "--model", "scripted:demo", "--workspace", ws, "--sandbox", "none", "fix the tests")
	_, st := lastRun(t, db)
	if code != 1 || st.Status != journal.StatusFailed || st.Ended == nil || !strings.Contains(st.Ended.Message, "not the demo's bundled project") {
		t.Fatalf("run = %d, %s %+v; want 1, failed, not the demo's project\n%s%s", code, st.Status, st.Ended, out, errOut)
	}
	if strings.Contains(out+errOut, "all tests pass") {
		t.Errorf("the scripted model claims what did not happen:\n%s%s", out, errOut)
	}
}

func TestUsageErrors(t *testing.T) {
	setup(t)
	ws := t.TempDir()
	for _, tt := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no model", []string{"run", "task"}, 2, "keel demo"},
		{"bad spec", []string{"run", "--model", "gpt4", "task"}, 2, "PROVIDER:MODEL"},
		{"unknown provider", []string{"run", "--model", "foo:bar", "task"}, 2, "unknown provider"},
		{"missing openai key", []string{"run", "--model", "openai:gpt-4o", "--workspace", ws, "task"}, 2, "OPENAI_API_KEY"},
		{"missing anthropic key", []string{"run", "--model", "anthropic:claude-sonnet-4-5", "--workspace", ws, "task"}, 2, "ANTHROPIC_API_KEY"},
		{"bad env", []string{"run", "--model", "openai:x", "--env", "NOEQUALS", "--workspace", ws, "task"}, 2, "KEY=VALUE"},
		{"workspace missing", []string{"run", "--model", "openai:x", "--workspace", "/nonexistent/dir", "task"}, 2, "not a directory"},
		{"relative mount", []string{"run", "--model", "openai:x", "--workspace", ws, "--mount-path", "rel", "task"}, 2, "absolute"},
		{"bad sandbox", []string{"run", "--model", "openai:x", "--workspace", ws, "--sandbox", "docker", "task"}, 2, "linux or none"},
		{"no task", []string{"run", "--model", "openai:x", "--workspace", ws}, 2, "no task"},
		{"bad flag", []string{"run", "--no-such-flag"}, 2, "unknown flag"},
		{"missing trajectory", []string{"run", "--model", "replay:/nonexistent.json", "--workspace", ws}, 2, "replay:/nonexistent.json: no such trajectory file"},
		{"mount path /etc", []string{"run", "--model", "replay:" + trajectory, "--workspace", ws, "--mount-path", "/etc", "task"}, 2, "which the sandbox provides itself"},
		{"mount path /", []string{"run", "--model", "replay:" + trajectory, "--workspace", ws, "--mount-path", "/", "task"}, 2, "other than /"},
		{"mount path not clean", []string{"run", "--model", "replay:" + trajectory, "--workspace", ws, "--mount-path", "/workspace/../etc", "task"}, 2, "clean path"},
		{"empty allowed host", []string{"run", "--model", "replay:" + trajectory, "--workspace", ws, "--allow-host", "", "task"}, 2, "not a host name"},
		{"bad allowed host", []string{"run", "--model", "replay:" + trajectory, "--workspace", ws, "--allow-host", "bad host!", "task"}, 2, "not a host name"},
		{"unknown run", []string{"runs", "show", "nosuchrun"}, 2, "no run \"nosuchrun\""},
		{"schedule without model", []string{"schedules", "create", "nightly", "--cron", "0 3 * * *", "--task", "tidy", "--workspace", ws}, 2, "pass --model"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := keel(t, tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.want) {
				t.Errorf("keel %v = %d, stderr %q; want %d containing %q", tt.args, code, errOut, tt.code, tt.want)
			}
		})
	}
}

func TestBadConfig(t *testing.T) {
	home := t.TempDir()
	t.Setenv("KEEL_HOME", home)
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte("modle = \"openai:x\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := keel(t, "runs", "list")
	if code != 2 || !strings.Contains(errOut, `unknown key "modle"`) {
		t.Errorf("keel with a typo in config.toml = %d %q", code, errOut)
	}
}

func lastRun(t *testing.T, db string) (string, *agent.State) {
	t.Helper()
	s, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	all, err := s.Runs(t.Context(), nil)
	var runs []journal.RunSummary
	for _, r := range all {
		if !journal.IsSystem(r.RunID) { // the memory stream, the identity directory...
			runs = append(runs, r)
		}
	}
	if err != nil || len(runs) == 0 {
		t.Fatalf("runs: %v %v", all, err)
	}
	st, _, err := agent.NewRuntime(s, nil).Load(t.Context(), runs[0].RunID)
	if err != nil {
		t.Fatal(err)
	}
	return runs[0].RunID, st
}

func checkOneResultPerCall(t *testing.T, st *agent.State) {
	t.Helper()
	n := 0
	for _, turn := range st.Turns {
		for _, c := range turn.Calls {
			n++
			if c.Finished == nil {
				t.Errorf("call %s has no result", c.ID)
			}
		}
	}
	if n == 0 {
		t.Error("no tool calls")
	}
}

// A recorded 74-turn trajectory replayed on an empty workspace: the
// commands fail for real (there is no repository), the run still follows
// the recording to its completion marker.
func TestReplayRun(t *testing.T) {
	db := setup(t)
	ws := t.TempDir()
	code, out, errOut := keel(t, "run", "--model", "replay:"+trajectory, "--workspace", ws, "--mount-path", "/testbed", "--env", "PYTHONPATH=/testbed/src", "--json")
	if code != 0 {
		t.Fatalf("keel run = %d\n%s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var first, last journal.Event
	json.Unmarshal([]byte(lines[0]), &first)
	json.Unmarshal([]byte(lines[len(lines)-1]), &last)
	if first.Type != journal.RunCreated || last.Type != journal.RunCompleted || first.Seq != 1 || last.Seq != int64(len(lines)) {
		t.Errorf("--json stream: first %s #%d, last %s #%d of %d lines", first.Type, first.Seq, last.Type, last.Seq, len(lines))
	}
	id, st := lastRun(t, db)
	if st.Steps != 74 || st.Ended.Reason != "marker" {
		t.Errorf("steps %d, end %+v", st.Steps, st.Ended)
	}
	checkOneResultPerCall(t, st)
	code, out, _ = keel(t, "runs", "show", id)
	if code != 0 || !strings.Contains(out, "hash chain verified") || !strings.Contains(out, "74 steps") {
		t.Errorf("runs show = %d:\n%s", code, out)
	}
}

// kill -9 of a real keel process in the middle of a replayed run, then
// `keel runs resume`: the run completes and every tool call has exactly
// one result.
func TestKillAndResume(t *testing.T) {
	setup(t)
	for _, killAt := range []int64{3, 40, 150} {
		t.Run(fmt.Sprint("after_event_", killAt), func(t *testing.T) {
			t.Parallel() // a journal and a workspace of its own
			ws := t.TempDir()
			db := filepath.Join(t.TempDir(), "kill.db")
			args, _ := json.Marshal([]string{"run", "--db", db, "--model", "replay:" + trajectory, "--workspace", ws, "--mount-path", "/testbed", "-q"})
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(args))
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			id := waitForEvent(t, db, killAt)
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			code, _, errOut := keel(t, "runs", "resume", "--db", db, id)
			if code != 0 {
				t.Fatalf("resume = %d\n%s", code, errOut)
			}
			_, st := lastRun(t, db)
			if st.Status != journal.StatusCompleted || st.Steps != 74 {
				t.Errorf("after resume: %s, %d steps", st.Status, st.Steps)
			}
			checkOneResultPerCall(t, st)
		})
	}
}

// waitForEvent follows the newest run in db until it has at least n
// events, and returns its id.
func waitForEvent(t *testing.T, db string, n int64) string {
	t.Helper()
	return waitFor(t, db, func(e *journal.Event) bool { return e.Seq >= n })
}

// waitFor follows the newest run in db until one of its events satisfies
// ok, and returns its id. Waiting for the event itself, rather than for
// an event count, keeps a kill point right when the run's events change
// (a new event type, one more event on a loaded machine).
func waitFor(t *testing.T, db string, ok func(*journal.Event) bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var s *sqlite.Store
	for s == nil {
		if _, err := os.Stat(db); err == nil {
			s, _ = sqlite.Open(db, nil)
		}
		if ctx.Err() != nil {
			t.Fatal("journal never appeared")
		}
		runtimeGosched()
	}
	defer s.Close()
	for {
		runs, _ := s.Runs(ctx, &journal.ListParams{Limit: 1})
		if len(runs) == 1 {
			for e, err := range journal.Follow(ctx, s, runs[0].RunID, 1, 5*time.Millisecond) {
				if err != nil {
					t.Fatal(err)
				}
				if ok(&e) {
					return runs[0].RunID
				}
			}
			t.Fatal("run ended before the kill point")
		}
		if ctx.Err() != nil {
			t.Fatal("no run appeared")
		}
		runtimeGosched()
	}
}

// Egress decisions of the sandbox's proxy are journaled in the run: an
// allowed host name and a refused raw IP address.
func TestEgressDecisionsJournaled(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("SKIPPED LOUDLY: curl is not installed (.ci/run installs it)")
	}
	db := setup(t)
	ws := t.TempDir()
	fixture := filepath.Join("..", "..", "testdata", "trajectories", "egress.traj.json")
	code, _, errOut := keel(t, "run", "--model", "replay:"+fixture, "--workspace", ws, "--allow-host", "example.com")
	if code != 0 {
		t.Fatalf("keel run = %d\n%s", code, errOut)
	}
	id, _ := lastRun(t, db)
	s, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	evs, err := journal.ReadVerified(t.Context(), s, id)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		if e.Type != journal.SandboxEgress {
			continue
		}
		var d agent.SandboxEgress
		json.Unmarshal(e.Payload, &d)
		got = append(got, fmt.Sprintf("%s:%d allowed=%v", d.Host, d.Port, d.Allowed))
	}
	want := []string{"example.com:443 allowed=true", "93.184.215.14:80 allowed=false"}
	if strings.Join(got, ";") != strings.Join(want, ";") {
		t.Errorf("egress events = %v, want %v", got, want)
	}
}

func TestLimitFlags(t *testing.T) {
	setup(t)
	ws := t.TempDir()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--memory", "lots"}, "--memory"},
		{[]string{"--memory", "1MiB"}, "too small"},
		{[]string{"--processes", "-1"}, "negative"},
	} {
		args := append([]string{"run", "--model", "replay:" + trajectory, "--workspace", ws}, tt.args...)
		code, _, errOut := keel(t, args...)
		if code != 2 || !strings.Contains(errOut, tt.want) {
			t.Errorf("keel %v = %d %q, want 2 and %q", tt.args, code, errOut, tt.want)
		}
	}
}

// The sandbox's git guard quarantines a config that would make host git
// run code, and the run's journal records it.
func TestGitPlantQuarantinedAndJournaled(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("SKIPPED LOUDLY: git is not installed (.ci/run installs it)")
	}
	db := setup(t)
	ws := t.TempDir()
	fixture := filepath.Join("..", "..", "testdata", "trajectories", "git-plant.traj.json")
	code, _, errOut := keel(t, "run", "--model", "replay:"+fixture, "--workspace", ws)
	if code != 0 {
		t.Fatalf("keel run = %d\n%s", code, errOut)
	}
	id, st := lastRun(t, db)
	s, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	evs, err := journal.ReadVerified(t.Context(), s, id)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs {
		if e.Type == journal.SandboxQuarantine && strings.Contains(string(e.Payload), "sub/.git/config") {
			found = true
		}
	}
	if !found {
		t.Errorf("no sandbox.quarantine event for sub/.git/config; result: %q", st.Turns[0].Calls[0].Finished.Content)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "sub", ".git", "config")); err == nil && strings.Contains(string(b), "fsmonitor") {
		t.Errorf("the planted config is still in place:\n%s", b)
	}
}

// SIGINT, SIGTERM and SIGHUP (the terminal closed) in the middle of a run
// cancel it cleanly: exit status 130, the run canceled, every tool call
// with its result; `keel runs resume` then completes it. Two signals at
// once (a supervisor signalling the process group, two quick Ctrl-Cs)
// close it as cleanly: the second does not exit before the record.
func TestSignalsCancelCleanly(t *testing.T) {
	setup(t)
	unignoreHangup()
	// Three signals exit at once (internal/tui, TestSignalContextThirdSignalExits):
	// the run is canceled if the close won the race, else left
	// interrupted, and either way resumes.
	for _, sigs := range [][]syscall.Signal{{syscall.SIGINT}, {syscall.SIGTERM}, {syscall.SIGHUP}, {syscall.SIGINT, syscall.SIGTERM}, {syscall.SIGINT, syscall.SIGINT, syscall.SIGINT}} {
		sig := sigs[0]
		name := sig.String()
		for _, s := range sigs[1:] {
			name += "+" + s.String()
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel() // a journal and a workspace of its own
			ws := t.TempDir()
			db := filepath.Join(t.TempDir(), "sig.db")
			args, _ := json.Marshal([]string{"run", "--db", db, "--model", "replay:" + trajectory, "--workspace", ws, "--mount-path", "/testbed", "-q"})
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(args))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			id := waitForEvent(t, db, 20)
			for _, s := range sigs {
				cmd.Process.Signal(s)
			}
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 130 {
				t.Fatalf("after %s: %v, want exit status 130\nstderr:\n%s\nlast events:\n%s", name, err, stderr.String(), lastEvents(t, db, id, 8))
			}
			_, st := lastRun(t, db)
			switch {
			case len(sigs) == 3 && st.Status == journal.StatusRunning:
				if !strings.Contains(stderr.String(), "exiting at once (a third signal)") {
					t.Errorf("after %s the run is left running, and stderr does not say so:\n%s", name, stderr.String())
				}
			case st.Status != journal.StatusCanceled:
				t.Errorf("after %s: run %s", name, st.Status)
			default:
				checkOneResultPerCall(t, st)
			}
			if code, _, errOut := keel(t, "runs", "resume", "--db", db, id); code != 0 {
				t.Fatalf("resume = %d\n%s", code, errOut)
			}
		})
	}
}

// A signal while the run starts (here while an MCP server, which never
// answers, is being connected) stops keel run as one during the run
// does: exit status 130, "canceled", no runtime error, and no run left
// behind as running.
func TestSignalDuringStartCancels(t *testing.T) {
	unignoreHangup()
	setup(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			ws := t.TempDir()
			db := filepath.Join(t.TempDir(), "sig.db")
			args, _ := json.Marshal([]string{"run", "--db", db, "--model", "replay:" + trajectory, "--workspace", ws, "--mount-path", "/testbed", "-q",
				"--mcp", "slow=sh -c 'touch /testbed/mcp-started; exec sleep 300'"})
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN="+string(args))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			for {
				if _, err := os.Stat(filepath.Join(ws, "mcp-started")); err == nil {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("the MCP server never started; stderr:\n%s", stderr.String())
				}
				runtimeGosched()
			}
			cmd.Process.Signal(sig)
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 130 {
				t.Fatalf("after %s: %v, want exit status 130\nstderr:\n%s", sig, err, stderr.String())
			}
			if got := stderr.String(); !strings.Contains(got, "keel: canceled") || strings.Contains(got, "context canceled") {
				t.Errorf("after %s, stderr:\n%s\nwant \"keel: canceled\" and no runtime error", sig, got)
			}
			if s, err := sqlite.Open(db, nil); err == nil {
				defer s.Close()
				runs, err := s.Runs(t.Context(), &journal.ListParams{Status: []journal.Status{journal.StatusRunning}})
				if err != nil || len(runs) != 0 {
					t.Errorf("runs left running: %v %v", runs, err)
				}
			}
		})
	}
}

// lastEvents describes the last n events of run id in db, for failure
// messages.
func lastEvents(t *testing.T, db, id string, n int) string {
	t.Helper()
	s, err := sqlite.Open(db, nil)
	if err != nil {
		return err.Error()
	}
	defer s.Close()
	evs, err := s.Read(t.Context(), id, 1)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range evs[max(0, len(evs)-n):] {
		fmt.Fprintf(&b, "#%d %s %s %.300s\n", e.Seq, e.Time.Format(time.RFC3339Nano), e.Type, e.Payload)
	}
	return b.String()
}

// A listing written to a pipe whose reader has gone (keel runs list |
// head -1) ends quietly: exit 0, no "broken pipe" error.
func TestClosedStdoutEndsQuietly(t *testing.T) {
	db := setup(t)
	traj := writeTrajectory(t, "say done", []fcall{sh("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")})
	if code, _, errOut := keel(t, "run", "--db", db, "--model", "replay:"+traj, "--workspace", t.TempDir(), "--sandbox", "none", "-q"); code != 0 {
		t.Fatalf("keel run = %d\n%s", code, errOut)
	}
	id, _ := lastRun(t, db)
	for _, args := range [][]string{
		{"runs", "list"}, {"runs", "list", "--json"}, {"runs", "show", id}, {"runs", "show", id, "--json"},
		{"agents", "list"}, {"policy", "default"}, {"config", "show"},
	} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
		var stderr bytes.Buffer
		code := cli.Main(t.Context(), append(args, "--db", db), w, &stderr)
		w.Close()
		if code != 0 || stderr.Len() > 0 {
			t.Errorf("keel %v | (reader gone) = %d, stderr %q; want 0 and nothing", args, code, stderr.String())
		}
	}
	// Other errors still fail.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	var stderr bytes.Buffer
	if code := cli.Main(t.Context(), []string{"runs", "show", "--db", db, "no-such-run"}, w, &stderr); code == 0 || stderr.Len() == 0 {
		t.Errorf("keel runs show no-such-run = %d, stderr %q; want an error", code, stderr.String())
	}
}

// unignoreHangup lets the keel processes a test starts see SIGHUP when
// the test itself runs under nohup: keel keeps an ignored SIGHUP ignored
// (nohup keel run ... goes on after the terminal closes), and exec
// passes an ignored signal on, but resets a caught one to its default.
func unignoreHangup() {
	if signal.Ignored(syscall.SIGHUP) {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	}
}
