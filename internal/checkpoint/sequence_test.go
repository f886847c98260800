package checkpoint_test

import (
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/internal/checkpoint"
)

// A rebase the run left in progress is in its diff (fresh-user trial 7,
// P11: the run wrote .git/rebase-merge by hand with an exec line, the
// summary said "no files changed", and the person's git rebase
// --continue ran the command): its todo list is listed whole, marked as
// what the person's --continue carries out.
func TestDiffListsRebaseInProgress(t *testing.T) {
	dir := repo(t, map[string]string{"a.txt": "a\n"})
	start := gitOut(t, dir, "rev-parse", "HEAD")
	since := time.Now().Add(-time.Second)
	write(t, dir, ".git/rebase-merge/git-rebase-todo", "exec echo PWNED > /tmp/pwned-rebase\n")
	write(t, dir, ".git/rebase-merge/head-name", "refs/heads/main\n")
	write(t, dir, ".git/rebase-merge/onto", start+"\n")
	write(t, dir, ".git/rebase-merge/interactive", "")
	write(t, dir, ".git/sequencer/todo", "pick "+start+" base\n")
	changes, err := checkpoint.DiffFrom(t.Context(), dir, checkpoint.Base{Commit: start, Since: since}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".git/rebase-merge/git-rebase-todo", ".git/sequencer/todo"} {
		c := find(changes, p)
		if c == nil || !strings.Contains(c.Autorun, "--continue") {
			t.Errorf("%s: %+v\nall: %v", p, c, statuses(changes))
		}
	}
	if c := find(changes, ".git/rebase-merge/git-rebase-todo"); c != nil && !strings.Contains(c.Patch, "+exec echo PWNED > /tmp/pwned-rebase") {
		t.Errorf("the todo list's content is not shown: %q", c.Patch)
	}
}
