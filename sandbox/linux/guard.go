//go:build linux

package linux

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The git guard keeps the host's git from running code the sandbox
// planted. A person who later runs git in the workspace (or in a
// repository nested in it, or in a worktree elsewhere that shares its
// git directory) makes git read, from the workspace, every git
// directory's config and config.worktree, its hooks, its commondir (a
// redirect to another git directory's config and hooks) and the .git
// files that point at git directories; `git status` even recurses into
// every nested repository the index registers as a submodule. Read-only
// bind mounts protect what exists when the sandbox starts; what the
// sandbox creates later (a new repository, a commondir, a submodule's
// git directory, a bare-looking directory) cannot be pre-protected
// without breaking git, so the guard checks the workspace after every
// command and at Close and moves anything unsafe to
// .keel/quarantine/<time>/<path>, saying so in the command's output.
//
// A git directory is a directory named .git, a directory holding HEAD and
// objects or commondir (a bare repository, the workspace root included),
// or the target of a .git file, a .git symbolic link or a commondir. In
// each, a control file (config, config.worktree, commondir, hooks and
// every hook) that is new or changed since the start must pass: a config
// only with keys known to run nothing (configProblem), a commondir only
// as git writes it for a linked worktree ("../.."), a hook only as a
// *.sample file git never runs. Protected paths of the run's policy that
// did not exist at the start must not appear at all.
//
// The start state is also written to .keel/sandbox/, which the sandbox
// cannot change, and removed at Close: if Keel dies without closing, the
// next sandbox on the workspace checks against the dead one's state
// first.

// guardVersion is the format of the persisted state.
const guardVersion = 1

// fileID identifies one version of a file: a write changes ctime, a
// replacement changes the inode.
type fileID struct {
	Dev   uint64 `json:"dev"`
	Ino   uint64 `json:"ino"`
	Mode  uint32 `json:"mode"`
	Size  int64  `json:"size"`
	Mtime int64  `json:"mtime"`
	Ctime int64  `json:"ctime"`
}

func idOf(fi fs.FileInfo) fileID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{Mode: uint32(fi.Mode()), Size: fi.Size(), Mtime: fi.ModTime().UnixNano()}
	}
	return fileID{Dev: st.Dev, Ino: st.Ino, Mode: st.Mode, Size: st.Size,
		Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano()}
}

// Quarantine is one path the git guard moved out of the way.
type Quarantine struct {
	// Path is the workspace-relative path (slash-separated).
	Path string
	// MovedTo is where it is now, relative to the workspace, or "" when
	// it could only be removed (or could not be moved at all: see Err).
	MovedTo string
	// Reason says why, in words for the model and the person.
	Reason string
	// Err is set when the path could be neither moved nor removed; the
	// workspace is then unsafe for the host's git until someone looks.
	Err error
}

// String words q as Keel reports it in a command's output.
func (q Quarantine) String() string {
	switch {
	case q.Err != nil:
		return fmt.Sprintf("keel: DANGER: %s %s and could not be quarantined (%v); do not run git in this workspace on the host before removing it", q.Path, q.Reason, q.Err)
	case q.MovedTo == "":
		return fmt.Sprintf("keel: quarantined %s by removing it: %s", q.Path, q.Reason)
	}
	return fmt.Sprintf("keel: quarantined %s (moved to %s): %s", q.Path, q.MovedTo, q.Reason)
}

// guard is the git guard of one sandbox. Its methods are safe for
// concurrent use; checks run one at a time.
type guard struct {
	root *os.Root // the workspace
	dir  string   // its host real path

	mu     sync.Mutex
	snap   map[string]fileID // control files at the start
	absent []string          // policy paths missing at the start
	incl   []string          // missing files that a config present at the start includes
	dirs   []string          // git directories at the start
	unread map[string]bool   // directories the start walk could not read
	record string            // the persisted state's name in .keel/sandbox ("" if none)
	seq    int
	cache  map[string]*dirCache // the walker's view of the last walk
	// passed holds the control files found safe by the last check, so
	// unchanged ones are not read again; passing collects this check's.
	passed, passing map[string]fileID
	margin          time.Duration // racyMargin; benchmarks lower it
}

// controlNames are the entries of a git directory that make git run a
// program or read another git directory; "hooks" is expanded to its
// entries.
var controlNames = []string{"config", "config.worktree", "commondir", "hooks"}

// newGuard takes the start state of the workspace at dir (opened as
// root): every git directory and the identity of its control files.
// absent lists the policy's protected paths that do not exist.
func newGuard(root *os.Root, dir string, absent []string) (*guard, error) {
	g := &guard{root: root, dir: dir, snap: map[string]fileID{}, absent: slices.Clone(absent), margin: racyMargin}
	dirs, unread, err := g.gitDirs()
	if err != nil {
		return nil, err
	}
	g.dirs = dirs
	g.unread = map[string]bool{}
	for _, u := range unread {
		g.unread[u] = true
	}
	for _, d := range dirs {
		for _, p := range g.controlPaths(d) {
			if fi, err := root.Lstat(p); err == nil {
				g.snap[p] = idOf(fi)
			}
		}
	}
	return g, nil
}

// controlPaths lists the control paths of git directory d that exist:
// config, config.worktree, commondir, hooks and every entry of hooks.
func (g *guard) controlPaths(d string) []string {
	var out []string
	for _, n := range controlNames {
		p := path.Join(d, n)
		fi, err := g.root.Lstat(p)
		if err != nil {
			continue
		}
		out = append(out, p)
		if n == "hooks" && fi.IsDir() {
			if ents, err := readDirNames(g.root, p); err == nil {
				for _, e := range ents {
					out = append(out, path.Join(p, e))
				}
			}
		}
	}
	return out
}

// check looks at the workspace now, quarantines what is unsafe, and
// returns what it moved (plus a warning for parts it could not read).
func (g *guard) check() ([]Quarantine, []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.passing = map[string]fileID{}
	defer func() { g.passed, g.passing = g.passing, nil }()
	dirs, unread, err := g.gitDirs()
	var warn []string
	if err != nil {
		warn = append(warn, "keel: the git check could not walk the workspace: "+err.Error())
	}
	for _, u := range unread {
		if !g.unread[u] {
			warn = append(warn, "keel: the git check could not read "+u+"; a git repository there would not be checked")
		}
	}
	type finding struct{ path, reason string }
	var found []finding
	for _, d := range dirs {
		for _, f := range g.checkDir(d) {
			found = append(found, finding{f[0], f[1]})
		}
	}
	for _, p := range g.absent {
		if _, err := g.root.Lstat(p); err == nil {
			found = append(found, finding{p, "it is a protected path of this run, which did not exist when the sandbox started and may not be created"})
		}
	}
	for _, p := range g.incl {
		if _, err := g.root.Lstat(p); err == nil {
			found = append(found, finding{p, "a git config of this workspace includes this file, so the host's git would read it as configuration; it may not be created"})
		}
	}
	if len(found) == 0 {
		return nil, warn
	}
	g.seq++
	stamp := fmt.Sprintf("%s-%d-%d", time.Now().UTC().Format("20060102T150405.000000Z"), os.Getpid(), g.seq)
	var out []Quarantine
	seen := map[string]bool{}
	for _, f := range found {
		if seen[f.path] {
			continue
		}
		seen[f.path] = true
		out = append(out, g.quarantine(stamp, f.path, f.reason))
	}
	return out, warn
}

// checkDir checks the control files of git directory d and returns
// [path, reason] pairs for the unsafe ones.
func (g *guard) checkDir(d string) [][2]string {
	var bad [][2]string
	for _, n := range []string{"config", "config.worktree"} {
		p := path.Join(d, n)
		if r := g.checkConfig(p); r != "" {
			bad = append(bad, [2]string{p, r})
		}
	}
	p := path.Join(d, "commondir")
	if fi, err := g.root.Lstat(p); err == nil && !g.same(p, fi) {
		if r := g.commondirProblem(d, p, fi); r != "" {
			bad = append(bad, [2]string{p, r})
		}
	}
	hooks := path.Join(d, "hooks")
	fi, err := g.root.Lstat(hooks)
	switch {
	case err != nil:
	case !fi.IsDir():
		if !g.same(hooks, fi) {
			bad = append(bad, [2]string{hooks, "it replaces a git hooks directory; git would run what it points to"})
		}
	default:
		names, _ := readDirNames(g.root, hooks)
		for _, n := range names {
			h := path.Join(hooks, n)
			if strings.HasSuffix(n, ".sample") {
				continue
			}
			if hf, err := g.root.Lstat(h); err == nil && !g.same(h, hf) {
				bad = append(bad, [2]string{h, "it is a git hook, which git on the host would run"})
			}
		}
	}
	return bad
}

// same reports whether p is the file it was at the start, or the file
// the last check found safe.
func (g *guard) same(p string, fi fs.FileInfo) bool {
	id := idOf(fi)
	if old, ok := g.snap[p]; ok && old == id {
		return true
	}
	if old, ok := g.passed[p]; ok && old == id {
		g.pass(p, id)
		return true
	}
	return false
}

// pass records that p, as id, was found safe in this check.
func (g *guard) pass(p string, id fileID) {
	if g.passing != nil {
		g.passing[p] = id
	}
}

// maxConfig is the largest config the guard reads; larger ones are
// quarantined unread.
const maxConfig = 1 << 20

// checkConfig returns why the config file p is unsafe, or "".
func (g *guard) checkConfig(p string) string {
	fi, err := g.root.Lstat(p)
	if err != nil || g.same(p, fi) {
		return ""
	}
	if !fi.Mode().IsRegular() {
		return "it is a symbolic link or special file where git reads a config file"
	}
	data, err := readSmall(g.root, p, maxConfig)
	if errors.Is(err, errNotRegular) {
		return "it is a symbolic link or special file where git reads a config file"
	}
	if err != nil {
		return "" // gone meanwhile
	}
	if len(data) > maxConfig {
		return "it is a git config file larger than 1 MiB"
	}
	if r := configProblem(data); r != "" {
		return "it is a git config file the host's git would read, and " + r
	}
	g.pass(p, idOf(fi))
	return ""
}

// commondirProblem judges a new or changed commondir: git writes one only
// in a linked worktree's directory (<gitdir>/worktrees/<id>), as "../..".
func (g *guard) commondirProblem(d, p string, fi fs.FileInfo) string {
	const why = "it redirects git to another git directory's config and hooks"
	if !fi.Mode().IsRegular() || fi.Size() > 4096 {
		return why
	}
	b, err := readSmall(g.root, p, 4096)
	if errors.Is(err, errNotRegular) || len(b) > 4096 {
		return why
	}
	if err != nil {
		return ""
	}
	if strings.TrimSpace(string(b)) != "../.." || path.Base(path.Dir(d)) != "worktrees" {
		return why + " (" + strings.TrimSpace(string(b)) + ")"
	}
	g.pass(p, idOf(fi))
	return ""
}

// quarantine moves p to .keel/quarantine/<stamp>/p, or removes it if it
// cannot be moved, and records the reason next to it.
func (g *guard) quarantine(stamp, p, reason string) Quarantine {
	q := Quarantine{Path: p, Reason: reason}
	base := path.Join(".keel", "quarantine", stamp)
	dst := path.Join(base, p)
	err := mkdirAllLike(g.root, path.Dir(dst), ".keel")
	if err == nil {
		err = g.root.Rename(p, dst)
	}
	if err == nil {
		q.MovedTo = dst
	} else if rerr := g.root.RemoveAll(p); rerr != nil {
		q.Err = errors.Join(err, rerr)
		return q
	}
	if f, err := g.root.OpenFile(path.Join(base, "REASONS"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err == nil {
		fmt.Fprintf(f, "%s: %s\n", p, reason)
		f.Close()
	}
	return q
}

// gitDirs walks the workspace and returns its git directories (see the
// comment at the top), sorted, and the directories it could not read.
func (g *guard) gitDirs() ([]string, []string, error) {
	fd, err := unix.Open(g.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox/linux: git check: open workspace: %w", err)
	}
	defer unix.Close(fd)
	w := &walker{rootfd: fd, prev: g.cache, next: map[string]*dirCache{},
		since: time.Now().Add(-g.margin).UnixNano()}
	w.visit(".")
	g.cache = w.next
	set := map[string]bool{}
	queue := slices.Clone(w.dirs)
	for _, l := range w.links {
		if t := g.target(l, true); t != "" {
			queue = append(queue, t)
		}
	}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		if set[d] {
			continue
		}
		set[d] = true
		if t := g.target(path.Join(d, "commondir"), false); t != "" {
			queue = append(queue, t)
		}
	}
	out := make([]string, 0, len(set))
	for d := range set {
		out = append(out, d)
	}
	slices.Sort(out)
	return out, w.unread, w.err
}

// target resolves an indirection to a directory inside the workspace, as
// the host's git would: a .git symbolic link or "gitdir: X" file when
// gitfile, else a commondir file, relative to the directory holding it.
// It returns the workspace-relative real path, or "" when the target is
// outside the workspace, missing or not a directory.
func (g *guard) target(p string, gitfile bool) string {
	host := filepath.Join(g.dir, filepath.FromSlash(p))
	fi, err := os.Lstat(host)
	if err != nil {
		return ""
	}
	var to string
	switch {
	case fi.Mode()&fs.ModeSymlink != 0 && gitfile:
		to = host
	case fi.Mode().IsRegular() && fi.Size() <= 4096:
		b, err := readSmall(g.root, p, 4096)
		if err != nil || len(b) > 4096 {
			return ""
		}
		s := strings.TrimSpace(string(b))
		if gitfile {
			var ok bool
			if s, ok = strings.CutPrefix(s, "gitdir:"); !ok {
				return ""
			}
			s = strings.TrimSpace(s)
		}
		if s == "" {
			return ""
		}
		to = s
		if !filepath.IsAbs(to) {
			to = filepath.Join(filepath.Dir(host), to)
		}
	default:
		return ""
	}
	real, err := filepath.EvalSymlinks(to)
	if err != nil {
		return ""
	}
	rel, err := filepath.Rel(g.dir, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return ""
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return ""
	}
	return filepath.ToSlash(rel)
}

// racyMargin is how recent a directory's change time may be for its
// listing to be trusted in the next check. File times come from a coarse
// clock (a tick of up to 10 ms), so an entry added in the same tick as
// the change the walker saw would leave the time unchanged; a directory
// changed within this margin of a walk is read again the next time (as
// git treats "racily clean" index entries).
const racyMargin = time.Second

// dirCache is what the walker keeps of one directory between checks.
type dirCache struct {
	ino, dev     uint64
	ctime, mtime int64
	racy         bool     // changed too close to the walk to be trusted
	git          bool     // it is a git directory
	subdirs      []string // names of the subdirectories to walk
	links        []string // names of its ".git" entries that are not directories
}

// walker finds git directories. The first walk reads every directory of
// the workspace; later walks read again only the directories whose
// identity or change time differs from the last walk (adding, removing
// or renaming an entry changes a directory's change time, which no
// program can set), and stat the others. Every path is opened beneath
// the workspace without following symbolic links (openat2
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), so a link swapped in cannot lead
// it out of the workspace.
type walker struct {
	rootfd     int
	prev, next map[string]*dirCache
	since      int64    // change times from this on (ns) are racy
	dirs       []string // git directories
	links      []string // ".git" files and symbolic links
	unread     []string // directories that could not be read
	err        error
}

// visit walks the directory rel and below.
func (w *walker) visit(rel string) {
	var st unix.Stat_t
	if err := unix.Fstatat(w.rootfd, rel, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) {
			w.unread = append(w.unread, rel)
		}
		return
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return
	}
	c := w.prev[rel]
	if c == nil || c.racy || c.ino != st.Ino || c.dev != st.Dev || c.ctime != st.Ctim.Nano() || c.mtime != st.Mtim.Nano() {
		if c = w.read(rel); c == nil {
			return
		}
	}
	w.next[rel] = c
	if c.git {
		w.dirs = append(w.dirs, rel)
	}
	for _, l := range c.links {
		w.links = append(w.links, path.Join(rel, l))
	}
	for _, d := range c.subdirs {
		w.visit(path.Join(rel, d))
	}
}

// read lists directory rel and returns what the walker keeps of it, or
// nil (noting why) when it cannot be read.
func (w *walker) read(rel string) *dirCache {
	fd, err := unix.Openat2(w.rootfd, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) && !errors.Is(err, unix.EXDEV) {
			w.unread = append(w.unread, rel)
			if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) {
				w.err = fmt.Errorf("too many open files at %s: %w", rel, err)
			}
		}
		return nil
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	// The identity of what is read, taken before reading: a change after
	// this moment changes the change time again.
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		w.unread = append(w.unread, rel)
		return nil
	}
	ents, err := f.ReadDir(-1)
	if err != nil {
		w.unread = append(w.unread, rel)
		return nil
	}
	c := &dirCache{ino: st.Ino, dev: st.Dev, ctime: st.Ctim.Nano(), mtime: st.Mtim.Nano()}
	c.racy = c.ctime >= w.since || c.mtime >= w.since
	var head, objects, commondir bool
	for _, e := range ents {
		switch e.Name() {
		case "HEAD":
			head = true
		case "objects":
			objects = true
		case "commondir":
			commondir = true
		}
	}
	c.git = path.Base(rel) == ".git" || head && (objects || commondir)
	for _, e := range ents {
		name := e.Name()
		switch {
		case name == ".git" && !e.IsDir():
			c.links = append(c.links, name)
		case !e.IsDir(), rel == "." && name == ".keel", c.git && (name == "objects" || name == "lfs"):
		default:
			c.subdirs = append(c.subdirs, name)
		}
	}
	return c
}

// readDirNames lists the names in directory p of root.
func readDirNames(root *os.Root, p string) ([]string, error) {
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// errNotRegular is readSmall's error for anything but a regular file.
var errNotRegular = errors.New("not a regular file")

// readSmall reads at most max+1 bytes of the regular file p in root,
// without following a final symbolic link and without blocking on a FIFO
// or device swapped in meanwhile; a longer file returns max+1 bytes.
func readSmall(root *os.Root, p string, max int64) ([]byte, error) {
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, errNotRegular
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errNotRegular
	}
	return io.ReadAll(io.LimitReader(f, max+1))
}
