package cli_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/journal"
)

// Keel's own files (whole outputs, the git guard's state) stay out of the
// workspace: a repository the agent works in shows none of them in git
// status, inside the sandbox (git add -A) or after the run, and the model
// reads a whole output, read-only, at the path its result names.
func TestKeelStateOutOfWorkspace(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	db := setup(t)
	home := filepath.Dir(db)
	ws := t.TempDir()
	for _, args := range [][]string{{"init", "-q"}, {"config", "user.email", "t@example.com"}, {"config", "user.name", "t"}} {
		if out, err := exec.Command("git", append([]string{"-C", ws}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	real, _ := filepath.EvalSymlinks(ws)
	sum := sha256.Sum256([]byte(real))
	state := filepath.Join(home, "state", filepath.Base(real)+"-"+hex.EncodeToString(sum[:8]))
	traj := writeTrajectory(t, "state",
		[]fcall{sh("echo data > x.txt && seq 1 40000")},
		[]fcall{sh("wc -l " + state + "/artifacts/*/call_0_0.out && (echo x >> " + state + "/artifacts/*/call_0_0.out || echo READ-ONLY)")},
		[]fcall{sh("git add -A && git status --porcelain")},
		[]fcall{sh("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")},
	)
	if code, _, errOut := keel(t, "run", "--db", db, "--model", "replay:"+traj, "--workspace", ws, "--policy", allowAllPolicy(t), "-q"); code != 0 {
		t.Fatalf("run = %d\n%s", code, errOut)
	}
	id, st := lastRun(t, db)
	if st.Status != journal.StatusCompleted {
		t.Fatalf("status %s %+v", st.Status, st.Ended)
	}
	first := resultOf(t, st, "call_0_0")
	art := filepath.Join(state, "artifacts", id, "call_0_0.out")
	if !strings.Contains(first, art) || st.Turns[0].Calls[0].Finished.Artifact != art {
		t.Errorf("the result does not name the artifact %s: %q", art, first[len(first)-300:])
	}
	if b, err := os.ReadFile(art); err != nil || !strings.HasSuffix(string(b), "\n40000\n") {
		t.Errorf("artifact %s: %v", art, err)
	}
	if out := resultOf(t, st, "call_1_0"); !strings.Contains(out, "40000 ") || !strings.Contains(out, "READ-ONLY") {
		t.Errorf("inside the sandbox, the whole output is not readable (and read-only) at its path: %q", out)
	}
	if out := resultOf(t, st, "call_2_0"); strings.Contains(out, ".keel") || !strings.Contains(out, "A  x.txt") {
		t.Errorf("git add -A in the sandbox staged Keel's files: %q", out)
	}
	out, err := exec.Command("git", "-C", ws, "status", "--porcelain", "--untracked-files=all", "--ignored").CombinedOutput()
	if err != nil || strings.Contains(string(out), ".keel") {
		t.Errorf("git status after the run: %v\n%s", err, out)
	}
	filepath.Walk(filepath.Join(ws, ".keel"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			t.Errorf("Keel left %s in the workspace", p)
		}
		return nil
	})
}
