//go:build linux

package linux

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// newRoot is where the init assembles the sandbox's root before pivoting
// into it: a tmpfs over /tmp in the init's private mount namespace (the
// host's /tmp is untouched and stays reachable through descriptors opened
// before).
const newRoot = "/tmp"

// devices are the host device nodes bound into the sandbox's /dev.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// procMasked are /proc entries replaced by an empty file or directory;
// procReadOnly are made read-only (as Docker and runc do by default).
var (
	procMasked   = []string{"kcore", "keys", "timer_list", "sched_debug", "latency_stats", "kpagecount", "kpageflags", "kpagecgroup", "acpi", "scsi", "config.gz"}
	procReadOnly = []string{"sys", "sysrq-trigger", "irq", "bus", "fs"}
)

// nestedNamespaceLimits are the per-user-namespace sysctls the init sets
// to 0, so nothing inside can create a namespace of any kind (by clone,
// clone3 or unshare), whatever the syscall filter allows.
var nestedNamespaceLimits = []string{"user", "mnt", "pid", "net", "ipc", "uts", "cgroup", "time"}

// buildRoot assembles the sandbox's file system and pivots into it. ws is
// the workspace as a detached mount (nil when bound by path); trees are
// the detached read-only extras.
func buildRoot(cfg *initConfig, ws *os.File, trees []*os.File, rep *initReport) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("sandbox/linux: make mounts private: %w", err)
	}
	// Open every host source before /tmp is shadowed (the workspace may
	// live under the host's /tmp).
	type source struct {
		dst  string
		fd   int
		link string // set when the host path is a symbolic link
	}
	var sys []source
	for _, d := range cfg.System {
		fi, err := os.Lstat(d)
		if err != nil {
			continue
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(d)
			if err != nil {
				return fmt.Errorf("sandbox/linux: read link %s: %w", d, err)
			}
			sys = append(sys, source{dst: d, fd: -1, link: target})
			continue
		}
		fd, err := unix.Open(d, unix.O_PATH|unix.O_CLOEXEC|unix.O_DIRECTORY, 0)
		if err != nil {
			return fmt.Errorf("sandbox/linux: open %s: %w", d, err)
		}
		sys = append(sys, source{dst: d, fd: fd})
	}
	defer func() {
		for _, s := range sys {
			if s.fd >= 0 {
				unix.Close(s.fd)
			}
		}
	}()
	wsFD := -1
	if ws != nil {
		wsFD = int(ws.Fd())
	} else {
		fd, err := unix.Open(cfg.HostWorkspace, unix.O_PATH|unix.O_CLOEXEC|unix.O_DIRECTORY, 0)
		if err != nil {
			return fmt.Errorf("sandbox/linux: open workspace %s: %w", cfg.HostWorkspace, err)
		}
		defer unix.Close(fd)
		wsFD = fd
	}
	var extra []source
	for _, p := range cfg.ReadOnly {
		fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("sandbox/linux: open read-only path %s: %w", p, err)
		}
		defer unix.Close(fd)
		extra = append(extra, source{dst: p, fd: fd})
	}

	if err := unix.Mount("tmpfs", newRoot, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=4m"); err != nil {
		return fmt.Errorf("sandbox/linux: root tmpfs: %w", err)
	}
	in := func(p string) string { return filepath.Join(newRoot, p) }

	for _, s := range sys {
		if s.link != "" {
			if err := os.Symlink(s.link, in(s.dst)); err != nil {
				return fmt.Errorf("sandbox/linux: link %s: %w", s.dst, err)
			}
			continue
		}
		if err := os.MkdirAll(in(s.dst), 0o755); err != nil {
			return fmt.Errorf("sandbox/linux: mkdir %s: %w", s.dst, err)
		}
		if err := cloneMount(s.fd, in(s.dst), true); err != nil {
			return fmt.Errorf("sandbox/linux: bind %s: %w", s.dst, err)
		}
	}
	if err := buildProc(in("/proc"), rep); err != nil {
		return err
	}
	if err := buildDev(in("/dev"), cfg.TmpSize, rep); err != nil {
		return err
	}
	for _, d := range []string{"/sys", "/home", "/mnt"} {
		if err := os.MkdirAll(in(d), 0o755); err != nil {
			return fmt.Errorf("sandbox/linux: mkdir %s: %w", d, err)
		}
	}
	size := fmt.Sprintf("size=%d", cfg.TmpSize)
	tmpfs := []struct {
		dir, mode string
	}{{"/tmp", "1777"}, {"/run", "0755"}, {cfg.Home, "0700"}}
	if fi, err := os.Stat(in("/var/tmp")); err == nil && fi.IsDir() {
		tmpfs = append(tmpfs, struct{ dir, mode string }{"/var/tmp", "1777"})
	}
	for _, t := range tmpfs {
		if err := os.MkdirAll(in(t.dir), 0o755); err != nil && !errors.Is(err, unix.EROFS) {
			return fmt.Errorf("sandbox/linux: mkdir %s: %w", t.dir, err)
		}
		if err := unix.Mount("tmpfs", in(t.dir), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode="+t.mode+","+size); err != nil {
			return fmt.Errorf("sandbox/linux: tmpfs %s: %w", t.dir, err)
		}
	}

	// The workspace.
	wsDir := in(cfg.MountPath)
	if err := os.MkdirAll(wsDir, 0o755); err != nil {
		return fmt.Errorf("sandbox/linux: create mount path %s: %w", cfg.MountPath, err)
	}
	if ws != nil {
		if err := unix.MoveMount(wsFD, "", unix.AT_FDCWD, wsDir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("sandbox/linux: mount workspace at %s: %w", cfg.MountPath, err)
		}
	} else if err := cloneMount(wsFD, wsDir, false); err != nil {
		return fmt.Errorf("sandbox/linux: bind workspace at %s: %w", cfg.MountPath, err)
	}
	for _, p := range cfg.Protected {
		if err := protect(wsDir, p); err != nil {
			return err
		}
	}

	// Extra read-only paths.
	for _, s := range extra {
		if err := bindAt(in(s.dst), s.fd); err != nil {
			return err
		}
	}
	for i, t := range trees {
		dst := in(cfg.ReadOnlyTrees[i])
		if err := mkMountPoint(dst, int(t.Fd())); err != nil {
			return err
		}
		if err := unix.MoveMount(int(t.Fd()), "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("sandbox/linux: mount %s: %w", cfg.ReadOnlyTrees[i], err)
		}
	}
	for _, m := range cfg.Masks {
		if rel, ok := strings.CutPrefix(m, path.Clean(cfg.MountPath)+"/"); ok {
			if err := pinAncestors(wsDir, rel); err != nil {
				return err
			}
		}
		if err := mask(in(m)); err != nil {
			return err
		}
	}
	if err := hostAlias(cfg, in); err != nil {
		rep.Warnings = append(rep.Warnings, err.Error())
	} else if cfg.HostAlias != "" {
		rep.HostAlias = true
	}
	if err := unix.MountSetattr(unix.AT_FDCWD, newRoot, 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("sandbox/linux: make root read-only: %w", err)
	}
	if err := pivot(); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return fmt.Errorf("sandbox/linux: set hostname: %w", err)
	}
	if err := loopbackUp(); err != nil {
		rep.Warnings = append(rep.Warnings, err.Error())
	}
	return finishProc(rep)
}

// cloneMount mounts a recursive copy of the tree at fd on dst, read-only
// (and nosuid, nodev) when ro, else nosuid and nodev only.
func cloneMount(fd int, dst string, ro bool) error {
	tfd, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(tfd)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if ro {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(tfd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("mount_setattr: %w", err)
	}
	if err := unix.MoveMount(tfd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount: %w", err)
	}
	return nil
}

// bindAt binds the read-only tree at fd on dst, creating the mount point
// (a directory or an empty file, like the source) if it is missing.
func bindAt(dst string, fd int) error {
	if err := mkMountPoint(dst, fd); err != nil {
		return err
	}
	if err := cloneMount(fd, dst, true); err != nil {
		return fmt.Errorf("sandbox/linux: bind %s: %w", strings.TrimPrefix(dst, newRoot), err)
	}
	return nil
}

func mkMountPoint(dst string, src int) error {
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return fmt.Errorf("sandbox/linux: stat %s: %w", dst, err)
	}
	if _, err := os.Lstat(dst); err == nil {
		return nil
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return fmt.Errorf("sandbox/linux: mount point %s: %w", strings.TrimPrefix(dst, newRoot), err)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("sandbox/linux: mount point %s: %w", strings.TrimPrefix(dst, newRoot), err)
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("sandbox/linux: mount point %s: %w", strings.TrimPrefix(dst, newRoot), err)
	}
	return f.Close()
}

// protect makes the existing workspace-relative path rel read-only
// inside the sandbox: every ancestor below the workspace root becomes a
// mount point, so it cannot be renamed or removed to get around the
// protection, and the path itself is bound read-only. It refuses symbolic
// links on the way and a path that no longer exists (the host checked it
// just before; nothing is created here, see workspace.go).
func protect(wsDir, rel string) error {
	rel = path.Clean("/" + rel)[1:]
	if rel == "" || strings.HasPrefix(rel, "..") {
		return nil
	}
	parts := strings.Split(rel, "/")
	cur := wsDir
	for i, part := range parts {
		cur = filepath.Join(cur, part)
		last := i == len(parts)-1
		fi, err := os.Lstat(cur)
		switch {
		case err == nil && fi.Mode()&os.ModeSymlink != 0:
			return fmt.Errorf("sandbox/linux: protected path %s: %s is a symbolic link; refusing to run with it", rel, strings.Join(parts[:i+1], "/"))
		case err == nil && !fi.IsDir() && !last:
			// An ancestor that is a file (a git worktree's .git file):
			// protect the file itself, which is what git would follow.
			return roBind(cur)
		case err != nil:
			return fmt.Errorf("sandbox/linux: protected path %s changed while the sandbox started: %w", rel, err)
		}
		if last {
			return roBind(cur)
		}
		if err := selfBind(cur); err != nil {
			return fmt.Errorf("sandbox/linux: pin %s: %w", strings.Join(parts[:i+1], "/"), err)
		}
	}
	return nil
}

// pinAncestors makes every existing directory between the workspace
// root and the masked workspace-relative path rel a mount point of
// itself, so that none of them can be renamed or removed (EBUSY): a
// denied config/prod.env cannot be moved out from under its mask by
// renaming config. A symbolic link or a missing component ends the walk
// (the mask itself is not followed through links).
func pinAncestors(wsDir, rel string) error {
	parts := strings.Split(path.Clean(rel), "/")
	cur := wsDir
	for i, part := range parts[:len(parts)-1] {
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if err != nil || !fi.IsDir() {
			return nil
		}
		if err := selfBind(cur); err != nil {
			return fmt.Errorf("sandbox/linux: pin %s: %w", strings.Join(parts[:i+1], "/"), err)
		}
	}
	return nil
}

// selfBind makes dir a mount point of itself (writable), so it can be
// neither renamed nor removed.
func selfBind(dir string) error {
	if mounted, _ := isMountPoint(dir); mounted {
		return nil
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return cloneMount(fd, dir, false)
}

// roBind binds p read-only on itself.
func roBind(p string) error {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("sandbox/linux: protect %s: %w", p, err)
	}
	defer unix.Close(fd)
	if err := cloneMount(fd, p, true); err != nil {
		return fmt.Errorf("sandbox/linux: protect %s: %w", strings.TrimPrefix(p, newRoot), err)
	}
	return nil
}

// isMountPoint reports whether p is the root of a mount.
func isMountPoint(p string) (bool, error) {
	var a, b unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &a); err != nil {
		return false, err
	}
	if err := unix.Statx(unix.AT_FDCWD, filepath.Dir(p), unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &b); err != nil {
		return false, err
	}
	return a.Mnt_id != b.Mnt_id, nil
}

// mask hides p: an unreadable read-only tmpfs (mode 000) over a
// directory, an unopenable /dev/null (nodev) over anything else. A
// missing p is skipped.
//
// A masked directory must be unreadable, not empty: commands run without
// capabilities, so mode 000 denies even its owner (listing it, and
// reaching anything below it, fails with EACCES), and the mount is
// read-only, so the owner cannot chmod it. An empty directory would tell
// git in the workspace that every tracked file in it was deleted, and an
// agent's `git add -A` would record that; a lstat that fails with EACCES
// makes git skip the file instead.
func mask(p string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return nil
	}
	if fi.IsDir() {
		if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=0000"); err != nil {
			return fmt.Errorf("sandbox/linux: mask %s: %w", strings.TrimPrefix(p, newRoot), err)
		}
		return nil
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return nil
	}
	if err := unix.Mount("/dev/null", p, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("sandbox/linux: mask %s: %w", strings.TrimPrefix(p, newRoot), err)
	}
	// nodev and read-only: opening it fails (EACCES), so a write fails
	// instead of vanishing into /dev/null (a masked file in the
	// workspace would seem written) and a read says it is unreadable.
	if err := unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("sandbox/linux: mask %s read-only: %w", strings.TrimPrefix(p, newRoot), err)
	}
	return nil
}

// buildProc mounts a fresh /proc for the sandbox's PID namespace and
// hides the parts a container should not read; finishProc completes it.
func buildProc(dir string, rep *initReport) error {
	if err := os.MkdirAll(dir, 0o555); err != nil {
		return fmt.Errorf("sandbox/linux: mkdir /proc: %w", err)
	}
	if err := unix.Mount("proc", dir, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("sandbox/linux: mount /proc: %w", err)
	}
	for _, m := range procMasked {
		if err := mask(filepath.Join(dir, m)); err != nil {
			return err
		}
	}
	return nil
}

// finishProc runs last, after every mount is in place (cloning a mount
// tree counts as creating a mount namespace): it sets every
// /proc/sys/user/max_*_namespaces to 0 so nothing inside can create a
// namespace, then makes /proc/sys and the other writable kernel knobs
// read-only with plain bind mounts.
func finishProc(rep *initReport) error {
	nested := true
	for _, ns := range nestedNamespaceLimits {
		if err := os.WriteFile("/proc/sys/user/max_"+ns+"_namespaces", []byte("0"), 0); err != nil {
			nested = false
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("limit nested %s namespaces: %v", ns, err))
		}
	}
	rep.NestedNS = nested
	for _, r := range procReadOnly {
		p := "/proc/" + r
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("sandbox/linux: bind %s: %w", p, err)
		}
		if err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("sandbox/linux: make %s read-only: %w", p, err)
		}
	}
	return nil
}

// buildDev creates a minimal /dev: a few host device nodes, the usual
// links, a private devpts and a /dev/shm tmpfs.
func buildDev(dir string, tmpSize int64, rep *initReport) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sandbox/linux: mkdir /dev: %w", err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("sandbox/linux: /dev tmpfs: %w", err)
	}
	for _, d := range devices {
		dst := filepath.Join(dir, d)
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o666)
		if err != nil {
			return fmt.Errorf("sandbox/linux: /dev/%s: %w", d, err)
		}
		f.Close()
		if err := unix.Mount("/dev/"+d, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("sandbox/linux: bind /dev/%s: %w", d, err)
		}
	}
	links := [][2]string{{"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}, {"pts/ptmx", "ptmx"}}
	for _, l := range links {
		if err := os.Symlink(l[0], filepath.Join(dir, l[1])); err != nil {
			return fmt.Errorf("sandbox/linux: /dev/%s: %w", l[1], err)
		}
	}
	pts := filepath.Join(dir, "pts")
	if err := os.Mkdir(pts, 0o755); err != nil {
		return fmt.Errorf("sandbox/linux: /dev/pts: %w", err)
	}
	if err := unix.Mount("devpts", pts, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("no /dev/pts: %v", err))
	}
	shm := filepath.Join(dir, "shm")
	if err := os.Mkdir(shm, 0o1777); err != nil {
		return fmt.Errorf("sandbox/linux: /dev/shm: %w", err)
	}
	if err := unix.Mount("tmpfs", shm, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("mode=1777,size=%d", tmpSize)); err != nil {
		return fmt.Errorf("sandbox/linux: /dev/shm tmpfs: %w", err)
	}
	if err := unix.MountSetattr(unix.AT_FDCWD, dir, 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("sandbox/linux: make /dev read-only: %w", err)
	}
	return nil
}

// pivot makes newRoot the root and detaches the host's.
func pivot() error {
	if err := unix.Chdir(newRoot); err != nil {
		return fmt.Errorf("sandbox/linux: chdir new root: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("sandbox/linux: pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("sandbox/linux: detach old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("sandbox/linux: chdir /: %w", err)
	}
	return nil
}

// loopbackUp brings up "lo" in the sandbox's network namespace, so
// programs can talk to themselves on 127.0.0.1 (and nothing else).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	return nil
}

// hostAlias makes cfg.HostAlias, the workspace's host path, a symbolic
// link to the mount path in the new root (in maps a sandbox path to it),
// so that a path git records inside the sandbox can be rewritten to the
// host's (the git guard's relocate) and still lead to the workspace
// inside. It is made last, and only where nothing is yet: a host path
// that the root already holds (a system directory, a parent of another
// bound path, the mount path itself or a path in or around it) gets no
// alias, and the error says why.
func hostAlias(cfg *initConfig, in func(string) string) error {
	h, m := path.Clean(cfg.HostAlias), path.Clean(cfg.MountPath)
	switch {
	case cfg.HostAlias == "" || h == m:
		return nil
	case !path.IsAbs(h) || h == "/" || strings.HasPrefix(h+"/", m+"/") || strings.HasPrefix(m+"/", h+"/"):
		return fmt.Errorf("the workspace's host path %s is not shown in the sandbox (it overlaps the mount path %s): git worktrees made in the sandbox record %s paths", h, m, m)
	}
	if _, err := os.Lstat(in(h)); err == nil {
		return fmt.Errorf("the workspace's host path %s is not shown in the sandbox (the sandbox has that path already): git worktrees made in the sandbox record %s paths", h, m)
	}
	if err := os.MkdirAll(in(path.Dir(h)), 0o755); err != nil {
		return fmt.Errorf("the workspace's host path %s is not shown in the sandbox (%v): git worktrees made in the sandbox record %s paths", h, err, m)
	}
	if err := os.Symlink(m, in(h)); err != nil {
		return fmt.Errorf("the workspace's host path %s is not shown in the sandbox (%v): git worktrees made in the sandbox record %s paths", h, err, m)
	}
	return nil
}
