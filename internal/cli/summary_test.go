package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// keel run's closing summary and keel runs diff (--stat) in a git
// workspace say what the run changed, not what the workspace held
// before it or what others changed while it waited for an approval
// (fresh-user trial 10, N1): a run that only lists files changed
// nothing; a run paused at an approval while a person edits a file and
// another run adds one is shown with its own file alone, the others
// named in a note.
func TestGitChangeSummaryIsTheRunsOwn(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
	ws, db, traj, pol := approvalSetup(t)
	os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("one\n"), 0o644)
	gitRepo(t, ws)
	os.WriteFile(filepath.Join(ws, "untracked-before.txt"), []byte("mine\n"), 0o644)
	os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("one\nmine\n"), 0o644)

	ls := writeTrajectory(t, "list", []fcall{sh("ls")}, []fcall{sh("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")})
	code, _, errOut := keel(t, "run", "--db", db, "--model", "replay:"+ls, "--workspace", ws)
	if code != 0 || !strings.Contains(errOut, "no files changed since the run started") ||
		!strings.Contains(errOut, "note: 2 file(s) already differed from the start commit when the run started") || strings.Contains(errOut, "A untracked-before.txt") {
		t.Fatalf("keel run of ls = %d, want no files changed and a note on the two files\n%s", code, errOut)
	}
	id, _ := lastRun(t, db)
	for _, args := range [][]string{{"runs", "diff", "--db", db, id}, {"runs", "diff", "--db", db, "--stat", id}} {
		code, out, errOut := keel(t, args...)
		if code != 0 || !strings.Contains(out, "no files changed since the run started") || !strings.Contains(out, "notes.txt, untracked-before.txt") {
			t.Errorf("keel %v = %d\n%s%s", args, code, out, errOut)
		}
	}

	// Paused at the approval of its rm, after writing old.log and
	// keep.txt.
	if code, _, errOut := keel(t, "run", "--db", db, "--model", "replay:"+traj, "--workspace", ws, "--policy", pol, "--no-wait"); code != 3 {
		t.Fatalf("keel run = %d, want 3 (waiting)\n%s", code, errOut)
	}
	paused, _ := lastRun(t, db)
	// Meanwhile: a person's edit, another run's file.
	os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("one\nmine\nagain\n"), 0o644)
	other := writeTrajectory(t, "another", []fcall{{"write_file", map[string]any{"path": "other.txt", "content": "other\n"}}}, []fcall{sh("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")})
	if code, _, errOut := keel(t, "run", "--db", db, "--model", "replay:"+other, "--workspace", ws); code != 0 || !strings.Contains(errOut, "1 file(s) changed since the run started") || !strings.Contains(errOut, "A other.txt") {
		t.Fatalf("the other run = %d\n%s", code, errOut)
	}
	code, _, errOut = keel(t, "approve", "--db", db, paused, "--by", "ops")
	if code != 0 {
		t.Fatalf("approve = %d\n%s", code, errOut)
	}
	code, out, errOut := keel(t, "runs", "diff", "--db", db, "--stat", paused)
	for _, want := range []string{"1 file(s) changed since the run started", "A keep.txt",
		"2 file(s) changed while the run was paused or waiting (by a person or another run), not by the run: not counted as the run's: notes.txt, other.txt",
		"1 file(s) already differed from the start commit when the run started (uncommitted or untracked) and the run left them as they were: not counted as the run's: untracked-before.txt"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("runs diff --stat of the paused run = %d, lacks %q:\n%s%s", code, want, out, errOut)
		}
	}
	t.Logf("runs diff --stat:\n%s", out)
	if strings.Contains(out, "A other.txt") || strings.Contains(out, "M notes.txt") {
		t.Errorf("runs diff --stat counts others' files as the run's:\n%s", out)
	}
}
