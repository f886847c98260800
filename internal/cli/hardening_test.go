package cli_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// keelBounded is keel with a deadline: a run that hangs (on a FIFO, say)
// fails the test instead of stopping the suite.
func keelBounded(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	type res struct {
		code     int
		out, err string
	}
	done := make(chan res, 1)
	go func() {
		c, o, e := keel(t, args...)
		done <- res{c, o, e}
	}()
	select {
	case r := <-done:
		return r.code, r.out, r.err
	case <-time.After(2 * time.Minute):
		t.Fatalf("keel %v did not return within two minutes (blocked on a file?)", args)
		return 0, "", ""
	}
}

// Memory files are read only when they are regular files inside their
// directory: not through a link to a secret the sandbox hides, not from
// a FIFO (the open would block forever), not from /dev/zero (it never
// ends).
func TestMemoryFilesOnlyRegular(t *testing.T) {
	db := setup(t)
	home := os.Getenv("KEEL_HOME")
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("HOST-SECRET-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	if err := os.Symlink(secret, filepath.Join(ws, "AGENTS.md")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(ws, "KEEL.md"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(home, "AGENTS.md")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "KEEL.md"), []byte("Answer in English.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := keelBounded(t, "run", "--model", "replay:"+trajectory, "--workspace", ws, "--max-steps", "1", "-q")
	if code != 1 {
		t.Fatalf("keel run = %d, want 1 (step limit)\n%s", code, errOut)
	}
	_, st := lastRun(t, db)
	if strings.Contains(st.Created.Memory, "HOST-SECRET") || !strings.Contains(st.Created.Memory, "Answer in English.") {
		t.Errorf("memory:\n%s", st.Created.Memory)
	}
	for _, want := range []string{"memory file " + filepath.Join(ws, "AGENTS.md") + " not read", "memory file " + filepath.Join(ws, "KEEL.md") + " not read", "a FIFO", "memory file " + filepath.Join(home, "AGENTS.md") + " not read"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}

	// A link that stays inside the workspace is not followed either: it
	// may lead to a file the policy denies (fresh-user trial 7, P3).
	os.Remove(filepath.Join(ws, "AGENTS.md"))
	os.Remove(filepath.Join(ws, "KEEL.md"))
	os.WriteFile(filepath.Join(ws, "docs.md"), []byte("Run make check.\n"), 0o644)
	os.Symlink("docs.md", filepath.Join(ws, "AGENTS.md"))
	code, _, errOut = keelBounded(t, "run", "--model", "replay:"+trajectory, "--workspace", ws, "--max-steps", "1", "-q")
	if code != 1 {
		t.Fatalf("keel run = %d\n%s", code, errOut)
	}
	if _, st = lastRun(t, db); strings.Contains(st.Created.Memory, "Run make check.") || !strings.Contains(errOut, "not a symbolic or second hard link") {
		t.Errorf("memory through a link inside the workspace:\n%s\nstderr:\n%s", st.Created.Memory, errOut)
	}
}

// Keel's directory (config.toml, which can turn the sandbox off, the
// server token, the default journal) is refused inside the workspace, as
// the journal is, and so is a config.toml that leads into it.
func TestKeelHomeOutsideWorkspace(t *testing.T) {
	setup(t)
	db := filepath.Join(t.TempDir(), "keel.db")
	run := func(ws string) (int, string) {
		code, _, errOut := keelBounded(t, "run", "--db", db, "--model", "replay:"+trajectory, "--workspace", ws, "--max-steps", "1", "-q")
		return code, errOut
	}

	ws := t.TempDir()
	t.Setenv("KEEL_HOME", filepath.Join(ws, ".kh"))
	if code, errOut := run(ws); code != 2 || !strings.Contains(errOut, "(KEEL_HOME) is inside the workspace") {
		t.Errorf("KEEL_HOME inside the workspace: keel run = %d\n%s", code, errOut)
	}
	// With the default journal (in KEEL_HOME), the advice that fixes both
	// comes first: move KEEL_HOME (fresh-user trial 6: --db first, then a
	// second error about KEEL_HOME).
	if code, _, errOut := keelBounded(t, "run", "--model", "replay:"+trajectory, "--workspace", ws, "--max-steps", "1", "-q"); code != 2 || !strings.Contains(errOut, "(KEEL_HOME) is inside the workspace") {
		t.Errorf("KEEL_HOME and its journal inside the workspace: keel run = %d\n%s", code, errOut)
	}

	home := t.TempDir()
	t.Setenv("KEEL_HOME", home)
	os.WriteFile(filepath.Join(ws, "cfg.toml"), []byte("model = \"openai:x\"\n"), 0o644)
	if err := os.Symlink(filepath.Join(ws, "cfg.toml"), filepath.Join(home, "config.toml")); err != nil {
		t.Fatal(err)
	}
	if code, errOut := run(ws); code != 2 || !strings.Contains(errOut, "config.toml leads into the workspace") {
		t.Errorf("config.toml linked into the workspace: keel run = %d\n%s", code, errOut)
	}

	os.Remove(filepath.Join(home, "config.toml"))
	if err := os.Link(filepath.Join(ws, "cfg.toml"), filepath.Join(home, "config.toml")); err != nil {
		t.Skipf("no hard link across these directories: %v", err)
	}
	if code, errOut := run(ws); code != 2 || !strings.Contains(errOut, "hard links") {
		t.Errorf("config.toml hard-linked into the workspace: keel run = %d\n%s", code, errOut)
	}

	os.Remove(filepath.Join(home, "config.toml"))
	if code, errOut := run(ws); code != 1 {
		t.Errorf("KEEL_HOME outside the workspace: keel run = %d, want 1 (step limit)\n%s", code, errOut)
	}
}

// A context window below the run's fixed part plus the minimum room is
// refused with the numbers, on run and on resume; the floor itself is
// accepted.
func TestContextWindowFloor(t *testing.T) {
	db := setup(t)
	ws := t.TempDir()
	code, _, errOut := keel(t, "run", "--model", "replay:"+trajectory, "--workspace", ws, "--mount-path", "/testbed", "--context-window", "3000", "-q")
	m := regexp.MustCompile(`pass --context-window (\d+) or more`).FindStringSubmatch(errOut)
	if code != 2 || m == nil || !strings.Contains(errOut, "tool schemas") || !strings.Contains(errOut, "task") {
		t.Fatalf("keel run --context-window 3000 = %d\n%s", code, errOut)
	}
	if code, _, errOut := keel(t, "run", "--model", "replay:"+trajectory, "--workspace", ws, "--mount-path", "/testbed", "--context-window", m[1], "--max-steps", "2", "-q"); code != 1 {
		t.Fatalf("keel run --context-window %s = %d, want 1 (step limit)\n%s", m[1], code, errOut)
	}
	id, _ := lastRun(t, db)
	if code, _, errOut := keel(t, "runs", "resume", id, "--context-window", "3000"); code != 2 || !strings.Contains(errOut, "pass --context-window "+m[1]+" or more") {
		t.Errorf("runs resume --context-window 3000 = %d, want the flag to pass\n%s", code, errOut)
	}
	// keel --server URL run sends --context-window (the API's
	// context_window), checked as locally.
	s := startServe(t)
	wsS := t.TempDir()
	code, _, errOut = keel(t, "--server", s.url, "run", "--model", "replay:"+trajectory, "--workspace", wsS, "--mount-path", "/testbed", "--context-window", "3000", "-q")
	if code != 2 || !strings.Contains(errOut, "--context-window 3000 is too small") {
		t.Errorf("keel --server URL run --context-window 3000 = %d\n%s", code, errOut)
	}
	want := strconv.Itoa(atoi(t, m[1]) + 1000)
	if code, _, errOut := keel(t, "--server", s.url, "run", "--model", "replay:"+trajectory, "--workspace", wsS, "--mount-path", "/testbed", "--context-window", want, "--max-steps", "1", "-q"); code != 1 {
		t.Fatalf("keel --server URL run --context-window %s = %d, want 1 (step limit)\n%s", want, code, errOut)
	}
	runs, err := s.apiClient(t).Runs(t.Context(), nil)
	if err != nil || len(runs) == 0 {
		t.Fatalf("runs: %v", err)
	}
	_, out, _ := keel(t, "--server", s.url, "runs", "show", runs[0].ID, "--json")
	if !strings.Contains(out, `"window":`+want) {
		t.Errorf("the server's run.created has not the window %s:\n%.2000s", want, out)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The one-line result says which count is what: the lines the model saw
// of how many bytes in all.
func TestResultLineCounts(t *testing.T) {
	setup(t)
	traj := writeTrajectory(t, "count", []fcall{sh("seq 1 3000")}, []fcall{sh("seq 1 3")}, nil)
	code, _, errOut := keel(t, "run", "--model", "replay:"+traj, "--workspace", t.TempDir())
	if code != 0 {
		t.Fatalf("keel run = %d\n%s", code, errOut)
	}
	if !regexp.MustCompile(`exit 0 · [\d,]+ lines shown of 13,893 bytes in all \(full output: /\S+/state/\S+/artifacts/\S+/call_0_0\.out\)`).MatchString(errOut) {
		t.Errorf("the result line of seq 1 3000 does not say what it counts:\n%s", errOut)
	}
	if !strings.Contains(errOut, "exit 0 · 3 lines ·") {
		t.Errorf("the result line of seq 1 3:\n%s", errOut)
	}
}
