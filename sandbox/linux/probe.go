//go:build linux

package linux

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"github.com/keel-run/keel/sandbox"
	"golang.org/x/sys/unix"
)

// holderMode is the init marker's value for a process that only holds a
// user namespace open (for an ID-mapped mount) until its stdin closes.
const holderMode = "userns-holder"

// Available reports whether this machine can run a Linux sandbox at all,
// without starting one: nil, or an error wrapping
// [sandbox.ErrUnavailable] that names the setting to change. [New] runs
// the same checks and more (it actually creates the namespaces).
func Available() error { return probe() }

// probe checks the kernel settings that decide whether user namespaces
// can be created, and says which sysctl to change when they cannot.
func probe() error { return probeWith(readIntFile, os.Geteuid()) }

// probeWith is probe with the sysctl reader and effective uid injected.
func probeWith(read func(path string) (int, bool), euid int) error {
	if v, ok := read("/proc/sys/user/max_user_namespaces"); ok && v == 0 {
		return unavailable("user namespaces are disabled (user.max_user_namespaces = 0); enable them with: sysctl -w user.max_user_namespaces=15000")
	}
	if euid != 0 {
		if v, ok := read("/proc/sys/kernel/unprivileged_userns_clone"); ok && v == 0 {
			return unavailable("unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0); enable them with: sysctl -w kernel.unprivileged_userns_clone=1, or run Keel as root")
		}
		if v, ok := read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); ok && v == 1 {
			return unavailable("AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1); allow them with: sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or give the keel binary an AppArmor profile with the userns permission")
		}
	}
	if _, err := os.Stat("/proc/self/exe"); err != nil {
		return unavailable("/proc is not mounted (the sandbox re-executes /proc/self/exe): " + err.Error())
	}
	return nil
}

func unavailable(why string) error {
	return fmt.Errorf("%w: %s", sandbox.ErrUnavailable, why)
}

func readIntFile(p string) (int, bool) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return n, err == nil
}

// startError explains why the init could not be created.
func startError(err error) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return fmt.Errorf("sandbox/linux: start init: %w", err)
	}
	switch errno {
	case unix.EPERM, unix.EACCES:
		return unavailable(fmt.Sprintf("creating namespaces was refused (%v): user namespaces are blocked here (check user.max_user_namespaces, kernel.unprivileged_userns_clone, kernel.apparmor_restrict_unprivileged_userns, or the container's seccomp profile, which must allow clone with CLONE_NEWUSER)", errno))
	case unix.ENOSPC, unix.EUSERS:
		return unavailable(fmt.Sprintf("the user namespace limit is reached (%v): raise user.max_user_namespaces", errno))
	case unix.EINVAL:
		return unavailable(fmt.Sprintf("the kernel does not support the needed namespaces (%v): it needs CONFIG_USER_NS, CONFIG_PID_NS, CONFIG_NET_NS, CONFIG_IPC_NS and CONFIG_UTS_NS", errno))
	}
	return fmt.Errorf("sandbox/linux: start init: %w", err)
}

// setupError turns the init's setup failure into an error; mounts refused
// inside the namespaces mean the machine (usually a container) blocks
// them, which is ErrUnavailable.
func setupError(message string) error {
	if strings.Contains(message, "function not implemented") {
		return unavailable("the kernel lacks a needed interface (" + message + "); the sandbox needs Linux 5.12 or later (open_tree, move_mount, mount_setattr)")
	}
	if strings.Contains(message, "operation not permitted") && strings.Contains(message, "mount") {
		return unavailable("mounting inside the sandbox's namespaces was refused (" + message + "); in a container, allow mount in user namespaces (for Docker: --security-opt seccomp=unconfined --security-opt apparmor=unconfined, or --privileged)")
	}
	return errors.New(message)
}

// unavailableOr wraps an error that happened because the init died.
func (s *Sandbox) unavailableOr(err error) error {
	tail := ""
	if s.initErr != nil {
		tail = s.initErr.String()
	}
	if tail != "" {
		return fmt.Errorf("%w (init: %s)", err, tail)
	}
	return err
}

// holder is a process that keeps a user namespace alive.
type holder struct {
	cmd    *exec.Cmd
	stdin  *os.File
	nsPath string
}

// idmapHolder starts a process in a new user namespace that maps host
// uid/gid of the workspace's owner to the sandbox's uid, for use as the
// ID mapping of the workspace mount.
func idmapHolder(ownerUID, ownerGID, sandboxUID int) (*holder, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	defer r.Close()
	cmd := &exec.Cmd{
		Path:  "/proc/self/exe",
		Args:  []string{"keel-userns-holder"},
		Env:   []string{initEnv + "=" + holderMode},
		Stdin: r,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: ownerUID, HostID: sandboxUID, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: ownerGID, HostID: sandboxUID, Size: 1}},
		},
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("start user namespace holder: %w", err)
	}
	return &holder{cmd: cmd, stdin: w, nsPath: fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid)}, nil
}

func (h *holder) release() {
	h.stdin.Close()
	_ = h.cmd.Wait()
}

// holdUserns is the holder process's main: wait for stdin to close.
func holdUserns() int {
	buf := make([]byte, 1)
	for {
		if _, err := os.Stdin.Read(buf); err != nil {
			return 0
		}
	}
}
