//go:build linux

package linux

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"github.com/landlock-lsm/go-landlock/landlock"
	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// deniedSyscalls fail with EPERM inside the sandbox: nothing a build or a
// test suite needs, and each a known way out of a container or into the
// kernel's attack surface (compare Docker's and Podman's default
// profiles, which allow-list; Keel deny-lists so unusual but harmless
// programs keep working). Names missing from this architecture's table
// are skipped.
var deniedSyscalls = []string{
	// Tracing and reading other processes' memory.
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	// Mounts and the root.
	"mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree",
	"fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	// Namespaces.
	"setns", "unshare",
	// Kernel: modules, kexec, BPF, keys, perf, io_uring, userfaultfd.
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"bpf", "keyctl", "add_key", "request_key", "perf_event_open",
	"io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd",
	// Host-wide state.
	"iopl", "ioperm", "swapon", "swapoff", "reboot", "acct", "quotactl", "quotactl_fd",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "syslog",
	"vhangup", "lookup_dcookie", "fanotify_init", "open_by_handle_at",
	"name_to_handle_at", "uselib", "_sysctl", "nfsservctl",
}

// Namespace flags refused in clone(2); clone3 passes its flags in memory
// a filter cannot read, so nested namespaces are also stopped by setting
// every /proc/sys/user/max_*_namespaces to 0 (see buildProc).
const cloneNewNS = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP

// allowedSocketFamilies are the address families a sandboxed program may
// open; every other family (packet, vsock, bluetooth, alg, ...) is
// refused. AF_VSOCK matters on a virtual machine: it reaches the
// hypervisor without any network namespace in the way.
var allowedSocketFamilies = []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// seccompPolicy builds the sandbox's syscall filter.
func seccompPolicy() (seccomp.Policy, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return seccomp.Policy{}, err
	}
	var names []string
	for _, n := range deniedSyscalls {
		if _, ok := info.SyscallNames[n]; ok {
			names = append(names, n)
		}
	}
	notAllowed := seccomp.ArgumentConditions{}
	for _, f := range allowedSocketFamilies {
		notAllowed = append(notAllowed, seccomp.Condition{Argument: 0, Operation: seccomp.NotEqual, Value: f})
	}
	socketConds := []seccomp.ArgumentConditions{notAllowed}
	for _, fam := range []uint64{unix.AF_INET, unix.AF_INET6} {
		for _, typ := range []uint64{unix.SOCK_RAW, unix.SOCK_PACKET} {
			for _, fl := range []uint64{0, unix.SOCK_CLOEXEC, unix.SOCK_NONBLOCK, unix.SOCK_CLOEXEC | unix.SOCK_NONBLOCK} {
				socketConds = append(socketConds, seccomp.ArgumentConditions{
					{Argument: 0, Operation: seccomp.Equal, Value: fam},
					{Argument: 1, Operation: seccomp.Equal, Value: typ | fl},
				})
			}
		}
	}
	var withArgs []seccomp.NameWithConditions
	withArgs = append(withArgs, seccomp.NameWithConditions{Name: "clone", Conditions: seccomp.ArgumentConditions{
		{Argument: 0, Operation: seccomp.BitsSet, Value: cloneNewNS},
	}})
	for _, c := range socketConds {
		withArgs = append(withArgs, seccomp.NameWithConditions{Name: "socket", Conditions: c})
	}
	// Setting another process's limits: commands run as the init's own
	// uid, so prlimit --pid 1 could starve the init (its egress proxy,
	// its git guard) or have it killed by a CPU limit. A process may
	// still read any limits and set its own (pid 0, as setrlimit does).
	withArgs = append(withArgs, seccomp.NameWithConditions{Name: "prlimit64", Conditions: seccomp.ArgumentConditions{
		{Argument: 0, Operation: seccomp.NotEqual, Value: 0},
		{Argument: 2, Operation: seccomp.NotEqual, Value: 0},
	}})
	// Faking terminal input (TIOCSTI) and the Linux console ioctl.
	for _, req := range []uint64{unix.TIOCSTI, unix.TIOCLINUX} {
		withArgs = append(withArgs, seccomp.NameWithConditions{Name: "ioctl", Conditions: seccomp.ArgumentConditions{
			{Argument: 1, Operation: seccomp.Equal, Value: req},
		}})
	}
	return seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: seccomp.ActionErrno, Names: names},
			{Action: seccomp.ActionErrno, NamesWithCondtions: withArgs},
		},
	}, nil
}

// loadSeccomp installs the filter on the calling thread only (no TSYNC),
// after no_new_privs. The library's program lets syscalls of a foreign
// architecture through to its default action, so a guard in front refuses
// them: a 64-bit process can make 32-bit system calls (int 0x80), whose
// numbers the filter would not recognise.
func loadSeccomp() error {
	pol, err := seccompPolicy()
	if err != nil {
		return err
	}
	body, err := pol.Assemble()
	if err != nil {
		return fmt.Errorf("assemble seccomp filter: %w", err)
	}
	info, err := arch.GetInfo("")
	if err != nil {
		return err
	}
	guard := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionErrno) | uint32(unix.EPERM)},
	}
	raw, err := bpf.Assemble(append(guard, body...))
	if err != nil {
		return fmt.Errorf("assemble seccomp filter: %w", err)
	}
	prog := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		prog[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	return nil
}

// landlockRules are the file system rules: the sandbox's whole root
// (already only what Keel mounted) readable and executable, the writable
// places writable, device nodes usable, and the init's program
// executable. Network is left to the network
// namespace; signals and abstract Unix sockets are scoped to the
// sandbox's commands.
func landlockRules(cfg *initConfig) []landlock.Rule {
	rw := []string{cfg.MountPath, "/tmp", "/run", cfg.Home, "/dev/shm"}
	if fi, err := os.Stat("/var/tmp"); err == nil && fi.IsDir() {
		rw = append(rw, "/var/tmp")
	}
	rules := []landlock.Rule{
		landlock.RODirs("/"),
		landlock.RWDirs(rw...).WithRefer(),
		landlock.RWFiles("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom").WithIoctlDev(),
		landlock.RWFiles("/dev/tty").WithIoctlDev().IgnoreIfMissing(),
		landlock.RWDirs("/dev/pts").WithIoctlDev().IgnoreIfMissing(),
		// The init's own program, outside the root: the spawner starts a
		// command with resource limits through it (package limitexec).
		// No path in the sandbox leads to it.
		landlock.ROFiles("/proc/self/exe"),
	}
	return rules
}

// restrictLandlock applies the Landlock rules to the calling thread only;
// the kernel's best-supported ABI is used, and the ABI in effect
// returned (0 without Landlock).
func restrictLandlock(cfg *initConfig) (int, string, error) {
	abi, err := llsyscall.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		return 0, fmt.Sprintf("Landlock is not available in this kernel (%v); enable CONFIG_SECURITY_LANDLOCK and add landlock to the lsm= boot parameter", err), nil
	}
	c := landlock.V7
	c = landlock.Config{HandledAccessFS: c.HandledAccessFS, Scoped: c.Scoped}.BestEffort()
	fd, flags, err := c.NewRulesetFD(landlockRules(cfg)...)
	if err != nil {
		return 0, "", fmt.Errorf("landlock ruleset: %w", err)
	}
	if fd < 0 {
		return 0, "Landlock ruleset is empty at this ABI", nil
	}
	defer unix.Close(fd)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return 0, "", fmt.Errorf("no_new_privs: %w", err)
	}
	if err := llsyscall.LandlockRestrictSelf(fd, flags); err != nil {
		return 0, "", fmt.Errorf("landlock_restrict_self: %w", err)
	}
	if abi > 7 {
		abi = 7
	}
	return abi, "", nil
}

// Secure bits set on the spawner thread: uid 0 gets no capabilities on
// exec, setuid does not touch capabilities, ambient capabilities cannot
// be raised, all locked.
const secureBits = 1<<0 | 1<<1 | 1<<2 | 1<<3 | 1<<5 | 1<<6 | 1<<7

// dropCapabilities clears every capability set of the calling thread,
// the bounding set included (the secure bits are locked before), so neither
// the thread nor anything it executes holds a capability (even inside
// the sandbox's own user namespace).
func dropCapabilities() error {
	last := lastCap()
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 63
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 63
	}
	return n
}

// hardenThread restricts the calling (locked) OS thread; every command
// forked from it inherits the restrictions. The order matters: secure
// bits and the bounding set need CAP_SETPCAP, so capabilities go last.
func hardenThread(cfg *initConfig, rep *initReport) error {
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, secureBits, 0, 0, 0); err != nil {
		return fmt.Errorf("sandbox/linux: securebits: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("sandbox/linux: no_new_privs: %w", err)
	}
	rep.NoNewPrivs = true
	if cfg.Landlock {
		abi, note, err := restrictLandlock(cfg)
		if err != nil {
			return fmt.Errorf("sandbox/linux: %w", err)
		}
		rep.LandlockABI, rep.LandlockNote = abi, note
	} else {
		rep.LandlockNote = "disabled by Options.NoLandlock"
	}
	if cfg.Seccomp {
		if err := loadSeccomp(); err != nil {
			return fmt.Errorf("sandbox/linux: %w", err)
		}
		rep.Seccomp = true
	} else {
		rep.SeccompNote = "disabled by Options.NoSeccomp"
	}
	if err := dropCapabilities(); err != nil {
		return fmt.Errorf("sandbox/linux: %w", err)
	}
	return nil
}

// errnoOf extracts the errno from a fork/exec error, 0 if none.
func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}
