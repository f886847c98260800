package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// checkpointEvents counts the run's workspace.checkpoint events.
func checkpointEvents(t *testing.T, db, id string) int {
	t.Helper()
	n := 0
	for _, e := range readEvents(t, db, id) {
		if e.Type == journal.WorkspaceCheckpoint {
			n++
		}
	}
	return n
}

// A run started with checkpoints off ([run] checkpoints = false here)
// takes none, journals the setting, keeps it when resumed (the file
// gone), and keel runs rewind and fork say so plainly (exit 2).
func TestNoCheckpoints(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
	db := setup(t)
	conf := filepath.Join(os.Getenv("KEEL_HOME"), "config.toml")
	if err := os.WriteFile(conf, []byte("[run]\ncheckpoints = false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	traj := writeTrajectory(t, "write two files",
		[]fcall{sh("echo one > a.txt")},
		[]fcall{sh("echo two > b.txt")},
		[]fcall{sh("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")},
	)
	if code, _, errOut := keel(t, "run", "--model", "replay:"+traj, "--workspace", ws, "--sandbox", "none", "--max-steps", "1", "-q"); code != 1 {
		t.Fatalf("keel run = %d, want 1 (stopped by --max-steps): %s", code, errOut)
	}
	id, _ := lastRun(t, db)
	_, show, _ := keel(t, "runs", "show", id, "--json")
	if !strings.Contains(show, `"no_checkpoints":true`) {
		t.Errorf("run.created does not journal the setting:\n%s", show[:min(len(show), 2000)])
	}
	// The file no longer turns them off; the run keeps its own setting.
	if err := os.Remove(conf); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := keel(t, "runs", "resume", id, "--max-steps", "10", "-q"); code != 0 {
		t.Fatalf("resume = %d: %s", code, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "b.txt")); err != nil || string(b) != "two\n" {
		t.Fatalf("the resumed run did not write b.txt: %q %v", b, err)
	}
	if n := checkpointEvents(t, db, id); n != 0 {
		t.Errorf("%d workspace.checkpoint events, want none", n)
	}
	for _, args := range [][]string{
		{"runs", "rewind", id, "--to", "3"},
		{"runs", "fork", id, "--at", "3", "--no-start"},
		{"runs", "fork", id, "--at", "3", "--workspace", filepath.Join(t.TempDir(), "f"), "--no-start"},
	} {
		code, out, errOut := keel(t, args...)
		if code != 2 || !strings.Contains(errOut, "has no checkpoints") || !strings.Contains(errOut, "checkpoints off") || strings.Contains(errOut, "goroutine") {
			t.Errorf("keel %v = %d, want 2 saying the run has no checkpoints:\n%s%s", args, code, out, errOut)
		}
	}
	if store := filepath.Join(os.Getenv("KEEL_HOME"), "checkpoints"); dirExists(store) {
		if out, _ := exec.Command("git", "--git-dir", store, "for-each-ref", "refs/keel/runs/"+id).Output(); len(out) > 0 {
			t.Errorf("the store has a ref of the run: %s", out)
		}
	}

	// Checkpoints on (the default): the same trajectory takes them.
	ws2 := t.TempDir()
	if code, _, errOut := keel(t, "run", "--model", "replay:"+traj, "--workspace", ws2, "--sandbox", "none", "-q"); code != 0 {
		t.Fatalf("keel run = %d: %s", code, errOut)
	}
	if id2, _ := lastRun(t, db); checkpointEvents(t, db, id2) == 0 {
		t.Error("a run with checkpoints on took none")
	}
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// A server run created with no_checkpoints takes none; rewinding it
// through the server says why (exit 2).
func TestNoCheckpointsWithServer(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
	setup(t)
	s := startServe(t)
	c := s.apiClient(t)
	traj := writeTrajectory(t, "write a file",
		[]fcall{sh("echo one > a.txt")},
		[]fcall{sh("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")},
	)
	run, err := c.CreateRun(t.Context(), &api.CreateRun{Model: "replay:" + traj, Workspace: t.TempDir(), NoCheckpoints: true})
	if err != nil {
		t.Fatal(err)
	}
	if end := untilStopped(t, c, run.ID, 1); end.Type != journal.RunCompleted {
		t.Fatalf("the run ended with %s", end.Type)
	}
	for e, err := range c.Events(t.Context(), run.ID, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if e.Type == journal.WorkspaceCheckpoint {
			t.Errorf("event %d: a checkpoint of a run created with no_checkpoints", e.Seq)
		}
	}
	code, _, errOut := keel(t, "--server", s.url, "runs", "rewind", run.ID, "--to", "2")
	if code != 2 || !strings.Contains(errOut, "has no checkpoints") {
		t.Errorf("rewind through the server = %d, want 2: %s", code, errOut)
	}
}
