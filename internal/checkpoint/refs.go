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

// maxRefs bounds the refs [Refs] records.
const maxRefs = 2000

// maxRefPatch bounds the diff shown for a ref the run moved.
const maxRefPatch = 1 << 20

// Refs returns the tips of the refs of the repository at dir (ref name:
// object), so that a later diff can tell which the run made or moved
// ([Base].Refs): branches, tags, the stash, remote-tracking refs, notes
// and any other, but not replace refs (listed on their own). all is
// false when there are more than maxRefs and only the branches and tags
// are returned. nil when git cannot list them, or there are more than
// maxRefs branches and tags.
func Refs(ctx context.Context, dir string) (refs map[string]string, all bool) {
	out, err := git(ctx, dir, nil, "for-each-ref", "--format=%(refname) %(objectname)", "refs/")
	if err != nil {
		return nil, false
	}
	refs = map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if ref, obj, ok := strings.Cut(line, " "); ok && !strings.HasPrefix(ref, "refs/replace/") {
			refs[ref] = obj
		}
	}
	if len(refs) <= maxRefs {
		return refs, true
	}
	refs = branchesAndTags(refs)
	if len(refs) > maxRefs {
		return nil, false
	}
	return refs, false
}

// branchesAndTags returns the branches and tags of refs.
func branchesAndTags(refs map[string]string) map[string]string {
	out := map[string]string{}
	for ref, obj := range refs {
		if strings.HasPrefix(ref, "refs/heads/") || strings.HasPrefix(ref, "refs/tags/") {
			out[ref] = obj
		}
	}
	return out
}

// refKind says what a ref is, in words, with its short name and how to
// undo a change of it (to old, or its deletion when old is ""), and what
// a person's later command does with it.
func refKind(ref, old string) (kind, name, undo, later string) {
	undo = "git update-ref -d " + ref
	if old != "" {
		undo = "git update-ref " + ref + " " + old
	}
	switch {
	case strings.HasPrefix(ref, "refs/heads/"):
		kind, name, later = "branch", strings.TrimPrefix(ref, "refs/heads/"), "a git push would publish them"
		if old == "" {
			undo = "git branch -D " + name
		}
	case strings.HasPrefix(ref, "refs/tags/"):
		kind, name, later = "tag", strings.TrimPrefix(ref, "refs/tags/"), "a git push would publish them"
		if old == "" {
			undo = "git tag -d " + name
		}
	case ref == "refs/stash":
		kind, name, later = "stash entry", "stash@{0}", "a later git stash pop applies its changes to your work tree as if they were yours"
		undo = "git stash drop"
	case strings.HasPrefix(ref, "refs/remotes/"):
		kind, name, later = "remote-tracking ref", strings.TrimPrefix(ref, "refs/remotes/"), "git status, git pull and git merge take its commits as the remote's"
		if r, _, ok := strings.Cut(name, "/"); ok && old != "" {
			undo += " (or git fetch " + r + ")"
		}
	case strings.HasPrefix(ref, "refs/notes/"):
		kind, name, later = "notes ref", strings.TrimPrefix(ref, "refs/notes/"), "git log shows these notes with the commits"
	default:
		kind, name, later = "ref", ref, "git commands that name it use its commits"
	}
	return kind, name, undo, later
}

// refChanges lists the refs of the repository at dir that differ from
// start (see [Refs]): made, moved or deleted since; all says start holds
// every kind of ref, else only branches and tags are compared. commit
// is the start commit. Commits the run made on the person's branch are
// there even when the work tree ends as it started, and a later git push
// publishes them; a stash entry is applied by a later git stash pop, a
// remote-tracking ref taken as the remote's. Each change's path is the
// ref under the repository's git directory as seen from dir (shown);
// Note names the commits, what a later command does with them and how
// to undo it, Patch is the diff the ref gained.
func refChanges(ctx context.Context, dir, commit string, start map[string]string, all bool, shown string) ([]Change, error) {
	now, nowAll := Refs(ctx, dir)
	if now == nil {
		return nil, nil
	}
	if !all || !nowAll {
		now, start = branchesAndTags(now), branchesAndTags(start)
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
		kind, name, undo, later := refKind(ref, map[bool]string{true: old}[had])
		c := Change{Path: shown + ref, Status: Added}
		var not []string
		from := commit
		if had {
			c.Status, not, from = Modified, []string{old}, old
		} else {
			not = olds
		}
		if ref == "refs/stash" {
			// A stash entry is a commit whose first parent is the
			// commit it was made on: its changes are the diff from there.
			from = obj + "^1"
		}
		commits, err := newCommits(ctx, dir, obj, not)
		if err != nil {
			return nil, err
		}
		what := fmt.Sprintf("new %s %s at %s", kind, name, short(obj))
		if had {
			what = fmt.Sprintf("%s %s moved during the run: %s → %s", kind, name, short(old), short(obj))
		}
		c.Note = fmt.Sprintf("%s, %s; %s; undo: %s", what, commits, later, undo)
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
			undo := "git update-ref " + ref + " " + old
			switch {
			case strings.HasPrefix(ref, "refs/heads/"):
				undo = fmt.Sprintf("git branch %s %s", strings.TrimPrefix(ref, "refs/heads/"), old)
			case strings.HasPrefix(ref, "refs/tags/"):
				undo = fmt.Sprintf("git tag %s %s", strings.TrimPrefix(ref, "refs/tags/"), old)
			case ref == "refs/stash":
				undo = "git stash store " + old
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
