package tool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/keel-run/keel/sandbox"
)

// Workspace is a run's persistent directory, as seen by file tools. It maps
// the paths a model writes (relative, or absolute under the sandbox mount
// path) to host paths, follows symbolic links the way the kernel does, and
// refuses any path whose real location is outside the workspace or, for
// writes, inside a protected path.
//
// Checking a path and then opening it by name would leave a window in
// which a process in the sandbox swaps a link in. Tools therefore resolve
// a path with [Workspace.Resolve] or [Workspace.ResolveWrite] and then
// access the resolved path only through [Workspace.FS], an [os.Root] that
// cannot leave the workspace whatever the links say.
//
// A Workspace is safe for concurrent use.
type Workspace struct {
	root      string // host real path, absolute, cleaned
	mount     string // in-sandbox mount path, e.g. /workspace
	protected []string
	hidden    []string
	// hiddenIDs are the identities (device and inode) the hidden paths
	// had when [Workspace.Hide] was called: a path that leads to one of
	// them is hidden whatever its name (a renamed parent, a hard link).
	hiddenIDs []fs.FileInfo
	fs        *os.Root
	// state and stateDir are the state directory (state.go), if any.
	state    *os.Root
	stateDir string
	// lexical is a workspace with no directory ([NewLexicalWorkspace]):
	// root is "", fs nil, and paths resolve by their text.
	lexical bool
}

// ErrOutside is wrapped by errors for paths whose real location is outside
// the workspace (through "..", an absolute path or a symbolic link).
var ErrOutside = errors.New("path is outside the workspace")

// ErrProtected is wrapped by errors for writes to a protected path: any
// path with a .git component (a repository's metadata at any depth, and
// the .git file of a worktree or submodule checkout), .keel/ and any path
// the run's policy names.
var ErrProtected = errors.New("path is protected")

// ErrHidden is wrapped by errors for paths the run's policy forbids
// ([Workspace.Hide]): file tools neither read nor write them, and walks
// skip them.
var ErrHidden = errors.New("path is forbidden by the run's policy")

// NewWorkspace opens the host directory dir as a workspace mounted at
// mountPath inside the sandbox (default [sandbox.DefaultMountPath]; it must
// be absolute). Protected lists workspace-relative paths that file tools
// must not write; [sandbox.DefaultProtected] is always included. It
// returns an error if dir does not exist or is not a directory.
func NewWorkspace(dir, mountPath string, protected []string) (*Workspace, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("tool: workspace %s: %w", dir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("tool: workspace %s: %w", dir, err)
	}
	st, err := os.Stat(real)
	if err != nil {
		return nil, fmt.Errorf("tool: workspace %s: %w", dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("tool: workspace %s is not a directory", dir)
	}
	if mountPath == "" {
		mountPath = sandbox.DefaultMountPath
	}
	if !path.IsAbs(mountPath) {
		return nil, fmt.Errorf("tool: workspace mount path %q is not absolute", mountPath)
	}
	r, err := os.OpenRoot(real)
	if err != nil {
		return nil, fmt.Errorf("tool: workspace %s: %w", dir, err)
	}
	w := &Workspace{root: real, mount: path.Clean(mountPath), fs: r}
	w.protect(protected)
	return w, nil
}

// NewLexicalWorkspace returns a workspace mounted at mountPath (default
// [sandbox.DefaultMountPath]; it must be absolute) with no directory
// behind it, for deciding what a run's workspace would refuse where no
// directory is at hand (keel policy check). Its paths resolve by their
// text alone, as if the workspace held no symbolic link: a path that
// leaves it (through ".." or an absolute path outside the mount path), a
// protected path written and a hidden one are refused in the words of a
// workspace [NewWorkspace] opened; nothing is read from the file system.
// It has no [Workspace.FS] and no host paths.
func NewLexicalWorkspace(mountPath string, protected []string) (*Workspace, error) {
	if mountPath == "" {
		mountPath = sandbox.DefaultMountPath
	}
	if !path.IsAbs(mountPath) {
		return nil, fmt.Errorf("tool: workspace mount path %q is not absolute", mountPath)
	}
	w := &Workspace{mount: path.Clean(mountPath), lexical: true}
	w.protect(protected)
	return w, nil
}

// protect sets the workspace's protected paths: [sandbox.DefaultProtected]
// and protected, cleaned, workspace-relative.
func (w *Workspace) protect(protected []string) {
	seen := map[string]bool{}
	for _, p := range append(append([]string(nil), sandbox.DefaultProtected...), protected...) {
		c := path.Clean(strings.TrimPrefix(filepath.ToSlash(p), "/"))
		if c == "." || c == ".." || strings.HasPrefix(c, "../") || seen[c] {
			continue
		}
		seen[c] = true
		w.protected = append(w.protected, c)
	}
}

// Root returns the workspace's real host path.
func (w *Workspace) Root() string { return w.root }

// MountPath returns where the workspace appears inside the sandbox.
func (w *Workspace) MountPath() string { return w.mount }

// FS returns the workspace as an [os.Root]: every access through it stays
// inside the workspace even if links change underneath.
func (w *Workspace) FS() *os.Root { return w.fs }

// Close releases the workspace's directory handle.
func (w *Workspace) Close() error {
	if w.state != nil {
		w.state.Close()
	}
	if w.fs == nil {
		return nil // a lexical workspace
	}
	return w.fs.Close()
}

// Rel maps a path as the model wrote it to a clean workspace-relative
// slash path ("." for the root), lexically, without touching the file
// system; use [Workspace.Resolve] before accessing anything, since ".."
// after a symbolic link does not mean what it seems. Relative paths are
// relative to the workspace; absolute paths must lie under the mount path
// (or the host root). Paths are used literally: spaces and any Unicode are
// kept byte for byte, never normalised (NFC and NFD spellings are
// different files). It returns an error wrapping [ErrOutside] for a path
// that leaves the workspace, and an error for an empty path or one with a
// NUL byte.
func (w *Workspace) Rel(p string) (string, error) {
	parts, err := w.split(p)
	if err != nil {
		return "", err
	}
	rel, ok := lexicalRel(parts)
	if !ok {
		return "", fmt.Errorf("%s: %w", p, ErrOutside)
	}
	return rel, nil
}

// lexicalRel applies the components parts to the workspace root by their
// text and returns the workspace-relative path reached, or false when a
// ".." leaves the root.
func lexicalRel(parts []string) (string, bool) {
	var out []string
	for _, part := range parts {
		if part == ".." {
			if len(out) == 0 {
				return "", false
			}
			out = out[:len(out)-1]
			continue
		}
		out = append(out, part)
	}
	return joinRel(out), true
}

// split returns the components of p below the workspace root, uncleaned
// ("." and empty components dropped, ".." kept).
func (w *Workspace) split(p string) ([]string, error) {
	if p == "" {
		return nil, errors.New("empty path")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return nil, errors.New("path contains a NUL byte")
	}
	parts := components(p)
	if !path.IsAbs(p) {
		return parts, nil
	}
	for _, base := range []string{w.mount, w.root} {
		if base == "" {
			continue // a lexical workspace has no host root
		}
		if bp := components(base); hasPrefix(parts, bp) {
			return parts[len(bp):], nil
		}
	}
	return nil, fmt.Errorf("%s: %w (the workspace is %s)", p, ErrOutside, w.mount)
}

// components splits a slash path into its non-empty, non-"." parts.
func components(p string) []string {
	var out []string
	for part := range strings.SplitSeq(p, "/") {
		if part != "" && part != "." {
			out = append(out, part)
		}
	}
	return out
}

func equalParts(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

func joinRel(parts []string) string {
	if len(parts) == 0 {
		return "."
	}
	return strings.Join(parts, "/")
}

// Resolve maps a path as the model wrote it to the workspace-relative
// slash path of its real location, resolving it as the kernel would:
// component by component, following every symbolic link (including the
// final component and dangling links), and applying ".." to the real
// directory reached so far, not to the text. Components that do not exist
// yet are kept as written, so a new file under a linked directory resolves
// through the link. It returns an error wrapping [ErrOutside] when the real
// location is outside the workspace, and an error for a link loop (more
// than 40 links, as Linux's MAXSYMLINKS), a non-directory used as a
// directory, or an empty path.
//
// A path the run's policy forbids ([Workspace.Hide]) is refused with an
// error wrapping [ErrHidden], under its name as written and under its real
// location (a link to it is refused too).
func (w *Workspace) Resolve(p string) (string, error) {
	parts, err := w.split(p)
	if err != nil {
		return "", err
	}
	out, err := w.resolve(parts)
	if err != nil {
		return "", fmt.Errorf("%s: %w", p, err)
	}
	if lex, lerr := w.Rel(p); w.Hidden(out) || lerr == nil && w.Hidden(lex) {
		return "", fmt.Errorf("%s: %w", p, ErrHidden)
	}
	return out, nil
}

// Hide makes file tools treat the workspace-relative paths as absent
// (absolute paths are ignored): the [paths] deny list of the run's
// policy. Call it before the workspace is used.
//
// Hide also records the identity (device and inode) of each of them that
// exists, where it really is: from then on a path is hidden when it, or
// any directory above it in the workspace, has one of those identities,
// whatever it is called by then. Renaming a denied path's parent
// directory (mv config cfg2) or making a hard link to a denied file
// therefore does not open it to the file tools.
func (w *Workspace) Hide(paths []string) {
	for _, p := range paths {
		c := path.Clean(filepath.ToSlash(p))
		if c == "." || strings.HasPrefix(c, "/") || c == ".." || strings.HasPrefix(c, "../") || slices.Contains(w.hidden, c) {
			continue
		}
		w.hidden = append(w.hidden, c)
		if w.lexical {
			continue // no files, no identities
		}
		real, err := w.resolve(strings.Split(c, "/"))
		if err != nil || real == "." {
			continue
		}
		if fi, err := os.Lstat(w.HostPath(real)); err == nil {
			w.hiddenIDs = append(w.hiddenIDs, fi)
		}
	}
}

// Hidden reports whether the workspace-relative path rel is, or lies
// under, a path given to [Workspace.Hide], or is where one of them
// really is (through a link), or whether rel or a directory above it
// (below the workspace root) is a file or directory one of them was when
// Hide was called (by device and inode: renamed, or a hard link).
func (w *Workspace) Hidden(rel string) bool {
	for _, h := range w.hidden {
		if under(rel, h) {
			return true
		}
		if real, err := w.resolve(strings.Split(h, "/")); err == nil && real != "." && real != h && under(rel, real) {
			return true
		}
	}
	return w.hiddenIdentity(rel)
}

// hiddenIdentity reports whether rel or one of its ancestors below the
// root has the identity of a hidden path. Components are taken as they
// are (lstat): a symbolic link on the way is not followed here, since
// [Workspace.Resolve] checks the real location it leads to.
func (w *Workspace) hiddenIdentity(rel string) bool {
	if len(w.hiddenIDs) == 0 || rel == "." {
		return false
	}
	cur := w.root
	for part := range strings.SplitSeq(rel, "/") {
		if part == "" || part == "." || part == ".." {
			return false // not a resolved path; the name checks apply
		}
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if err != nil {
			return false
		}
		for _, id := range w.hiddenIDs {
			if os.SameFile(fi, id) {
				return true
			}
		}
		if !fi.IsDir() {
			return false
		}
	}
	return false
}

const maxLinks = 40 // as Linux's MAXSYMLINKS

// resolve walks queue from the workspace root in host path space, as the
// kernel's path walk does, and returns the real location relative to the
// root. The walk may pass outside the root (a link to "../ws/sub" that
// comes back in); only the final location must be inside. Absolute link
// targets under the mount path mean the workspace, as inside the sandbox.
func (w *Workspace) resolve(queue []string) (string, error) {
	if w.lexical {
		rel, ok := lexicalRel(queue)
		if !ok {
			return "", ErrOutside
		}
		return rel, nil
	}
	rootParts := components(w.root)
	mountParts := components(w.mount)
	cur := append([]string(nil), rootParts...) // absolute host components
	links := 0
	missing := false // a component did not exist: nothing below can be a link
	queue = append([]string(nil), queue...)
	for len(queue) > 0 {
		part := queue[0]
		queue = queue[1:]
		if part == ".." {
			if missing {
				return "", fmt.Errorf("%s: %w", hostRel(cur, rootParts), fs.ErrNotExist)
			}
			if len(cur) > 0 {
				cur = cur[:len(cur)-1]
			}
			continue
		}
		next := append(cur[:len(cur):len(cur)], part)
		if missing {
			cur = next
			continue
		}
		host := "/" + strings.Join(next, "/")
		fi, err := os.Lstat(host)
		if errors.Is(err, fs.ErrNotExist) {
			missing = true
			cur = next
			continue
		}
		if err != nil {
			return "", fmt.Errorf("%s: %w", hostRel(next, rootParts), unwrapPathError(err))
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			if !fi.IsDir() && hasName(queue) {
				return "", fmt.Errorf("%s: %w", hostRel(next, rootParts), errNotDir)
			}
			cur = next
			continue
		}
		links++
		if links > maxLinks {
			return "", errors.New("too many levels of symbolic links")
		}
		target, err := os.Readlink(host)
		if err != nil {
			return "", fmt.Errorf("%s: %w", hostRel(next, rootParts), unwrapPathError(err))
		}
		if target == "" {
			return "", fmt.Errorf("%s: empty symbolic link", hostRel(next, rootParts))
		}
		tparts := components(target)
		if path.IsAbs(target) {
			cur = nil
			if hasPrefix(tparts, mountParts) {
				cur = append(cur, rootParts...)
				tparts = tparts[len(mountParts):]
			}
		}
		queue = append(tparts, queue...)
	}
	if !hasPrefix(cur, rootParts) {
		return "", ErrOutside
	}
	return joinRel(cur[len(rootParts):]), nil
}

var errNotDir = errors.New("not a directory")

// hostRel names host components for an error message: relative to the
// root when inside it, otherwise "(outside the workspace)".
func hostRel(parts, rootParts []string) string {
	if hasPrefix(parts, rootParts) {
		return joinRel(parts[len(rootParts):])
	}
	return "(outside the workspace)"
}

func hasPrefix(parts, prefix []string) bool {
	return len(parts) >= len(prefix) && equalParts(parts[:len(prefix)], prefix)
}

// hasName reports whether parts contain a component other than "..".
func hasName(parts []string) bool {
	for _, p := range parts {
		if p != ".." {
			return true
		}
	}
	return false
}

func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Path, pe.Err)
	}
	return err
}

// Protected reports whether the resolved workspace-relative path rel is,
// or lies under, a protected path, or has a component named .git (in
// any letter case). A protected path counts under its literal name and
// under the real location it resolves to, so linking .git/hooks
// elsewhere does not open a way around the rule.
//
// File tools never write git's metadata: many files in a git directory
// make the host's git run a program or read another repository's
// configuration (config, config.worktree, hooks, commondir, the .git file
// of a worktree, submodule git directories), so the simplest rule that
// covers all of them, in every repository nested in the workspace, is the
// component itself. The agent changes a repository through git in the
// sandbox instead (docs/sandbox.md).
func (w *Workspace) Protected(rel string) bool {
	if hasGitComponent(rel) {
		return true
	}
	for _, p := range w.protected {
		if under(rel, p) {
			return true
		}
		if real, err := w.resolve(strings.Split(p, "/")); err == nil && real != "." && under(rel, real) {
			return true
		}
	}
	return false
}

func under(rel, p string) bool { return rel == p || strings.HasPrefix(rel, p+"/") }

// gitHostOnly reports whether the slash path rel is a git hook or
// configuration file (what the sandbox mounts read-only: hooks/,
// config, config.worktree of a git directory).
func gitHostOnly(rel string) bool {
	parts := strings.Split(rel, "/")
	for i, part := range parts {
		if strings.EqualFold(part, ".git") && i+1 < len(parts) {
			switch strings.ToLower(parts[i+1]) {
			case "hooks", "config", "config.worktree":
				return true
			}
		}
	}
	return false
}

// hasGitComponent reports whether the slash path rel has a component
// named .git, compared without letter case (as git does on
// case-insensitive file systems).
func hasGitComponent(rel string) bool {
	for part := range strings.SplitSeq(rel, "/") {
		if strings.EqualFold(part, ".git") {
			return true
		}
	}
	return false
}

// ResolveWrite is [Workspace.Resolve] for a path about to be written: it
// also refuses protected paths with an error wrapping [ErrProtected]
// (checking the path as written as well as its real location, so a
// link named .git elsewhere counts too), and the workspace root itself.
func (w *Workspace) ResolveWrite(p string) (string, error) {
	rel, err := w.Resolve(p)
	if err != nil {
		return "", err
	}
	if rel == "." {
		return "", fmt.Errorf("%s: is the workspace root, not a file", p)
	}
	if lex, err := w.Rel(p); hasGitComponent(rel) || err == nil && hasGitComponent(lex) {
		if gitHostOnly(rel) || err == nil && gitHostOnly(lex) {
			// The sandbox shows them read-only too: bash would fail.
			return "", fmt.Errorf("%s: %w (git's hooks and configuration are read-only for the agent, for file tools and in the sandbox alike; a person changes them on the host)", p, ErrProtected)
		}
		return "", fmt.Errorf("%s: %w (git's metadata is read-only for file tools; change the repository with git through the bash tool)", p, ErrProtected)
	}
	if w.Protected(rel) {
		return "", fmt.Errorf("%s: %w (read-only for the agent)", p, ErrProtected)
	}
	return rel, nil
}

// ResolveCall resolves the paths raw (as the model wrote them: a tool's
// [Tool].Scope of a call's arguments) that a call of a tool of effect e
// touches, as a run's gate does before its policy decides: a read-only
// tool's with [Workspace.Resolve] (an artifact of the state directory
// named in a result is readable and no workspace path: left out), any
// other's with [Workspace.ResolveWrite]. It returns the workspace-relative
// paths in order, and at the first path refused the error of its refusal
// with the paths resolved before it. keel policy check resolves its
// call's paths here too, so that it refuses what a run refuses.
func (w *Workspace) ResolveCall(e Effect, raw []string) ([]string, error) {
	var out []string
	for _, p := range raw {
		if _, ok := w.ArtifactRel(p); ok && e == ReadOnly {
			continue
		}
		var rel string
		var err error
		if e == ReadOnly {
			rel, err = w.Resolve(p)
		} else {
			rel, err = w.ResolveWrite(p)
		}
		if err != nil {
			return out, err
		}
		out = append(out, rel)
	}
	return out, nil
}

// HostPath returns the host path of a resolved workspace-relative path.
func (w *Workspace) HostPath(rel string) string {
	return filepath.Join(w.root, filepath.FromSlash(rel))
}

// SandboxPath returns the in-sandbox path of a workspace-relative path.
func (w *Workspace) SandboxPath(rel string) string {
	if rel == "." {
		return w.mount
	}
	return path.Join(w.mount, rel)
}
