package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// maxRefs bounds the branches and tags [Refs] records.
const maxRefs = 2000

// maxRefPatch bounds the diff shown for a branch or tag the run moved.
const maxRefPatch = 1 << 20

// Refs returns the tips of the branches and tags of the repository at
// dir (ref name: object), so that a later diff can tell which the run
// made or moved ([Base].Refs). nil when git cannot list them, or there
// are more than maxRefs.
func Refs(ctx context.Context, dir string) map[string]string {
	out, err := git(ctx, dir, nil, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/", "refs/tags/")
	if err != nil {
		return nil
	}
	refs := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if ref, obj, ok := strings.Cut(line, " "); ok {
			refs[ref] = obj
		}
	}
	if len(refs) > maxRefs {
		return nil
	}
	return refs
}

// refChanges lists the branches and tags of the
// repository at dir that differ from start (see [Refs]): made, moved or
// deleted since. commit is the start commit. Commits the run made on
// the person's branch are there even when the work tree ends as it
// started, and a later git push publishes them. Each change's path is
// the ref under the repository's git directory as seen from dir (shown);
// Note names the commits and how to undo it, Patch is the diff the ref
// gained.
func refChanges(ctx context.Context, dir, commit string, start map[string]string, shown string) ([]Change, error) {
	now := Refs(ctx, dir)
	if now == nil {
		return nil, nil
	}
	olds := []string{commit}
	for _, o := range start {
		olds = append(olds, o)
	}
	sort.Strings(olds)
	var found []Change
	for ref, obj := range now {
		old, had := start[ref]
		if had && old == obj {
			continue
		}
		kind, name := "branch", strings.TrimPrefix(ref, "refs/heads/")
		undo := fmt.Sprintf("git branch -D %s", name)
		if strings.HasPrefix(ref, "refs/tags/") {
			kind, name = "tag", strings.TrimPrefix(ref, "refs/tags/")
			undo = fmt.Sprintf("git tag -d %s", name)
		}
		c := Change{Path: shown + ref, Status: Added}
		var not []string
		from := commit
		if had {
			c.Status, not, from = Modified, []string{old}, old
			undo = fmt.Sprintf("git update-ref %s %s", ref, old)
		} else {
			not = olds
		}
		commits, err := newCommits(ctx, dir, obj, not)
		if err != nil {
			return nil, err
		}
		what := fmt.Sprintf("new %s %s at %s", kind, name, short(obj))
		if had {
			what = fmt.Sprintf("%s %s moved during the run: %s → %s", kind, name, short(old), short(obj))
		}
		c.Note = fmt.Sprintf("%s, %s; a git push would publish them; undo: %s", what, commits, undo)
		if d, err := git(ctx, dir, nil, "diff", "--no-ext-diff", "--no-textconv", "--no-color", from, obj, "--"); err == nil {
			if len(d) > maxRefPatch {
				d = append(d[:maxRefPatch:maxRefPatch], "\n(diff cut here)\n"...)
			}
			c.Patch = string(d)
			for _, l := range strings.Split(c.Patch, "\n") {
				switch {
				case strings.HasPrefix(l, "+++ ") || strings.HasPrefix(l, "--- "):
				case strings.HasPrefix(l, "+"):
					c.Added++
				case strings.HasPrefix(l, "-"):
					c.Removed++
				}
			}
		}
		found = append(found, c)
	}
	for ref, old := range start {
		if _, ok := now[ref]; !ok {
			name := strings.TrimPrefix(strings.TrimPrefix(ref, "refs/heads/"), "refs/tags/")
			undo := fmt.Sprintf("git branch %s %s", name, old)
			if strings.HasPrefix(ref, "refs/tags/") {
				undo = fmt.Sprintf("git tag %s %s", name, old)
			}
			found = append(found, Change{Path: shown + ref, Status: Deleted,
				Note: fmt.Sprintf("deleted during the run (was %s); undo: %s", short(old), undo)})
		}
	}
	return found, nil
}

// newCommits describes the commits reachable from tip and from none of
// not: their count and first subjects.
func newCommits(ctx context.Context, dir, tip string, not []string) (string, error) {
	args := append([]string{"rev-list", "--count", tip, "--not"}, not...)
	out, err := git(ctx, dir, nil, args...)
	if err != nil {
		return "", err
	}
	n, _ := strconv.Atoi(string(bytes.TrimSpace(out)))
	if n == 0 {
		return "no new commits", nil
	}
	out, err = git(ctx, dir, nil, append([]string{"log", "--format=%s", "--max-count=3", tip, "--not"}, not...)...)
	if err != nil {
		return "", err
	}
	var subj []string
	for _, s := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		subj = append(subj, strconv.Quote(s))
	}
	more := ""
	if n > len(subj) {
		more = ", …"
	}
	return fmt.Sprintf("%d new commit(s): %s%s", n, strings.Join(subj, ", "), more), nil
}

// gitDirShown is where the repository at dir keeps its refs, relative to
// dir with a trailing slash (".git/"), or "" when that is not inside dir.
func gitDirShown(ctx context.Context, dir string) string {
	gd, err := git(ctx, dir, nil, "rev-parse", "--path-format=absolute", "--git-common-dir")
	if err != nil {
		return ""
	}
	real, err1 := filepath.EvalSymlinks(dir)
	rg, err2 := filepath.EvalSymlinks(strings.TrimSpace(string(gd)))
	if err1 != nil || err2 != nil {
		return ""
	}
	if top, err := filepath.Rel(real, rg); err == nil && filepath.IsLocal(top) {
		return filepath.ToSlash(top) + "/"
	}
	return ""
}
