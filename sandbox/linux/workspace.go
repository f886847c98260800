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
	"syscall"

	"github.com/keel-run/keel/internal/realpath"
	"github.com/keel-run/keel/sandbox"
)

// Placeholders. A protected path is bound read-only only if it exists.
// Keel creates, on the host and for good, exactly two kinds of
// placeholder, both harmless to git and to people: .keel (Keel's own
// directory) and, in an existing repository that lacks them, an empty
// .git/hooks directory and an empty .git/config. Nothing is removed at
// Close, so a sandbox never unlinks a file that another live sandbox on
// the same workspace has bound (the kernel would detach that binding),
// and a killed Keel leaves nothing behind to clean up. Every other
// missing protected path is watched instead: the git guard (guard.go)
// checks new git files after each command, and a policy path that did
// not exist may not be created.

// prepareWorkspace readies the workspace before the init starts: it makes
// .keel and the repository placeholders, checks what a sandbox that died
// without closing left, takes the git guard's start state and persists
// it. It returns the workspace-relative paths to bind read-only.
func (s *Sandbox) prepareWorkspace() ([]string, error) {
	root, err := os.OpenRoot(s.wsRoot)
	if err != nil {
		return nil, fmt.Errorf("sandbox/linux: open workspace: %w", err)
	}
	s.root = root
	if err := ensureDir(root, ".keel", "."); err != nil {
		return nil, err
	}
	gitDir := false
	switch fi, err := root.Lstat(".git"); {
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
		return nil, fmt.Errorf("sandbox/linux: protected path .git/hooks: .git is a symbolic link; refusing to run with it")
	case err == nil && fi.IsDir():
		gitDir = true
		if err := ensureDir(root, ".git/hooks", ".git"); err != nil {
			return nil, err
		}
		if err := ensureFile(root, ".git/config", ".git"); err != nil {
			return nil, err
		}
	}

	// Guard states: in the state directory, and those an older Keel (or
	// a sandbox without one) left in the workspace.
	stores := []stateStore{{root: root, dir: guardDir, inWorkspace: true}}
	if s.opts.StateDir != "" {
		if err := os.MkdirAll(s.opts.StateDir, 0o755); err != nil {
			return nil, fmt.Errorf("sandbox/linux: state directory: %w", err)
		}
		sr, err := os.OpenRoot(s.opts.StateDir)
		if err != nil {
			return nil, fmt.Errorf("sandbox/linux: state directory: %w", err)
		}
		s.stateRoot = sr
		stores = append(stores, stateStore{root: sr, dir: "sandbox"})
	}
	var qs []Quarantine
	var warns []string
	for _, st := range stores {
		q, w := recoverStale(root, s.wsRoot, st)
		qs, warns = append(qs, q...), append(warns, w...)
	}
	for _, q := range qs {
		q.Reason += " (left by a sandbox on this workspace that ended without closing)"
		s.mech.Warnings = append(s.mech.Warnings, strings.TrimPrefix(q.String(), "keel: "))
		s.reportQuarantine(q)
		if q.Err != nil {
			// Fail closed: the next walk would find it again and refuse
			// to start; say why now.
			return nil, fmt.Errorf("%w: %s", ErrUnsafeWorkspace, q.String())
		}
	}
	s.mech.Warnings = append(s.mech.Warnings, warns...)

	var bind, absent []string
	for _, p := range s.protectedPaths() {
		_, err := root.Lstat(p)
		switch {
		case err == nil:
			bind = append(bind, p)
		case slices.Contains(sandbox.DefaultProtected, p):
			// .git/hooks and .git/config of a workspace with no
			// repository (or a .git file): the guard checks any
			// repository created later.
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrInvalid) || isNotDir(err):
			absent = append(absent, p)
		default:
			return nil, fmt.Errorf("sandbox/linux: protected path %s: %w", p, err)
		}
	}
	g, fixed, err := newGuard(root, s.wsRoot, absent)
	if err != nil {
		return nil, err
	}
	for _, q := range fixed {
		s.mech.Warnings = append(s.mech.Warnings, strings.TrimPrefix(q.String(), "keel: "))
		s.reportQuarantine(q)
	}
	s.guard = g
	g.store = stores[len(stores)-1]
	bind = append(bind, repoControlPaths(g, gitDir)...)
	for _, inc := range configIncludesIn(g) {
		if _, err := root.Lstat(inc); err == nil {
			bind = append(bind, inc)
		} else {
			g.incl = append(g.incl, inc)
		}
	}
	if err := g.persist(); err != nil {
		s.mech.Warnings = append(s.mech.Warnings, "the git guard could not save its state in .keel/sandbox, so a crash of Keel would leave it unchecked: "+err.Error())
	}
	var out []string
	for _, p := range bind {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// repoControlPaths returns the existing control files of the workspace's
// own repository, to bind read-only: the .git file of a worktree or
// submodule checkout, and in the .git directory and its submodule
// (.git/modules/...) and linked-worktree (.git/worktrees/...) git
// directories every config, config.worktree, commondir, hooks and
// worktree gitdir file.
func repoControlPaths(g *guard, gitDir bool) []string {
	var out []string
	if !gitDir {
		if fi, err := g.root.Lstat(".git"); err == nil && fi.Mode().IsRegular() {
			out = append(out, ".git")
		}
		return out
	}
	for _, d := range g.dirs {
		if d != ".git" && !strings.HasPrefix(d, ".git/modules/") && !strings.HasPrefix(d, ".git/worktrees/") {
			continue
		}
		names := []string{"config", "config.worktree", "commondir", "hooks"}
		if strings.HasPrefix(d, ".git/worktrees/") {
			names = append(names, "gitdir")
		}
		for _, n := range names {
			p := path.Join(d, n)
			if fi, err := g.root.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink == 0 {
				out = append(out, p)
			}
		}
	}
	return out
}

// maxIncludeDepth bounds how deep configIncludesIn follows includes of
// includes (git's own limit is 10).
const maxIncludeDepth = 10

// configIncludesIn returns the workspace files that the configs of the
// git directories present at the start include (include.path,
// includeIf.*.path), and the files those include: a project that shares
// its git settings through a file in the workspace ("git config
// include.path ../.gitconfig") would otherwise let the sandbox rewrite
// them. Paths starting with "~" (the home directory of whoever runs git)
// are not followed.
func configIncludesIn(g *guard) []string {
	var out []string
	seen := map[string]bool{}
	var follow func(cfg string, depth int)
	follow = func(cfg string, depth int) {
		if depth > maxIncludeDepth || seen[cfg] {
			return
		}
		seen[cfg] = true
		data, err := readSmall(g.root, cfg, maxConfig)
		if err != nil || len(data) > maxConfig {
			return
		}
		for _, inc := range configIncludes(data) {
			if inc == "" || strings.HasPrefix(inc, "~") {
				continue
			}
			host := inc
			if !filepath.IsAbs(host) {
				host = filepath.Join(g.dir, filepath.FromSlash(path.Dir(cfg)), host)
			}
			rel, ok := insideWorkspace(g.dir, host)
			if !ok {
				continue
			}
			out = append(out, rel)
			follow(rel, depth+1)
		}
	}
	for _, d := range g.dirs {
		for _, n := range []string{"config", "config.worktree"} {
			follow(path.Join(d, n), 0)
		}
	}
	return out
}

// insideWorkspace maps a host path to its workspace-relative real path,
// resolving symbolic links of its longest existing part, and reports
// whether it lies inside the workspace dir.
func insideWorkspace(dir, host string) (string, bool) {
	rel, ok := realpath.Rel(dir, realpath.Resolve(filepath.Clean(host)))
	if !ok || rel == "." {
		return "", false
	}
	return filepath.ToSlash(rel), true
}

// ensureDir makes directory p in root if it is missing, owned like
// directory like (when Keel runs as root); it refuses a symbolic link or
// a non-directory at p.
func ensureDir(root *os.Root, p, like string) error {
	fi, err := root.Lstat(p)
	switch {
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("sandbox/linux: protected path %s is a symbolic link; refusing to run with it", p)
	case err == nil && !fi.IsDir():
		return fmt.Errorf("sandbox/linux: protected path %s is not a directory", p)
	case err == nil:
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("sandbox/linux: protected path %s: %w", p, err)
	}
	if err := root.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("sandbox/linux: create %s: %w", p, err)
	}
	ownLike(root, p, like)
	return nil
}

// ensureFile makes an empty file p in root if nothing is there, owned
// like directory like.
func ensureFile(root *os.Root, p, like string) error {
	f, err := root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sandbox/linux: create %s: %w", p, err)
	}
	f.Close()
	ownLike(root, p, like)
	return nil
}

// ownLike gives p the owner of like, when Keel runs as root (so the
// person who owns the workspace can remove what Keel made).
func ownLike(root *os.Root, p, like string) {
	if os.Geteuid() != 0 {
		return
	}
	fi, err := root.Stat(like)
	if err != nil {
		return
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		root.Lchown(p, int(st.Uid), int(st.Gid))
	}
}

// mkdirAllLike makes directory p and its missing parents in root, each
// owned like the directory like (when Keel runs as root), so the person
// who owns .keel can remove what Keel puts in it.
func mkdirAllLike(root *os.Root, p, like string) error {
	cur := ""
	for part := range strings.SplitSeq(path.Clean(p), "/") {
		cur = path.Join(cur, part)
		err := root.Mkdir(cur, 0o755)
		switch {
		case err == nil:
			ownLike(root, cur, like)
		case !errors.Is(err, fs.ErrExist):
			return err
		}
	}
	return nil
}

// isNotDir reports an error from a path whose parent is not a directory.
func isNotDir(err error) bool { return errors.Is(err, syscall.ENOTDIR) }

// afterCommand runs the git guard after a command and reports what it
// did on w (the command's standard error, or its output when combined),
// after what the periodic check found while the command ran.
func (s *Sandbox) afterCommand(w io.Writer) {
	if s.guard == nil {
		return
	}
	s.checkWorkspace(w)
}

// CheckWorkspace runs the git guard now, as after every command, and
// writes what it did to w (nil discards): paths quarantined or made
// readable, and what the periodic check found since the last report.
// A long-lived command such as the python tool's kernel calls it after
// each unit of work (a cell), so that what the work planted is checked
// before the next call instead of when the process ends. It returns an
// error wrapping [ErrUnsafeWorkspace] when the guard found something it
// could not make safe; the sandbox then refuses new commands.
func (s *Sandbox) CheckWorkspace(w io.Writer) error {
	if s.guard == nil {
		return nil
	}
	s.checkWorkspace(w)
	return s.guard.unsafe()
}

// checkWorkspace runs the guard, reports each finding through
// OnQuarantine and the log, and writes the report lines to w, or keeps
// them for the next command's output when w is nil.
func (s *Sandbox) checkWorkspace(w io.Writer) {
	qs, warns := s.guard.check()
	var lines []string
	for _, q := range qs {
		lines = append(lines, q.String())
	}
	for _, m := range warns {
		s.log.Warn("sandbox git guard", "err", m)
		lines = append(lines, m)
	}
	if w == nil {
		// Noted before anyone hears of them: a command that ends as soon
		// as OnQuarantine fires still reports them in its output.
		s.guard.note(lines...)
	}
	for _, q := range qs {
		s.reportQuarantine(q)
	}
	if w == nil {
		return
	}
	for _, l := range append(s.guard.takeNotes(), lines...) {
		fmt.Fprintln(w, l)
	}
}

// closeGuard runs the last check once nothing runs any more, removes the
// persisted state and closes the workspace handle.
func (s *Sandbox) closeGuard() {
	if s.guard != nil {
		s.guard.mu.Lock()
		s.guard.closing = true
		s.guard.mu.Unlock()
		qs, warns := s.guard.check()
		for _, q := range qs {
			s.reportQuarantine(q)
			s.log.Warn("sandbox git guard at close", "err", q.String())
		}
		for _, m := range warns {
			s.log.Warn("sandbox git guard at close", "err", m)
		}
		s.guard.forget()
	}
	if s.root != nil {
		s.root.Close()
		if s.stateRoot != nil {
			s.stateRoot.Close()
		}
	}
}

// reportQuarantine hands q to Options.OnQuarantine and the log.
func (s *Sandbox) reportQuarantine(q Quarantine) {
	s.log.Warn("sandbox git guard", "path", q.Path, "action", q.Action, "moved_to", q.MovedTo, "reason", q.Reason, "err", q.Err)
	if s.opts.OnQuarantine != nil {
		s.opts.OnQuarantine(q)
	}
}
