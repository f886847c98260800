package none

import (
	"bytes"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/keel-run/keel/sandbox"
)

// sysProcAttr starts the command in a new session (so a new process group
// and no controlling terminal) and asks the kernel to SIGKILL it if the
// thread that started it dies with Keel.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
}

// applyLimits sets the rlimits this backend can enforce on a started
// process (best effort; see the package documentation).
func applyLimits(pid int, lim sandbox.Limits) {
	set := func(res int, v uint64) {
		unix.Prlimit(pid, res, &unix.Rlimit{Cur: v, Max: v}, nil)
	}
	if lim.FileSize > 0 {
		set(unix.RLIMIT_FSIZE, uint64(lim.FileSize))
	}
	if lim.CPUTime > 0 {
		// SIGXCPU at the soft limit names the cause; the kernel's SIGKILL
		// at the hard limit, a second later, is the backstop.
		v := uint64(max(1, lim.CPUTime.Seconds()))
		unix.Prlimit(pid, unix.RLIMIT_CPU, &unix.Rlimit{Cur: v, Max: v + 1}, nil)
	}
	if lim.OpenFiles > 0 {
		set(unix.RLIMIT_NOFILE, uint64(lim.OpenFiles))
	}
}

// pipeInodes returns the inode numbers of the read ends, which identify
// the pipes in /proc/PID/fd.
func pipeInodes(files []*os.File) []uint64 {
	var out []uint64
	for _, f := range files {
		var st unix.Stat_t
		if unix.Fstat(int(f.Fd()), &st) == nil {
			out = append(out, st.Ino)
		}
	}
	return out
}

// procStat returns the state, process group and session of pid from
// /proc/PID/stat.
func procStat(pid string) (state byte, pgid, sid int, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, 0, 0, false
	}
	// The command name may contain spaces and parentheses: fields start
	// after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 4 {
		return 0, 0, 0, false
	}
	pgid, err1 := strconv.Atoi(string(f[2]))
	sid, err2 := strconv.Atoi(string(f[3]))
	if err1 != nil || err2 != nil || len(f[0]) == 0 {
		return 0, 0, 0, false
	}
	return f[0][0], pgid, sid, true
}

// procs lists the numeric entries of /proc.
func procs() []string {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	out := names[:0]
	for _, n := range names {
		if n != "" && n[0] >= '0' && n[0] <= '9' {
			out = append(out, n)
		}
	}
	return out
}

// members returns the live (not zombie) processes of the tree: those in
// the session or process group led by t.pid, and those whose initial
// environment carries t's marker (a descendant that left the session; the
// way Jenkins' ProcessTreeKiller finds a build's daemons).
func (t *tree) members() []int {
	var out []int
	self := os.Getpid()
	for _, name := range procs() {
		state, pgid, sid, ok := procStat(name)
		if !ok || state == 'Z' || state == 'X' {
			continue
		}
		p, err := strconv.Atoi(name)
		if err != nil || p == self {
			continue
		}
		if pgid == t.pid || sid == t.pid || t.marked(name) {
			out = append(out, p)
		}
	}
	return out
}

// marked reports whether process name's environment has t's marker.
func (t *tree) marked(name string) bool {
	if len(t.marker) == 0 {
		return false
	}
	env, err := os.ReadFile("/proc/" + name + "/environ")
	if err != nil {
		return false
	}
	return bytes.HasPrefix(env, t.marker[1:]) || bytes.Contains(env, t.marker)
}

// killHolders SIGKILLs every process other than Keel that still holds one
// of the pipes: a descendant that left the session keeps the output open.
func (t *tree) killHolders() {
	if len(t.inodes) == 0 {
		return
	}
	want := map[string]bool{}
	for _, ino := range t.inodes {
		want["pipe:["+strconv.FormatUint(ino, 10)+"]"] = true
	}
	self := strconv.Itoa(os.Getpid())
	for _, name := range procs() {
		if name == self {
			continue
		}
		fdDir := "/proc/" + name + "/fd"
		d, err := os.Open(fdDir)
		if err != nil {
			continue
		}
		fds, _ := d.Readdirnames(-1)
		d.Close()
		for _, fd := range fds {
			if l, err := os.Readlink(fdDir + "/" + fd); err == nil && want[l] {
				if p, err := strconv.Atoi(name); err == nil {
					unix.Kill(p, unix.SIGKILL)
				}
				break
			}
		}
	}
}

// pidNamespace identifies the pid namespace of this process (the inode
// of /proc/self/ns/pid), "" if unknown.
func pidNamespace() string {
	fi, err := os.Stat("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return strconv.FormatUint(st.Ino, 10)
}
