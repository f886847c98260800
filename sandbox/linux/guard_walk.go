//go:build linux

package linux

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// racyMargin is how recent a directory's change time may be for its
// listing to be trusted in the next check. File times come from a coarse
// clock (a tick of up to 10 ms), so an entry added in the same tick as
// the change the walker saw would leave the time unchanged; a directory
// changed within this margin of a walk is read again the next time (as
// git treats "racily clean" index entries).
const racyMargin = time.Second

// maxWalkPath bounds the workspace-relative path of a directory the
// walker descends into, in bytes. Below it every path the walker and the
// quarantine use (with the .keel/quarantine/<stamp>/ prefix) stays under
// the kernel's PATH_MAX of 4,096 bytes; a directory deeper than that
// could not be opened by path, so it is treated as unsafe instead of
// unchecked.
const maxWalkPath = 3000

// dirCache is what the walker keeps of one directory between checks.
type dirCache struct {
	ino, dev     uint64
	ctime, mtime int64
	racy         bool     // changed too close to the walk to be trusted
	git          bool     // it is a git directory
	subdirs      []string // names of the subdirectories to walk
	links        []string // names of its ".git" entries that are not directories
}

// unsafeDir is a directory the walker could not check.
type unsafeDir struct {
	path, reason string
}

// fixedDir is a directory the walker made readable for itself.
type fixedDir struct {
	path     string
	from, to uint32 // permission bits before and after
}

// walker finds git directories. The first walk reads every directory of
// the workspace; later walks read again only the directories whose
// identity or change time differs from the last walk (adding, removing
// or renaming an entry changes a directory's change time, which no
// program can set), and stat the others. Every path is opened beneath
// the workspace without following symbolic links (openat2
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), so a link swapped in cannot lead
// it out of the workspace.
//
// The walker fails closed. A directory it cannot read is made readable
// when Keel's user owns it (the owner may always change its mode, and so
// could the sandbox, which runs as that user when Keel is not root), and
// read again; one that Keel's user can neither read nor search belongs
// to someone else and is out of the sandbox's reach too, so nothing below
// it can be planted; anything else it cannot read (searchable but not
// listable, an I/O error, a path too deep to open) is reported as unsafe
// for the guard to quarantine.
type walker struct {
	rootfd     int // the workspace, opened O_PATH
	euid       int
	prev, next map[string]*dirCache
	since      int64    // change times from this on (ns) are racy
	dirs       []string // git directories
	links      []string // ".git" files and symbolic links
	unsafe     []unsafeDir
	fixed      []fixedDir
}

// openWorkspace opens the workspace dir for a walk: O_PATH needs no
// permission on dir itself, so a workspace root whose mode was taken
// away can still be repaired.
func openWorkspace(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("sandbox/linux: git check: open workspace: %w", err)
	}
	return fd, nil
}

// gone reports errors meaning that a path is no longer a directory to
// walk: it was removed, replaced by a file or a link, or renamed away.
func gone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV)
}

// denied reports a permission error.
func denied(err error) bool { return errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) }

// visit walks the directory rel and below.
func (w *walker) visit(rel string) {
	var st unix.Stat_t
	err := w.stat(rel, &st)
	if err != nil && denied(err) {
		switch w.access(rel) {
		case accessOK:
			err = w.stat(rel, &st)
		case accessSealed, accessGone:
			return
		case accessUnsafe:
			w.unsafe = append(w.unsafe, unsafeDir{rel, "it is a directory the git check cannot list, though programs running as Keel's user can enter it"})
			return
		}
	}
	if err != nil {
		if !gone(err) {
			w.unsafe = append(w.unsafe, unsafeDir{rel, "the git check cannot look at it: " + err.Error()})
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

// stat is fstatat of rel below the workspace, not following a final
// symbolic link.
func (w *walker) stat(rel string, st *unix.Stat_t) error {
	if rel == "." {
		return unix.Fstat(w.rootfd, st)
	}
	return unix.Fstatat(w.rootfd, rel, st, unix.AT_SYMLINK_NOFOLLOW)
}

// open opens rel below the workspace with flags, without following
// symbolic links and without leaving the workspace.
func (w *walker) open(rel string, flags uint64) (int, error) {
	return unix.Openat2(w.rootfd, rel, &unix.OpenHow{
		Flags:   flags | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// read lists directory rel and returns what the walker keeps of it, or
// nil (noting why) when it cannot be read.
func (w *walker) read(rel string) *dirCache {
	fd, err := w.open(rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil && denied(err) {
		switch w.access(rel) {
		case accessOK:
			fd, err = w.open(rel, unix.O_RDONLY|unix.O_DIRECTORY)
		case accessSealed, accessGone:
			return nil
		case accessUnsafe:
			w.unsafe = append(w.unsafe, unsafeDir{rel, "it is a directory the git check cannot list, though programs running as Keel's user can enter it"})
			return nil
		}
	}
	if err != nil {
		if !gone(err) {
			w.unsafe = append(w.unsafe, unsafeDir{rel, "the git check cannot read it: " + err.Error()})
		}
		return nil
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	// The identity of what is read, taken before reading: a change after
	// this moment changes the change time again.
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		w.unsafe = append(w.unsafe, unsafeDir{rel, "the git check cannot read it: " + err.Error()})
		return nil
	}
	ents, err := f.ReadDir(-1)
	if err != nil {
		w.unsafe = append(w.unsafe, unsafeDir{rel, "the git check cannot read it: " + err.Error()})
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
		case len(rel)+1+len(name) > maxWalkPath:
			w.unsafe = append(w.unsafe, unsafeDir{path.Join(rel, name), fmt.Sprintf("it is a directory deeper than the git check walks (a path over %d bytes)", maxWalkPath)})
			// A changed listing must report it again next time.
			c.racy = true
		default:
			c.subdirs = append(c.subdirs, name)
		}
	}
	return c
}

// accessResult is what access found.
type accessResult int

const (
	accessOK     accessResult = iota // the walker can reach and list it now
	accessGone                       // it is not there, or not a directory
	accessSealed                     // Keel's user cannot search it or an ancestor, and does not own it
	accessUnsafe                     // searchable by Keel's user, but not listable, and not Keel's to change
)

// access makes directory rel reachable and listable by the walker where
// Keel's user may: each directory from the workspace root down to rel
// that this user owns and cannot search (or, for rel, list) gets its
// owner's read, write and search permission (recorded in w.fixed). It
// opens each one with O_PATH beneath the workspace without following
// links and changes the mode through that handle, so a path swapped
// meanwhile cannot redirect the change.
func (w *walker) access(rel string) accessResult {
	prefixes := []string{"."}
	if rel != "." {
		cur := ""
		for part := range strings.SplitSeq(rel, "/") {
			cur = path.Join(cur, part)
			prefixes = append(prefixes, cur)
		}
	}
	for i, p := range prefixes {
		want := uint32(unix.X_OK)
		if i == len(prefixes)-1 {
			want |= unix.R_OK
		}
		if r := w.accessOne(p, want); r != accessOK {
			return r
		}
	}
	return accessOK
}

// accessOne makes directory p searchable (and readable, when want has
// R_OK) for the walker if Keel's user owns it.
func (w *walker) accessOne(p string, want uint32) accessResult {
	fd := w.rootfd
	if p != "." {
		var err error
		fd, err = w.open(p, unix.O_PATH|unix.O_NOFOLLOW)
		switch {
		case err != nil && gone(err):
			return accessGone
		case err != nil:
			return accessUnsafe
		}
		defer unix.Close(fd)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return accessUnsafe
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		// Not a directory (any more): the caller's retry sees it as it is.
		return accessGone
	}
	if unix.Faccessat2(fd, "", want, unix.AT_EMPTY_PATH|unix.AT_EACCESS) == nil {
		return accessOK
	}
	if int(st.Uid) == w.euid {
		from := st.Mode & 0o7777
		to := from | 0o700
		if err := unix.Fchmodat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), to, 0); err == nil &&
			unix.Faccessat2(fd, "", want, unix.AT_EMPTY_PATH|unix.AT_EACCESS) == nil {
			w.fixed = append(w.fixed, fixedDir{path: p, from: from, to: to})
			return accessOK
		}
		return accessUnsafe
	}
	if unix.Faccessat2(fd, "", unix.X_OK, unix.AT_EMPTY_PATH|unix.AT_EACCESS) != nil {
		return accessSealed
	}
	return accessUnsafe
}
