package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/keel-run/keel/agent"
)

// StartOf records the commit a run starts on in dir, when dir is the top
// of a git repository with a commit (nil otherwise): the commit and the
// files that differ from it, where it was cloned from, its refs, its
// control files, its info/exclude and its file-system clock.
func StartOf(ctx context.Context, dir string) *agent.GitStart {
	now := time.Now().UTC()
	commit, dirty, err := Start(ctx, dir)
	if err != nil {
		return nil
	}
	g := &agent.GitStart{Commit: commit, Dirty: dirty, Origin: Origin(ctx, dir), Time: now}
	g.Refs, g.RefsAll = Refs(ctx, dir)
	if c, err := GitControl(ctx, dir); err == nil {
		g.Control = c
	}
	if x, err := InfoExclude(ctx, dir); err == nil {
		g.Exclude = &x
	}
	if t, ok := StartClock(dir); ok {
		g.Since = t.UTC()
	}
	return g
}

// CloneAt makes dir, a new or empty directory, a repository of its own
// holding the history of the repository at src, with HEAD detached at
// start.Commit (the commit a run started on in src) and an index of that
// commit, and writes no file of its work tree: a fork's workspace, whose
// files are then a checkpoint's, so that git works in it and its diff
// compares with the same commit. A copy, not a worktree of src: a
// worktree would share src's configuration, hooks and objects, which an
// agent in dir could then change (and a sandbox mounting dir alone would
// not see). Objects are copied, not hard-linked (a write to a linked
// object file would change src's). Its branches and tags are those
// start recorded (when it did), its remote "origin" is start's origin
// (without credentials; none when start had none), and its
// info/exclude is the one src had at the start. dir may hold files
// that are not the repository's (the sandbox's .keel); on an error
// dir's .git is removed.
func CloneAt(ctx context.Context, src, dir string, start *agent.GitStart) (err error) {
	if start == nil || start.Commit == "" {
		return errors.New("checkpoint: no start commit to clone at")
	}
	if _, err := os.Lstat(filepath.Join(dir, ".git")); err == nil {
		return fmt.Errorf("%s already has a .git", dir) // not ours to remove
	}
	defer func() {
		if err != nil {
			os.RemoveAll(filepath.Join(dir, ".git"))
		}
	}()
	// Cloned beside what dir may hold already (the sandbox's .keel) and
	// moved into place.
	tmp, err := os.MkdirTemp(dir, ".keel-clone-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if _, err := git(ctx, dir, nil, "clone", "--quiet", "--no-checkout", "--no-hardlinks", "--", src, tmp); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(tmp, ".git"), filepath.Join(dir, ".git")); err != nil {
		return err
	}
	if _, err := git(ctx, dir, nil, "cat-file", "-e", start.Commit+"^{commit}"); err != nil {
		return fmt.Errorf("the start commit %s is not in the repository of %s any more: %w", start.Commit, src, err)
	}
	if _, err := git(ctx, dir, nil, "update-ref", "--no-deref", "HEAD", start.Commit); err != nil {
		return err
	}
	// The source's remote-tracking refs go with the remote that named the
	// source's directory.
	if _, err := git(ctx, dir, nil, "remote", "remove", "origin"); err != nil {
		return err
	}
	if start.Origin != "" {
		if _, err := git(ctx, dir, nil, "remote", "add", "origin", start.Origin); err != nil {
			return err
		}
	}
	if start.Refs != nil {
		out, err := git(ctx, dir, nil, "for-each-ref", "--format=%(refname)", "refs/heads/", "refs/tags/")
		if err != nil {
			return err
		}
		var in strings.Builder
		for _, r := range strings.Fields(string(out)) {
			if _, keep := start.Refs[r]; !keep {
				fmt.Fprintf(&in, "delete %s\n", r)
			}
		}
		names := make([]string, 0, len(start.Refs))
		for r := range start.Refs {
			names = append(names, r)
		}
		sort.Strings(names)
		for _, r := range names {
			if !strings.HasPrefix(r, "refs/heads/") && !strings.HasPrefix(r, "refs/tags/") {
				continue
			}
			if _, err := git(ctx, dir, nil, "cat-file", "-e", start.Refs[r]); err == nil {
				fmt.Fprintf(&in, "update %s %s\n", r, start.Refs[r])
			}
		}
		if in.Len() > 0 {
			if _, err := git(ctx, dir, []byte(in.String()), "update-ref", "--stdin"); err != nil {
				return err
			}
		}
	}
	if _, err := git(ctx, dir, nil, "read-tree", start.Commit); err != nil {
		return err
	}
	if start.Exclude != nil {
		if err := os.WriteFile(filepath.Join(dir, ".git", "info", "exclude"), []byte(*start.Exclude), 0o644); err != nil {
			return err
		}
	}
	return nil
}
