package checkpoint

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/keel-run/keel/policy"
)

// Files git ignores are not in the start commit, so what a run wrote
// there cannot be compared with it; yet an ignored directory (a virtual
// environment, build/) is where a file that runs on its own hides best.
// A diff whose Base has Since lists the ignored files whose change time
// is later (written by the run, or by anyone meanwhile): each file that
// runs on its own with its content, up to maxAutorunListed; the others
// by name when they are few (maxIgnoredListed), else counted by their
// top directory, so that a dependency tree written by an install does
// not flood the list. It also lists the hooks and the config of the
// repository's own .git directory changed since.
const (
	maxAutorunListed = 100
	maxIgnoredListed = 20
)

// clockSlack is how far a file's change time may lag the clock the
// start was read with: the kernel stamps files with a coarse clock
// (one tick behind at most).
const clockSlack = 20 * time.Millisecond

// ignoredChanges lists the files of still (paths of the work tree at dir
// that the base's rules ignored and git still ignores) changed since,
// and, when until is set, leaves out those changed after it (later, by
// path: not the run's changes).
func ignoredChanges(dir string, still ignoredPaths, since, until time.Time, skip func(string) bool) (_ []Change, later []string, _ error) {
	type hit struct {
		path  string
		added bool
	}
	var auto, exec, other []hit
	visited := map[string]bool{} // a file of still.files in one of still.dirs too
	visit := func(rel string, fi fs.FileInfo) {
		if visited[rel] {
			return
		}
		visited[rel] = true
		if !fi.Mode().IsRegular() && fi.Mode()&fs.ModeSymlink == 0 || changeTime(fi).Before(since) || skip != nil && skip(rel) {
			return
		}
		if !until.IsZero() && !changeTime(fi).Before(until.Add(clockSlack)) {
			later = append(later, rel)
			return
		}
		born, ok := birthTime(filepath.Join(dir, filepath.FromSlash(rel)))
		h := hit{rel, ok && !born.Before(since)}
		switch {
		case policy.AutorunWhy(rel) != "":
			auto = append(auto, h)
		case policy.ExecutesWhy(rel) != "":
			exec = append(exec, h)
		default:
			other = append(other, h)
		}
	}
	for _, f := range still.files {
		fi, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(f)))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		visit(f, fi)
	}
	for _, d := range still.dirs {
		err := filepath.WalkDir(filepath.Join(dir, filepath.FromSlash(d)), func(name string, e fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
					return nil // gone meanwhile, or not ours to read
				}
				return err
			}
			if e.IsDir() {
				if e.Name() == ".git" {
					return filepath.SkipDir
				}
				return nil
			}
			fi, err := e.Info()
			if err != nil {
				return nil
			}
			rel, err := filepath.Rel(dir, name)
			if err != nil {
				return err
			}
			visit(filepath.ToSlash(rel), fi)
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
	}
	byPath := func(h []hit) { sort.Slice(h, func(i, j int) bool { return h[i].path < h[j].path }) }
	byPath(auto)
	byPath(exec)
	byPath(other)
	var out []Change
	for i, h := range auto {
		if i >= maxAutorunListed {
			other = append(other, auto[i:]...)
			byPath(other)
			break
		}
		c, err := wholeFile(dir, h.path, h.added)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, c)
	}
	// Code that runs though its name does not say so (a .pyc, an
	// installed package, node_modules/.bin): one the run changed is
	// listed whole, as it hides a payload in a file the person already
	// runs (a forged __pycache__/a.cpython-311.pyc, a package's
	// __init__.py); new ones by name when few, else counted with the
	// others of their top directory, marked as code that runs.
	var added []hit
	for _, h := range exec {
		if h.added {
			added = append(added, h)
			continue
		}
		if len(out) >= 2*maxAutorunListed {
			other = append(other, h)
			continue
		}
		c, err := wholeFile(dir, h.path, false)
		if err != nil {
			return nil, nil, err
		}
		c.Autorun = policy.ExecutesWhy(h.path)
		out = append(out, c)
	}
	if len(added) <= maxIgnoredListed {
		for _, h := range added {
			out = append(out, Change{Path: h.path, Status: Added, Ignored: true, Autorun: policy.ExecutesWhy(h.path)})
		}
	} else {
		other = append(other, added...)
	}
	byPath(other)
	if len(other) <= maxIgnoredListed {
		for _, h := range other {
			out = append(out, Change{Path: h.path, Status: addedOr(h.added), Ignored: true})
		}
		return out, later, nil
	}
	// Too many to list: counted by top directory ("./" for the files at
	// the top), saying how many of them are code that runs.
	groups := map[string]*Change{}
	runs := map[string]int{}
	why := map[string]string{}
	for _, h := range other {
		top, _, nested := strings.Cut(h.path, "/")
		if !nested {
			top = "."
		}
		g := groups[top+"/"]
		if g == nil {
			g = &Change{Path: top + "/", Status: Added, Ignored: true}
			groups[g.Path] = g
		}
		g.Files++
		if !h.added {
			g.Status = Modified
		}
		if w := cmp.Or(policy.AutorunWhy(h.path), policy.ExecutesWhy(h.path)); w != "" {
			runs[g.Path]++
			if why[g.Path] == "" {
				why[g.Path] = w
			}
		}
	}
	for _, g := range groups {
		if n := runs[g.Path]; n > 0 {
			g.Autorun = fmt.Sprintf("%d of them are code that runs (%s, and the like)", n, why[g.Path])
		}
		out = append(out, *g)
	}
	return out, later, nil
}

func addedOr(added bool) Status {
	if added {
		return Added
	}
	return Modified
}

// wholeFile is the change of a file whose earlier content is unknown
// (added: it was created since; else its whole content now is shown as
// added lines).
func wholeFile(dir, rel string, added bool) (Change, error) {
	c := Change{Path: rel, Status: addedOr(added), Ignored: true, Autorun: policy.AutorunWhy(rel)}
	cur, exists, err := readSide(filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil {
		return c, err
	}
	if !exists {
		cur = nil
	}
	c.patch(nil, cur)
	return c, nil
}

// gitControlDir is the repository's own git directory (its common
// directory) when it is inside the work tree at dir, and its path
// relative to dir; "" when it is elsewhere (a run cannot write it).
func gitControlDir(ctx context.Context, dir string) (rg, top string, err error) {
	out, err := git(ctx, dir, nil, "rev-parse", "--path-format=absolute", "--git-common-dir")
	if err != nil {
		return "", "", err
	}
	gd := strings.TrimSpace(string(out))
	real, err1 := filepath.EvalSymlinks(dir)
	rg, err2 := filepath.EvalSymlinks(gd)
	if err1 != nil || err2 != nil {
		return "", "", nil
	}
	top, err = filepath.Rel(real, rg)
	if err != nil || !filepath.IsLocal(top) {
		return "", "", nil
	}
	return rg, top, nil
}

// controlFiles calls fn with each file of git directory rg that makes
// git run programs: its config, a rebase's or sequencer's todo, and its
// hooks (not *.sample: git runs none), by its path under rg. It stops
// after maxAutorunListed hooks.
func controlFiles(rg string, fn func(name, sub string, fi fs.FileInfo) error) error {
	if fi, err := os.Lstat(filepath.Join(rg, "config")); err == nil {
		if err := fn(filepath.Join(rg, "config"), "config", fi); err != nil {
			return err
		}
	}
	// A rebase, am, cherry-pick or revert in progress: the person's
	// --continue carries out its todo list (exec lines run commands).
	for _, s := range []string{"rebase-merge", "rebase-apply", "sequencer"} {
		for _, n := range []string{"git-rebase-todo", "todo", "strategy", "opts"} {
			name := filepath.Join(rg, s, n)
			if fi, err := os.Lstat(name); err == nil {
				if err := fn(name, s+"/"+n, fi); err != nil {
					return err
				}
			}
		}
	}
	hooks := filepath.Join(rg, "hooks")
	n := 0
	return filepath.WalkDir(hooks, func(name string, e fs.DirEntry, err error) error {
		if err != nil {
			if name == hooks || errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
				return nil
			}
			return err
		}
		if e.IsDir() || strings.HasSuffix(e.Name(), ".sample") {
			return nil // git runs no *.sample hook (renaming one makes a new name)
		}
		fi, err := e.Info()
		if err != nil {
			return nil
		}
		rel, err := filepath.Rel(rg, name)
		if err != nil {
			return err
		}
		if n++; n > maxAutorunListed {
			return filepath.SkipAll
		}
		return fn(name, filepath.ToSlash(rel), fi)
	})
}

// controlDigest is the digest of a control file's content (of a
// symbolic link's target for a link).
func controlDigest(name string, fi fs.FileInfo) (string, error) {
	var b []byte
	var err error
	if fi.Mode()&fs.ModeSymlink != 0 {
		var t string
		t, err = os.Readlink(name)
		b = []byte("link " + t)
	} else {
		b, err = os.ReadFile(name)
	}
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// GitControl returns the digest of each file of the repository's own
// .git directory that makes git run programs (see [controlFiles]), by
// its path under that directory, as a run starts (agent.GitStart.Control):
// the run's diff then lists those whose content differs, whatever their
// change times say. nil when the git directory is not in the work tree.
func GitControl(ctx context.Context, dir string) (map[string]string, error) {
	rg, _, err := gitControlDir(ctx, dir)
	if err != nil || rg == "" {
		return nil, err
	}
	out := map[string]string{}
	err = controlFiles(rg, func(name, sub string, fi fs.FileInfo) error {
		if !fi.Mode().IsRegular() && fi.Mode()&fs.ModeSymlink == 0 {
			return nil
		}
		d, err := controlDigest(name, fi)
		if err != nil {
			return err
		}
		out[sub] = d
		return nil
	})
	return out, err
}

// gitAutorun lists the files of the repository's own .git directory
// (when it is in the work tree at dir) that make git run programs and
// changed since the run started: its config and its hooks. With start
// (the digests of [GitControl] at the start), a file changed when its
// content differs; without (runs journaled before they were recorded),
// when its change time is after since.
func gitAutorun(ctx context.Context, dir string, since time.Time, start map[string]string) ([]Change, error) {
	rg, top, err := gitControlDir(ctx, dir)
	if err != nil || rg == "" {
		return nil, err
	}
	var found []Change
	err = controlFiles(rg, func(name, sub string, fi fs.FileInfo) error {
		if !fi.Mode().IsRegular() && fi.Mode()&fs.ModeSymlink == 0 {
			return nil
		}
		var added bool
		if start != nil {
			d, err := controlDigest(name, fi)
			if err != nil {
				return err
			}
			was, ok := start[sub]
			if ok && was == d {
				return nil
			}
			added = !ok
		} else {
			if changeTime(fi).Before(since) {
				return nil
			}
			born, ok := birthTime(name)
			added = ok && !born.Before(since)
		}
		rel := path.Join(filepath.ToSlash(top), sub)
		c, err := wholeFile(dir, rel, added)
		if err != nil {
			return err
		}
		c.Autorun = policy.AutorunWhy(path.Join(".git", sub))
		found = append(found, c)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return found, nil
}

// replaceRefs lists the git replace refs of the repository at dir
// written since: git log, show and diff then show one object in place of
// another (this package's diffs do not: GIT_NO_REPLACE_OBJECTS), so a
// replaced start file looks unchanged to git in the person's
// repository. A packed ref counts when the packed-refs file changed
// since.
func replaceRefs(ctx context.Context, dir string, since time.Time) ([]Change, error) {
	out, err := git(ctx, dir, nil, "for-each-ref", "--format=%(refname) %(objectname)", "refs/replace/")
	if err != nil || len(bytes.TrimSpace(out)) == 0 {
		return nil, err
	}
	gd, err := git(ctx, dir, nil, "rev-parse", "--path-format=absolute", "--git-common-dir")
	if err != nil {
		return nil, err
	}
	common := strings.TrimSpace(string(gd))
	shown := "" // where the refs are, as the list names them
	if real, err1 := filepath.EvalSymlinks(dir); err1 == nil {
		if rg, err2 := filepath.EvalSymlinks(common); err2 == nil {
			if top, err := filepath.Rel(real, rg); err == nil && filepath.IsLocal(top) {
				shown = filepath.ToSlash(top) + "/"
			}
		}
	}
	var found []Change
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		ref, obj, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		fi, err := os.Lstat(filepath.Join(common, filepath.FromSlash(ref)))
		if err != nil {
			fi, err = os.Lstat(filepath.Join(common, "packed-refs"))
		}
		if err == nil && changeTime(fi).Before(since) {
			continue
		}
		old := strings.TrimPrefix(ref, "refs/replace/")
		found = append(found, Change{Path: shown + ref, Status: Added, Ignored: true,
			Note: fmt.Sprintf("git replace: in this repository git log, show and diff now show object %s as %s (this diff does not); git replace -d %s undoes it", short(old), short(obj), short(old))})
	}
	return found, nil
}

func short(sha string) string { return sha[:min(12, len(sha))] }
