package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/keel-run/keel/internal/lazy"
)

// Checkpoints is the checkpoint store of one workspace: snapshots of its
// files as git trees in a bare object store outside the workspace (one
// store can hold many workspaces; their objects are shared). The store's
// index for the workspace (one file per workspace, in the store) makes a
// snapshot cost a stat of every file plus hashing the changed ones.
//
// Host git runs on a directory an agent could write, so it runs with the
// store's own configuration only (no system or global files, no
// fsmonitor, no hooks) and with every attribute that would change bytes
// or run a program unset for every path (info/attributes: -text -filter
// -ident -working-tree-encoding): a snapshot stores the bytes on disk, a
// restore writes them back unchanged. Files git ignores are not
// snapshotted (and a restore leaves them alone), nor .git directories and
// Keel's .keel directory: those the workspace's .gitignore files ignore
// and, when the workspace is in a git repository, those its own git
// ignores (.git/info/exclude, core.excludesFile), as that git lists them.
type Checkpoints struct {
	store, work, index string
	// exclude is the file of the workspace's own ignored paths, as
	// literal patterns, written before each full snapshot; repo is set
	// when the workspace is in a git repository.
	exclude string
	repo    bool
	// t, after Watch, keeps the newest snapshot's tree and follows the
	// workspace's changes (incremental.go); objDirs are the object
	// directories known to exist and buf the buffer files are read
	// into (object.go), both used under the lock.
	t       *tracker
	objDirs map[string]bool
	buf     []byte
}

// FileChange is one file that differs between two snapshots.
type FileChange struct {
	Path   string `json:"path"`
	Status Status `json:"status"`
}

// ErrMissing is returned for a snapshot the store no longer has (pruned).
var ErrMissing = errors.New("checkpoint: snapshot not in the store (pruned?)")

// storeAttributes neutralises what .gitattributes in the workspace could
// make git do to the bytes it stores or writes back.
const storeAttributes = "* -text -filter -ident -working-tree-encoding -eol -crlf\n"

// OpenCheckpoints returns the checkpoint store at store for the
// workspace work (an absolute path), creating the store if needed.
func OpenCheckpoints(ctx context.Context, store, work string) (*Checkpoints, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return nil, errors.New("checkpoint: checkpoints need git on PATH")
	}
	if real, err := filepath.EvalSymlinks(work); err == nil {
		work = real
	}
	sum := sha256.Sum256([]byte(work))
	index := filepath.Join(store, "keel-index", hex.EncodeToString(sum[:12]))
	c := &Checkpoints{store: store, work: work, index: index, exclude: index + ".exclude"}
	if err := c.init(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// noStoreError is the error of opening for reading a store that does
// not exist (deleted, or kept on another machine): the run has no
// checkpoint here (errors.Is matches [ErrNone], and [ErrMissing] for the
// readers that go on without the snapshot).
type noStoreError struct{ store string }

func (e *noStoreError) Error() string {
	return fmt.Sprintf("no workspace checkpoint: the checkpoint store %s does not exist (deleted, or kept on another machine)", e.store)
}

func (e *noStoreError) Is(target error) bool { return target == ErrNone || target == ErrMissing }

// ReadCheckpoints returns the checkpoint store at store for the
// workspace work to read snapshots from (a diff, a run's change
// summary, the files of a replay): unlike [OpenCheckpoints] it creates
// nothing, neither the store nor its files, and a store that does not
// exist is an error that matches [ErrNone] (no checkpoints).
func ReadCheckpoints(ctx context.Context, store, work string) (*Checkpoints, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return nil, errors.New("checkpoint: checkpoints need git on PATH")
	}
	if _, err := os.Stat(filepath.Join(store, "HEAD")); err != nil {
		return nil, &noStoreError{store: store}
	}
	if real, err := filepath.EvalSymlinks(work); err == nil {
		work = real
	}
	sum := sha256.Sum256([]byte(work))
	index := filepath.Join(store, "keel-index", hex.EncodeToString(sum[:12]))
	return &Checkpoints{store: store, work: work, index: index, exclude: index + ".exclude"}, nil
}

// openStored is [OpenCheckpoints] of a store that must exist already,
// for what restores or snapshots a run's recorded checkpoints (a
// rewind, its plan, a fork's files): without the store they are gone,
// and making an empty one would only hide that.
func openStored(ctx context.Context, store, work string) (*Checkpoints, error) {
	c, err := ReadCheckpoints(ctx, store, work)
	var none *noStoreError
	if errors.As(err, &none) {
		// Not ErrNone: the run had checkpoints, which are gone.
		return nil, fmt.Errorf("%w: the checkpoint store %s does not exist (deleted?)", ErrMissing, store)
	}
	if err != nil {
		return nil, err
	}
	if err := c.init(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Available reports whether git is installed (checkpoints need it).
func Available() bool {
	_, err := exec.LookPath("git")
	return err == nil
}

// SameDir reports whether a and b are the same directory.
func SameDir(a, b string) bool { return sameDir(a, b) }

// Store returns the store's directory.
func (c *Checkpoints) Store() string { return c.store }

func (c *Checkpoints) init(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(c.store, "HEAD")); err != nil {
		if err := c.create(ctx); err != nil {
			return err
		}
	}
	info := filepath.Join(c.store, "info")
	if err := os.MkdirAll(info, 0o700); err != nil {
		return err
	}
	for name, text := range map[string]string{
		"attributes": storeAttributes,
		"exclude":    "/.keel/\n.git\n",
	} {
		p := filepath.Join(info, name)
		if b, err := os.ReadFile(p); err == nil && string(b) == text {
			continue
		}
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			return err
		}
	}
	return os.MkdirAll(filepath.Dir(c.index), 0o700)
}

// create makes the store: a bare repository made aside and renamed into
// place, so that runs opening a new store at once (an eval's trials, two
// keel processes) never see, nor fail on, each other's half-made one.
func (c *Checkpoints) create(ctx context.Context) error {
	parent := filepath.Dir(c.store)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(c.store)+".new-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if _, err := runGit(ctx, tmp, append(cleanEnv(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"), nil, nil, "init", "--bare", "--quiet", tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, c.store); err != nil {
		if _, serr := os.Stat(filepath.Join(c.store, "HEAD")); serr == nil {
			return nil // another run made it meanwhile
		}
		return err
	}
	return nil
}

// git runs git on the store with the workspace as its work tree.
func (c *Checkpoints) git(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	opts := []string{"-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.untrackedCache=false",
		"-c", "core.autocrlf=false", "-c", "core.safecrlf=false", "-c", "core.symlinks=true", "-c", "core.filemode=true",
		"-c", "gc.auto=0", "-c", "maintenance.auto=false", "-c", "core.quotePath=false"}
	if c.exclude != "" {
		// A missing file excludes nothing.
		opts = append([]string{"-c", "core.excludesFile=" + c.exclude}, opts...)
	}
	env := append(cleanEnv(), "GIT_DIR="+c.store, "GIT_INDEX_FILE="+c.index,
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0", "GIT_OPTIONAL_LOCKS=0",
		"GIT_AUTHOR_NAME=keel", "GIT_AUTHOR_EMAIL=keel@localhost", "GIT_COMMITTER_NAME=keel", "GIT_COMMITTER_EMAIL=keel@localhost")
	if args[0] != "init" {
		env = append(env, "GIT_WORK_TREE="+c.work)
	}
	return runGit(ctx, c.store, env, stdin, opts, args...)
}

// cleanEnv is the process environment without git's own variables, which
// would point git elsewhere.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") {
			env = append(env, kv)
		}
	}
	return env
}

// lock serialises snapshots and restores of one workspace (two runs in
// one workspace, or a rewind beside a run) with an advisory lock.
func (c *Checkpoints) lock(ctx context.Context) (func(), error) {
	f, err := os.OpenFile(c.index+".lock-keel", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Snapshot stores the workspace's files and returns the tree's id.
func (c *Checkpoints) Snapshot(ctx context.Context) (string, error) {
	unlock, err := c.lock(ctx)
	if err != nil {
		return "", err
	}
	defer unlock()
	return c.snapshot(ctx)
}

func (c *Checkpoints) snapshot(ctx context.Context) (string, error) {
	if c.t != nil {
		// Anything the incremental snapshot cannot settle (or fails at)
		// is left to the full one, which also starts it over.
		if tree, err := c.incremental(ctx); err == nil {
			return tree, nil
		}
	}
	return c.full(ctx)
}

// full snapshots every file with git add (against the store's index of
// the workspace, so only files whose stat changed are read), and starts
// the incremental tracking over.
func (c *Checkpoints) full(ctx context.Context) (string, error) {
	ignored, err := c.writeExclude(ctx)
	if err != nil {
		return "", err
	}
	if c.t != nil {
		if err := c.t.reset(c.work, ignored); err != nil {
			// Not trackable (a directory it cannot read or watch, too
			// many files): every snapshot is a full one.
			c.t.w.close()
			c.t = nil
		}
	}
	// The first snapshot of a workspace (no index of it in the store
	// yet) stores every file: one pack instead of a loose object per
	// file and per directory, which costs a file creation each (a
	// fifth of a millisecond or more on a busy disk). Git streams every
	// blob larger than core.bigFileThreshold into one pack of the add
	// (its bulk check-in; objects the store has are not written again),
	// and the trees are made by fast-import (packTrees). Later
	// snapshots hash only the files whose stat changed, and write the
	// few new objects loose.
	add := []string{"add", "--all", "--ignore-errors", "--", "."}
	_, err = os.Stat(c.index)
	first := errors.Is(err, fs.ErrNotExist)
	if first {
		add = append([]string{"-c", "core.bigFileThreshold=1"}, add...)
	}
	// --ignore-errors: a file that cannot be read (its mode, or gone
	// meanwhile) is left out, not the whole snapshot.
	if _, err := c.git(ctx, nil, add...); err != nil {
		// Exit status 1 with --ignore-errors: some files could not be
		// added; the rest were.
		if !exited(err, 1) {
			return "", err
		}
	}
	if first {
		// Only a head start: write-tree below finds the trees in the
		// pack, or writes those it lacks.
		_ = c.packTrees(ctx)
	}
	out, err := c.git(ctx, nil, "write-tree")
	if err != nil {
		return "", err
	}
	tree := strings.TrimSpace(string(out))
	if c.t != nil {
		if c.t.dirs != nil && c.t.tree.String() == tree {
			c.t.known = true // the tree in memory is this one
		} else if err := c.t.load(ctx, c, tree); err != nil {
			c.t.known = false
		}
	}
	return tree, nil
}

// packTrees writes the trees of the index into one pack with git
// fast-import (a commit of the index's entries on a temporary ref,
// deleted after), so that write-tree finds them all instead of writing
// each directory's tree as a loose object.
func (c *Checkpoints) packTrees(ctx context.Context) error {
	out, err := c.git(ctx, nil, "ls-files", "--stage", "-z")
	if err != nil {
		return err
	}
	ref := "refs/keel-tmp/" + filepath.Base(c.index)
	var in bytes.Buffer
	fmt.Fprintf(&in, "feature done\ncommit %s\ncommitter keel <keel@localhost> 0 +0000\ndata 0\n", ref)
	for _, rec := range bytes.Split(out, []byte{0}) {
		meta, path, ok := bytes.Cut(rec, []byte{'\t'})
		f := strings.Fields(string(meta)) // mode object stage
		if !ok || len(f) != 3 || f[2] != "0" {
			continue
		}
		fmt.Fprintf(&in, "M %s %s %s\n", f[0], f[1], cQuote(path))
	}
	in.WriteString("done\n")
	// unpackLimit 0: a pack even of a few trees (fast-import would
	// write fewer than 100 objects loose).
	if _, err := c.git(ctx, in.Bytes(), "-c", "fastimport.unpackLimit=0", "fast-import", "--quiet", "--force"); err != nil {
		return err
	}
	_, err = c.git(ctx, nil, "update-ref", "-d", ref)
	return err
}

// cQuote quotes path p as git's C-style quoting (fast-import's paths).
func cQuote(p []byte) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, ch := range p {
		switch {
		case ch == '"' || ch == '\\':
			b.WriteByte('\\')
			b.WriteByte(ch)
		case ch < 0x20 || ch == 0x7f:
			fmt.Fprintf(&b, "\\%03o", ch)
		default:
			b.WriteByte(ch)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// writeExclude writes the paths the workspace's own git ignores (when
// the workspace is in a git repository: its .gitignore files,
// .git/info/exclude and core.excludesFile, as git ls-files lists them,
// a wholly ignored directory as one entry) to c.exclude as literal
// patterns, so that git add in the store leaves them out. Git ignores no
// tracked file, so neither does the snapshot. Outside a repository the
// file is emptied: the store's own rules (.gitignore files) remain.
func (c *Checkpoints) writeExclude(ctx context.Context) (ignored []string, err error) {
	var b strings.Builder
	out, err := git(ctx, c.work, nil, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory")
	c.repo = err == nil
	if err == nil {
		for _, p := range strings.Split(string(out), "\x00") {
			if p == "" || strings.ContainsAny(p, "\n\r") {
				continue // a pattern is one line
			}
			ignored = append(ignored, p)
			b.WriteString(literalPattern(p))
			b.WriteByte('\n')
		}
	}
	return ignored, os.WriteFile(c.exclude, []byte(b.String()), 0o600)
}

// literalPattern is the gitignore pattern that matches exactly path p,
// relative to the top of the work tree (a trailing slash: a directory).
func literalPattern(p string) string {
	dir := strings.HasSuffix(p, "/")
	p = strings.TrimSuffix(p, "/")
	var b strings.Builder
	b.WriteByte('/')
	for _, r := range p {
		if strings.ContainsRune(`\*?[]!# `, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	if dir {
		b.WriteByte('/')
	}
	return b.String()
}

var objectID = lazy.Regexp(`^[0-9a-f]{40}([0-9a-f]{24})?$`)

// Has reports whether the store has the tree.
func (c *Checkpoints) Has(ctx context.Context, tree string) bool {
	if !objectID().MatchString(tree) {
		return false
	}
	if t := c.t; t != nil && t.known && (t.tree.String() == tree || t.from.String() == tree) {
		return true // the newest snapshot's, or the one before it
	}
	out, err := c.git(ctx, nil, "cat-file", "-t", tree)
	return err == nil && strings.TrimSpace(string(out)) == "tree"
}

// Changes lists the files that differ from tree a to tree b (a empty: b's
// files, all added), sorted by path.
func (c *Checkpoints) Changes(ctx context.Context, a, b string) ([]FileChange, error) {
	if a == b {
		return nil, nil
	}
	if t := c.t; t != nil && t.to.String() == b && t.from.String() == a && t.from != t.to {
		return t.changes, nil // the newest incremental snapshot's
	}
	if a == "" {
		// diff-tree --root compares a commit, not a tree: compare with
		// the empty tree.
		empty, err := c.git(ctx, []byte{}, "mktree")
		if err != nil {
			return nil, err
		}
		a = strings.TrimSpace(string(empty))
	}
	args := []string{"diff-tree", "-r", "-z", "--name-status", "--no-renames", "--no-ext-diff", "--no-textconv", a, b}
	out, err := c.git(ctx, nil, args...)
	if err != nil {
		return nil, err
	}
	var ch []FileChange
	f := strings.Split(string(out), "\x00")
	for i := 0; i+1 < len(f); i += 2 {
		st := Status(f[i][:1])
		if st == "T" { // type change: a file became a link, say
			st = Modified
		}
		ch = append(ch, FileChange{Path: f[i+1], Status: st})
	}
	return ch, nil
}

// Keep records tree as the newest snapshot of ref (a commit on top of
// parent, the ref's last one, so that every snapshot of the ref stays
// reachable until the ref is pruned) and returns the commit's id. An
// empty parent is read from the ref.
func (c *Checkpoints) Keep(ctx context.Context, ref, tree, parent, message string) (string, error) {
	if _, ok := parseOID(parent); ok {
		if _, ok := parseOID(tree); ok {
			// The commit and the ref without git processes.
			commit, err := c.commit(tree, parent, message)
			if err == nil {
				err = c.setRef(ref, commit)
			}
			if err == nil {
				return commit.String(), nil
			}
		}
	}
	args := []string{"commit-tree", tree, "-m", message}
	if parent == "" {
		if prev, err := c.git(ctx, nil, "rev-parse", "-q", "--verify", ref+"^{commit}"); err == nil {
			parent = strings.TrimSpace(string(prev))
		}
	}
	if parent != "" {
		args = append(args, "-p", parent)
	}
	out, err := c.git(ctx, nil, args...)
	if err != nil {
		return "", err
	}
	commit := strings.TrimSpace(string(out))
	if _, err := c.git(ctx, nil, "update-ref", ref, commit); err != nil {
		return "", err
	}
	return commit, nil
}

// Restore makes the workspace's files those of tree: files of the tree
// are written as stored, files of the workspace's current snapshot that
// the tree lacks are removed, ignored files are left alone. It first
// snapshots the workspace as it is, and returns that tree (so the
// restore can itself be undone) and the files that changed.
func (c *Checkpoints) Restore(ctx context.Context, tree string) (before string, changed []FileChange, err error) {
	before, _, changed, err = c.RestoreSome(ctx, tree, nil, nil)
	return before, changed, err
}

// RestoreSome is [Restore] with keep, when set, told the snapshot of the
// workspace as it is (before) and the files restoring tree would
// change: the paths it returns are left as the workspace has them (an
// error from keep restores nothing). ready, when set, is told what will
// be written (before, the tree the workspace will have, the files that
// change) before any file is: a rewind journals its intent there, and
// an error from ready writes nothing. Once ready returned, the files
// are written whatever ctx does (a restore cut short by a cancel would
// leave them half-written). It returns the tree the workspace then has
// (tree, with the kept paths as before has them) and the files that
// changed.
func (c *Checkpoints) RestoreSome(ctx context.Context, tree string, keep func(before string, changed []FileChange) ([]string, error), ready func(before, restored string, changed []FileChange) error) (before, restored string, changed []FileChange, err error) {
	if !c.Has(ctx, tree) {
		return "", "", nil, fmt.Errorf("%w: %s", ErrMissing, tree)
	}
	unlock, err := c.lock(ctx)
	if err != nil {
		return "", "", nil, err
	}
	defer unlock()
	// A full snapshot: read-tree below removes the files of the store's
	// index that the tree lacks, so the index must be the workspace's.
	if before, err = c.full(ctx); err != nil {
		return "", "", nil, err
	}
	if changed, err = c.Changes(ctx, before, tree); err != nil {
		return "", "", nil, err
	}
	restored = tree
	if keep != nil {
		kept, err := keep(before, changed)
		if err != nil {
			return before, "", nil, err
		}
		if restored, err = c.compose(ctx, tree, before, kept); err != nil {
			return before, "", nil, err
		}
		changed = without(changed, kept)
	}
	if ready != nil {
		if err := ready(before, restored, changed); err != nil {
			return before, "", nil, err
		}
	}
	if _, err := c.git(context.WithoutCancel(ctx), nil, "read-tree", "--reset", "-u", restored); err != nil {
		return before, "", nil, err
	}
	return before, restored, changed, nil
}

// Materialize writes the files of tree into dir, an empty or missing
// directory (a fork's new workspace), and gives dir its own index in the
// store so that its next snapshot is incremental.
func (c *Checkpoints) Materialize(ctx context.Context, tree, dir string) (*Checkpoints, error) {
	if !c.Has(ctx, tree) {
		return nil, fmt.Errorf("%w: %s", ErrMissing, tree)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	d, err := OpenCheckpoints(ctx, c.store, dir)
	if err != nil {
		return nil, err
	}
	unlock, err := d.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	os.Remove(d.index)
	if _, err := d.git(ctx, nil, "read-tree", "-u", "--reset", tree); err != nil {
		return nil, err
	}
	return d, nil
}

// pruneRefs deletes the refs of store for which drop returns true (ref
// names as "refs/keel/runs/ID") and then the objects no ref reaches that are
// older than grace (so that a snapshot being taken meanwhile keeps the
// objects it just wrote until its commit names them; an hour is safe),
// packing the rest. It returns the refs deleted.
func pruneRefs(ctx context.Context, store string, grace time.Duration, drop func(ref string) bool) ([]string, error) {
	c := &Checkpoints{store: store, work: store, index: filepath.Join(store, "keel-index", "prune")}
	if _, err := os.Stat(filepath.Join(store, "HEAD")); err != nil {
		return nil, nil // no store: nothing kept
	}
	out, err := c.git(ctx, nil, "for-each-ref", "--format=%(refname)", "refs/keel/")
	if err != nil {
		return nil, err
	}
	var dropped []string
	var in bytes.Buffer
	for _, ref := range strings.Fields(string(out)) {
		if drop(ref) {
			dropped = append(dropped, ref)
			fmt.Fprintf(&in, "delete %s\n", ref)
		}
	}
	if len(dropped) > 0 {
		if _, err := c.git(ctx, in.Bytes(), "update-ref", "--stdin"); err != nil {
			return nil, err
		}
	}
	// The workspaces' indexes name blobs that only a deleted ref may have
	// reached: they go (they are a cache of file stats; the next snapshot
	// of each workspace hashes its files again).
	if idx, err := os.ReadDir(filepath.Join(store, "keel-index")); err == nil {
		for _, e := range idx {
			if !strings.Contains(e.Name(), ".lock") {
				os.Remove(filepath.Join(store, "keel-index", e.Name()))
			}
		}
	}
	if _, err := c.git(ctx, nil, "reflog", "expire", "--expire=now", "--all"); err != nil {
		return nil, err
	}
	if _, err := c.git(ctx, nil, "gc", fmt.Sprintf("--prune=%d.seconds.ago", int64(grace.Seconds())), "--quiet"); err != nil {
		return nil, err
	}
	return dropped, nil
}

// Pack packs the store's loose objects (git gc --auto: only when there
// are many).
func Pack(ctx context.Context, store string) error {
	c := &Checkpoints{store: store, work: store, index: filepath.Join(store, "keel-index", "prune")}
	_, err := c.git(ctx, nil, "-c", "gc.auto=6700", "gc", "--auto", "--quiet")
	return err
}

// Size returns the bytes the store's objects take on disk.
func Size(store string) (int64, error) {
	var n int64
	err := filepath.WalkDir(filepath.Join(store, "objects"), func(_ string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	return n, err
}

// Diff compares snapshot a with snapshot b (a empty: every file of b is
// added), as unified diffs, sorted by path.
func (c *Checkpoints) Diff(ctx context.Context, a, b string) ([]Change, error) {
	files, err := c.Changes(ctx, a, b)
	if err != nil {
		return nil, err
	}
	out := make([]Change, 0, len(files))
	for _, f := range files {
		ch := Change{Path: f.Path, Status: f.Status}
		var old, cur []byte
		if f.Status != Added {
			if old, err = c.git(ctx, nil, "cat-file", "blob", a+":"+f.Path); err != nil {
				return nil, err
			}
		}
		if f.Status != Deleted {
			if cur, err = c.git(ctx, nil, "cat-file", "blob", b+":"+f.Path); err != nil {
				return nil, err
			}
		}
		ch.patch(old, cur)
		out = append(out, ch)
	}
	return out, nil
}
