package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// A workspace that Watch was called on keeps, between snapshots, the
// tree of its newest one in memory (every directory's entries and tree
// id) and an inotify watch on each directory it snapshots. A later
// snapshot then reads only the paths the kernel reported changed since
// (nothing at all when none did), writes their blobs and the trees
// above them, and knows the files that changed without asking git:
// about a tenth of a millisecond for a step that changed one file,
// where a full snapshot stats every file and runs three to five git
// processes.
//
// Whatever this cannot settle alone takes the full snapshot (git add,
// as before), which also reloads the tree and the watches: a new
// directory, a changed .gitignore, a .git appearing or going, a file
// with several hard links, a kernel queue overflow, and every
// fullEvery-th snapshot (a file changed only through a shared memory
// mapping after its writer closed it reports nothing to inotify). A new
// file in a watched directory is asked about with git check-ignore, in
// the workspace's repository and in the store, so it is left out
// exactly when git add would leave it out.

// fullEvery bounds the incremental snapshots between two full ones.
const fullEvery = 100

// maxTracked bounds the files a workspace may have for its tree to be
// kept in memory (about 100 bytes each); a larger one is snapshotted
// in full each time.
const maxTracked = 200_000

// tracker is the incremental state of one workspace's snapshots.
type tracker struct {
	w *watcher
	// tree is the newest snapshot's tree; dirs holds every directory of
	// it ("" the root) with its entries and tree id.
	tree oid
	dirs map[string]*dirNode
	// ignoredDirs are wholly ignored directories (not watched);
	// ignored are ignored files in watched directories.
	ignoredDirs map[string]bool
	ignored     map[string]bool
	// pending are paths to read again at the next snapshot (a file that
	// changed while it was read).
	pending map[string]struct{}
	// sinceFull counts the incremental snapshots since the full one.
	sinceFull int
	// from, to and changes are the newest snapshot's tree before and
	// after, and the files that differ (nil after a full snapshot).
	from, to oid
	changes  []FileChange
	known    bool
	// fulls and incrementals count the snapshots of each kind (tests).
	fulls, incrementals int
}

type dirNode struct {
	entries map[string]treeEntry
	oid     oid
	dirty   bool
}

// errFull is the incremental snapshot's error when only a full one can
// tell what changed.
var errFull = errors.New("checkpoint: full snapshot needed")

// Watch makes the later snapshots of c incremental (see above) and
// returns a function that releases the watches. Without inotify (or
// when the workspace is too large) snapshots stay full.
func (c *Checkpoints) Watch() (release func()) {
	w, err := newWatcher(c.work)
	if err != nil {
		return func() {}
	}
	c.t = &tracker{w: w}
	return func() {
		unlock, err := c.lock(context.Background())
		if err == nil {
			defer unlock()
		}
		if c.t != nil {
			c.t.w.close()
			c.t = nil
		}
	}
}

// skipPath reports the paths a snapshot never holds: Keel's .keel at
// the top and anything in a .git (the store's info/exclude).
func skipPath(p string) bool {
	if p == ".keel" || strings.HasPrefix(p, ".keel/") {
		return true
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".git" {
			return true
		}
	}
	return false
}

// parentDir is the directory of p ("" the root).
func parentDir(p string) string {
	d := path.Dir(p)
	if d == "." {
		return ""
	}
	return d
}

// reset starts the tracker over after a full snapshot of tree: the
// watches are set again (before git reads the files, so that nothing
// changed meanwhile goes unseen) with the ignored paths of exclude.
func (t *tracker) reset(root string, ignored []string) error {
	t.w.unwatch("")
	// Events queued before are covered by the full snapshot.
	if err := t.w.drain(map[string]struct{}{}); err != nil && !errors.Is(err, errOverflow) {
		return err
	}
	t.dirs, t.known, t.changes = nil, false, nil
	t.pending = map[string]struct{}{}
	t.ignoredDirs, t.ignored = map[string]bool{}, map[string]bool{}
	for _, p := range ignored {
		if d, ok := strings.CutSuffix(p, "/"); ok {
			t.ignoredDirs[d] = true
		} else {
			t.ignored[p] = true
		}
	}
	t.sinceFull = 0
	t.fulls++
	n := 0
	var walk func(dir string) error
	walk = func(dir string) error {
		if err := t.w.watch(dir); err != nil {
			return err
		}
		f, err := os.Open(filepath.Join(root, dir))
		if err != nil {
			return err
		}
		ents, err := f.ReadDir(-1)
		f.Close()
		if err != nil {
			return err
		}
		var subs []string
		for _, e := range ents {
			n++
			p := path.Join(dir, e.Name())
			if !e.IsDir() || skipPath(p) || t.ignoredDirs[p] {
				continue
			}
			if _, err := os.Lstat(filepath.Join(root, p, ".git")); err == nil {
				continue // a repository of its own: git adds it as a gitlink
			}
			subs = append(subs, p)
		}
		if n > maxTracked {
			return errors.New("checkpoint: too many files to track")
		}
		for _, s := range subs {
			if err := walk(s); err != nil {
				return err
			}
		}
		return nil
	}
	return walk("")
}

// load reads tree (the full snapshot's) into t.
func (t *tracker) load(ctx context.Context, c *Checkpoints, tree string) error {
	o, ok := parseOID(tree)
	if !ok {
		return errors.New("checkpoint: not a SHA-1 tree: " + tree)
	}
	out, err := c.git(ctx, nil, "ls-tree", "-r", "-t", "-z", "--full-tree", tree)
	if err != nil {
		return err
	}
	dirs := map[string]*dirNode{"": {entries: map[string]treeEntry{}, oid: o}}
	for _, rec := range bytes.Split(out, []byte{0}) {
		meta, p, ok := bytes.Cut(rec, []byte{'\t'})
		f := strings.Fields(string(meta)) // mode type object
		if !ok || len(f) != 3 {
			continue
		}
		mode, err := strconv.ParseUint(f[0], 8, 32)
		if err != nil {
			return err
		}
		id, ok := parseOID(f[2])
		if !ok {
			return errors.New("checkpoint: ls-tree: bad object " + f[2])
		}
		name := string(p)
		parent := dirs[parentDir(name)]
		if parent == nil {
			return errors.New("checkpoint: ls-tree: a path before its directory: " + name)
		}
		parent.entries[path.Base(name)] = treeEntry{mode: uint32(mode), oid: id}
		if mode == modeTree {
			dirs[name] = &dirNode{entries: map[string]treeEntry{}, oid: id}
		}
	}
	t.dirs, t.tree, t.known = dirs, o, true
	return nil
}

// incremental snapshots the workspace from the paths the watches
// reported; errFull when it cannot.
func (c *Checkpoints) incremental(ctx context.Context) (string, error) {
	t := c.t
	if !t.known || t.sinceFull >= fullEvery {
		return "", errFull
	}
	dirty := t.pending
	t.pending = map[string]struct{}{}
	if err := t.w.drain(dirty); err != nil {
		return "", errFull
	}
	t.sinceFull++
	t.from, t.to, t.changes = t.tree, t.tree, nil
	if len(dirty) == 0 {
		t.incrementals++
		return t.tree.String(), nil
	}
	paths := make([]string, 0, len(dirty))
	for p := range dirty {
		paths = append(paths, p)
	}
	// Parents before children: a removed directory goes before its files.
	slices.Sort(paths)
	old := map[string]treeEntry{} // the entries this snapshot replaced or removed
	var reread, fresh []string
	for _, p := range paths {
		base := path.Base(p)
		if base == ".git" || base == ".gitignore" {
			return "", errFull // a repository or ignore rules changed
		}
		if skipPath(p) || t.underIgnored(p) {
			continue
		}
		fi, err := os.Lstat(filepath.Join(c.work, p))
		if err == nil && fi.IsDir() {
			if t.ignoredDirs[p] || t.w.watched(p) {
				continue // its entries report their own changes
			}
			return "", errFull // a new directory
		}
		if t.ignoredDirs[p] {
			return "", errFull // an ignored directory became something else
		}
		if _, isDir := t.dirs[p]; isDir {
			t.removeTree(p, old)
		}
		_, recordable := fileMode(modeOf(fi, err))
		e, tracked := t.entry(p)
		switch {
		case err == nil && recordable && tracked:
			reread = append(reread, p)
		case err == nil && recordable && !t.ignored[p]:
			fresh = append(fresh, p)
		case tracked:
			if e.mode == modeGitlink {
				return "", errFull
			}
			old[p] = e
			t.remove(p)
		}
	}
	if len(fresh) > 0 {
		ign, err := c.checkIgnored(ctx, fresh)
		if err != nil {
			return "", err
		}
		for _, p := range fresh {
			if ign[p] {
				t.ignored[p] = true
			} else {
				reread = append(reread, p)
			}
		}
	}
	for _, p := range reread {
		abs := filepath.Join(c.work, p)
		fi, err := os.Lstat(abs)
		if err == nil && fi.Mode().IsRegular() && nlink(fi) > 1 {
			// A write through another of its names reports only that
			// name's directory: only a full snapshot sees all of them.
			return "", errFull
		}
		var id oid
		var mode uint32
		if err == nil {
			id, mode, err = c.writeFile(abs, fi)
		}
		e, tracked := t.entry(p)
		switch {
		case errors.Is(err, errChanged):
			t.pending[p] = struct{}{}
			continue
		case errors.Is(err, fs.ErrNotExist):
			if tracked {
				old[p] = e
				t.remove(p)
			}
			continue
		case errors.Is(err, errStore):
			// Not the file's fault: a full snapshot (which fails too if
			// the store cannot be written) rather than a tree without it.
			return "", err
		case err != nil:
			// Unreadable: left as it was, as git add --ignore-errors
			// does.
			continue
		}
		if tracked && e.mode == mode && e.oid == id {
			continue
		}
		if _, seen := old[p]; !seen && tracked {
			old[p] = e
		}
		if !tracked {
			if _, seen := old[p]; !seen {
				old[p] = treeEntry{}
			}
		}
		t.add(p, treeEntry{mode: mode, oid: id})
	}
	if err := c.writeTrees(); err != nil {
		return "", err
	}
	t.incrementals++
	t.to = t.tree
	t.changes = t.diff(old)
	return t.tree.String(), nil
}

// modeOf is the mode of a file from lstat's result (0 when it failed).
func modeOf(fi fs.FileInfo, err error) fs.FileMode {
	if err != nil {
		return 0
	}
	return fi.Mode()
}

// underIgnored reports whether p is inside a wholly ignored directory.
func (t *tracker) underIgnored(p string) bool {
	for d := parentDir(p); d != ""; d = parentDir(d) {
		if t.ignoredDirs[d] {
			return true
		}
	}
	return false
}

// entry returns the file entry of p in the tree.
func (t *tracker) entry(p string) (treeEntry, bool) {
	d := t.dirs[parentDir(p)]
	if d == nil {
		return treeEntry{}, false
	}
	e, ok := d.entries[path.Base(p)]
	if ok && e.mode == modeTree {
		return treeEntry{}, false
	}
	return e, ok
}

// markDirty marks dir and every directory above it for a new tree.
func (t *tracker) markDirty(dir string) {
	for {
		d := t.dirs[dir]
		if d == nil {
			d = &dirNode{entries: map[string]treeEntry{}}
			t.dirs[dir] = d
			if dir != "" {
				// A placeholder until its tree is written.
				t.markDirty(parentDir(dir))
				t.dirs[parentDir(dir)].entries[path.Base(dir)] = treeEntry{mode: modeTree}
				d.dirty = true
				return
			}
		}
		d.dirty = true
		if dir == "" {
			return
		}
		dir = parentDir(dir)
	}
}

func (t *tracker) add(p string, e treeEntry) {
	dir := parentDir(p)
	t.markDirty(dir)
	t.dirs[dir].entries[path.Base(p)] = e
}

func (t *tracker) remove(p string) {
	dir := parentDir(p)
	if d := t.dirs[dir]; d != nil {
		delete(d.entries, path.Base(p))
		t.markDirty(dir)
	}
}

// removeTree removes directory p and everything below it, recording the
// files removed in old.
func (t *tracker) removeTree(p string, old map[string]treeEntry) {
	for d, node := range t.dirs {
		if d != p && !strings.HasPrefix(d, p+"/") {
			continue
		}
		for name, e := range node.entries {
			if e.mode != modeTree {
				if _, seen := old[path.Join(d, name)]; !seen {
					old[path.Join(d, name)] = e
				}
			}
		}
		delete(t.dirs, d)
	}
	t.remove(p)
}

// writeTrees writes the trees of the dirty directories, deepest first;
// a directory left empty is dropped from its parent (git records no
// empty directory).
func (c *Checkpoints) writeTrees() error {
	t := c.t
	var dirty []string
	for d, node := range t.dirs {
		if node.dirty {
			dirty = append(dirty, d)
		}
	}
	depth := func(d string) int {
		if d == "" {
			return -1
		}
		return strings.Count(d, "/")
	}
	slices.SortFunc(dirty, func(a, b string) int { return depth(b) - depth(a) })
	for _, d := range dirty {
		node := t.dirs[d]
		node.dirty = false
		if len(node.entries) == 0 && d != "" {
			delete(t.dirs, d)
			delete(t.dirs[parentDir(d)].entries, path.Base(d))
			continue
		}
		id, err := c.writeObject("tree", encodeTree(node.entries))
		if err != nil {
			return err
		}
		node.oid = id
		if d == "" {
			t.tree = id
		} else {
			t.dirs[parentDir(d)].entries[path.Base(d)] = treeEntry{mode: modeTree, oid: id}
		}
	}
	return nil
}

// diff lists the files whose entries differ from old (the entries this
// snapshot replaced: zero for a file that was not there), sorted by
// path as git diff-tree lists them.
func (t *tracker) diff(old map[string]treeEntry) []FileChange {
	var out []FileChange
	for p, was := range old {
		now, ok := t.entry(p)
		switch {
		case !ok && was.mode != 0:
			out = append(out, FileChange{Path: p, Status: Deleted})
		case ok && was.mode == 0:
			out = append(out, FileChange{Path: p, Status: Added})
		case ok && now != was:
			out = append(out, FileChange{Path: p, Status: Modified})
		}
	}
	slices.SortFunc(out, func(a, b FileChange) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// checkIgnored reports which of paths (new files) git add would leave
// out: those the workspace's repository ignores, if it is in one, and
// those the store's own rules ignore (the workspace's .gitignore files,
// the store's exclude files).
func (c *Checkpoints) checkIgnored(ctx context.Context, paths []string) (map[string]bool, error) {
	in := nulJoin(paths)
	args := []string{"check-ignore", "-z", "--stdin"}
	var wg sync.WaitGroup
	var repoOut []byte
	var repoErr error
	if c.repo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			repoOut, repoErr = git(ctx, c.work, in, args...)
		}()
	}
	storeOut, storeErr := c.git(ctx, in, args...)
	wg.Wait()
	ign := map[string]bool{}
	for _, r := range []struct {
		out []byte
		err error
	}{{repoOut, repoErr}, {storeOut, storeErr}} {
		if r.err != nil && !exited(r.err, 1) { // 1: none ignored
			return nil, r.err
		}
		for _, p := range nul(r.out) {
			ign[p] = true
		}
	}
	return ign, nil
}

// nlink is the number of names of the file of fi.
func nlink(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}
