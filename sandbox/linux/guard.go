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
	dirs   []string          // git directories at the start
	record string            // the persisted state's name in .keel/sandbox ("" if none)
	seq    int
}

// controlNames are the entries of a git directory that make git run a
// program or read another git directory; "hooks" is expanded to its
// entries.
var controlNames = []string{"config", "config.worktree", "commondir", "hooks"}

// newGuard takes the start state of the workspace at dir (opened as
// root): every git directory and the identity of its control files.
// absent lists the policy's protected paths that do not exist.
func newGuard(root *os.Root, dir string, absent []string) (*guard, error) {
	g := &guard{root: root, dir: dir, snap: map[string]fileID{}, absent: slices.Clone(absent)}
	dirs, _, err := g.gitDirs()
	if err != nil {
		return nil, err
	}
	g.dirs = dirs
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
	dirs, unread, err := g.gitDirs()
	var warn []string
	if err != nil {
		warn = append(warn, "keel: the git check could not walk the workspace: "+err.Error())
	}
	for _, u := range unread {
		warn = append(warn, "keel: the git check could not read "+u+"; a git repository there would not be checked")
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

// same reports whether p is the file it was at the start.
func (g *guard) same(p string, fi fs.FileInfo) bool {
	id, ok := g.snap[p]
	return ok && id == idOf(fi)
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
	f, err := g.root.Open(p)
	if err != nil {
		return "" // gone meanwhile
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfig+1))
	if err != nil {
		return ""
	}
	if len(data) > maxConfig {
		return "it is a git config file larger than 1 MiB"
	}
	if r := configProblem(data); r != "" {
		return "it is a git config file the host's git would read, and " + r
	}
	return ""
}

// commondirProblem judges a new or changed commondir: git writes one only
// in a linked worktree's directory (<gitdir>/worktrees/<id>), as "../..".
func (g *guard) commondirProblem(d, p string, fi fs.FileInfo) string {
	const why = "it redirects git to another git directory's config and hooks"
	if !fi.Mode().IsRegular() || fi.Size() > 4096 {
		return why
	}
	b, err := g.root.ReadFile(p)
	if err != nil {
		return ""
	}
	if strings.TrimSpace(string(b)) != "../.." || path.Base(path.Dir(d)) != "worktrees" {
		return why + " (" + strings.TrimSpace(string(b)) + ")"
	}
	return ""
}

// quarantine moves p to .keel/quarantine/<stamp>/p, or removes it if it
// cannot be moved, and records the reason next to it.
func (g *guard) quarantine(stamp, p, reason string) Quarantine {
	q := Quarantine{Path: p, Reason: reason}
	base := path.Join(".keel", "quarantine", stamp)
	dst := path.Join(base, p)
	err := g.root.MkdirAll(path.Dir(dst), 0o755)
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
	w := &walker{}
	w.walk(fd, ".")
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
		b, err := os.ReadFile(host)
		if err != nil {
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

// walker finds git directories by reading every directory of the
// workspace once, through descriptors opened relative to their parent
// without following symbolic links, so a link swapped in cannot lead it
// out of the workspace.
type walker struct {
	dirs   []string // git directories
	links  []string // ".git" files and symbolic links
	unread []string // directories that could not be read
	err    error
}

// walk reads the directory at fd (rel to the workspace) and below, and
// closes fd. It holds one descriptor per level of depth.
func (w *walker) walk(fd int, rel string) {
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		w.unread = append(w.unread, rel)
		return
	}
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
	git := path.Base(rel) == ".git" || head && (objects || commondir)
	if git {
		w.dirs = append(w.dirs, rel)
	}
	for _, e := range ents {
		name := e.Name()
		child := path.Join(rel, name)
		if name == ".git" && !e.IsDir() {
			w.links = append(w.links, child)
			continue
		}
		if !e.IsDir() || rel == "." && name == ".keel" || git && (name == "objects" || name == "lfs") {
			continue
		}
		cfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) {
				w.unread = append(w.unread, child)
				if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) {
					w.err = fmt.Errorf("too many open files below %s: %w", rel, err)
				}
			}
			continue
		}
		w.walk(cfd, child)
	}
}

// readDirNames lists the names in directory p of root.
func readDirNames(root *os.Root, p string) ([]string, error) {
	f, err := root.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}
