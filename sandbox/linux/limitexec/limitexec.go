//go:build linux

// Package limitexec is the sandbox's exec trampoline. Resource limits
// must hold from a command's first instruction, and Go cannot run code
// in a child between fork and exec; so a command with open-file, memory
// or process limits is started as this same program (/proc/self/exe)
// with the limits in its environment ([Env]) and the command in its
// arguments ([Args]). The package's init applies the limits to its own
// process and executes the command in its place: same process, no
// window in which the command runs without them (runc's init does the
// same for a container's limits).
//
// It imports only syscall and unsafe, so the program's runtime and a
// handful of standard packages are all that start before it: the other
// packages of the program, imported after it in order, are never
// initialized in a trampoline.
package limitexec

import (
	"syscall"
	"unsafe"
)

// Env names the variable that carries the limits: resource:cur:max
// triples, comma-separated, in decimal. The command never sees it.
const Env = "KEEL_SANDBOX_RLIMITS"

// Arg0 is the trampoline's argv[0], shown while it runs.
const Arg0 = "keel-sandbox-exec"

// Limit is one rlimit to apply.
type Limit struct {
	Resource int
	Cur, Max uint64
}

// Args returns the trampoline's arguments for executing path with argv.
func Args(path string, argv []string) []string {
	return append([]string{Arg0, path}, argv...)
}

// Encode returns the value of [Env] for limits.
func Encode(limits []Limit) string {
	var b []byte
	for i, l := range limits {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendUint(b, uint64(l.Resource))
		b = append(b, ':')
		b = appendUint(b, l.Cur)
		b = append(b, ':')
		b = appendUint(b, l.Max)
	}
	return string(b)
}

// Decode parses the value of [Env].
func Decode(s string) ([]Limit, bool) {
	var out []Limit
	for len(s) > 0 {
		var f [3]uint64
		for i := range f {
			n, rest, ok := parseUint(s)
			if !ok {
				return nil, false
			}
			f[i], s = n, rest
			want := byte(':')
			if i == 2 {
				want = ','
			}
			if len(s) > 0 {
				if s[0] != want {
					return nil, false
				}
				s = s[1:]
				if i == 2 && len(s) == 0 {
					return nil, false // a trailing comma
				}
			} else if i < 2 {
				return nil, false
			}
		}
		if f[0] > 64 {
			return nil, false
		}
		out = append(out, Limit{Resource: int(f[0]), Cur: f[1], Max: f[2]})
	}
	return out, true
}

func init() {
	v, ok := syscall.Getenv(Env)
	if !ok {
		return
	}
	syscall.Exit(run(v))
}

// run applies the limits of v and executes the command; it returns only
// on failure, with the exit status a shell would give.
func run(v string) int {
	limits, ok := Decode(v)
	if !ok {
		return fail("malformed "+Env, 0, 126)
	}
	args, errno := cmdline()
	if errno != 0 || len(args) < 3 || args[0] != Arg0 {
		return fail("cannot read its arguments", errno, 126)
	}
	path, argv := args[1], args[2:]
	var env []string
	for _, kv := range syscall.Environ() {
		if len(kv) <= len(Env) || kv[:len(Env)+1] != Env+"=" {
			env = append(env, kv)
		}
	}
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return fail("bad arguments", 0, 126)
	}
	envp, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return fail("bad environment", 0, 126)
	}
	pathp, err := syscall.BytePtrFromString(path)
	if err != nil {
		return fail("bad path", 0, 126)
	}
	// Limits on memory and processes go last, after every allocation:
	// with them, the runtime could no longer grow its heap or start a
	// thread. No limit may be skipped: the command runs with all or
	// not at all.
	for pass := range 2 {
		for _, l := range limits {
			late := l.Resource == syscall.RLIMIT_DATA || l.Resource == rlimitNPROC
			if late != (pass == 1) {
				continue
			}
			if errno := apply(l); errno != 0 {
				return fail("cannot apply its resource limits", errno, 126)
			}
		}
	}
	_, _, errno = syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(pathp)),
		uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envp[0])))
	// As the spawner words a command it cannot start.
	switch errno {
	case syscall.ENOENT:
		return fail(argv0(argv, path)+": command not found", 0, 127)
	case syscall.EACCES, syscall.EPERM:
		return fail(argv0(argv, path)+": permission denied", 0, 126)
	}
	return fail(argv0(argv, path), errno, 126)
}

// rlimitNPROC is RLIMIT_NPROC, which package syscall does not name.
const rlimitNPROC = 6

// rlimit is the kernel's struct rlimit64.
type rlimit struct{ cur, max uint64 }

// apply lowers the process's limit l.Resource to l: the hard limit never
// rises above what it is (only a privileged process may raise it), and
// the soft never above the hard.
func apply(l Limit) syscall.Errno {
	var old rlimit
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, 0, uintptr(l.Resource), 0, uintptr(unsafe.Pointer(&old)), 0, 0); e != 0 {
		return e
	}
	lim := rlimit{cur: l.Cur, max: min(l.Max, old.max)}
	lim.cur = min(lim.cur, lim.max)
	_, _, e := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, 0, uintptr(l.Resource), uintptr(unsafe.Pointer(&lim)), 0, 0, 0)
	return e
}

// cmdline reads the process's arguments from /proc/self/cmdline: package
// os, which holds them, is not initialized yet.
func cmdline() ([]string, syscall.Errno) {
	fd, err := syscall.Open("/proc/self/cmdline", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, errnoOf(err)
	}
	defer syscall.Close(fd)
	var data []byte
	buf := make([]byte, 4096)
	for {
		n, err := syscall.Read(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, errnoOf(err)
		}
		if n == 0 {
			break
		}
		data = append(data, buf[:n]...)
	}
	var args []string
	start := 0
	for i, c := range data {
		if c == 0 {
			args = append(args, string(data[start:i]))
			start = i + 1
		}
	}
	return args, 0
}

func argv0(argv []string, path string) string {
	if len(argv) > 0 && argv[0] != "" {
		return argv[0]
	}
	return path
}

// fail writes "keel: what: error" to stderr, as a shell reports a
// command it could not execute, and returns code.
func fail(what string, errno syscall.Errno, code int) int {
	msg := "keel: " + what
	if errno != 0 {
		msg += ": " + errno.Error()
	}
	_, _ = syscall.Write(2, []byte(msg+"\n"))
	return code
}

func errnoOf(err error) syscall.Errno {
	if e, ok := err.(syscall.Errno); ok {
		return e
	}
	return syscall.EINVAL
}

func appendUint(b []byte, n uint64) []byte {
	var d [20]byte
	i := len(d)
	for {
		i--
		d[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	return append(b, d[i:]...)
}

// parseUint reads the decimal number at the start of s.
func parseUint(s string) (uint64, string, bool) {
	var n uint64
	i := 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		d := uint64(s[i] - '0')
		if n > (1<<64-1-d)/10 {
			return 0, s, false
		}
		n = n*10 + d
	}
	return n, s[i:], i > 0
}
