//go:build linux

package linux

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/keel-run/keel/sandbox/linux/limitexec"
	"golang.org/x/sys/unix"
)

// spawnJob is one exec request queued for the spawner thread.
type spawnJob struct {
	id    uint64
	req   *execRequest
	files []*os.File
}

// spawner owns the one OS thread that forks commands. The thread drops
// its capabilities and installs Landlock and seccomp for itself alone
// (both are per-thread until a process execs), so every command forked
// from it inherits them while the rest of the init keeps what it needs.
// It never unlocks the thread: when the goroutine ends, the runtime
// discards the thread rather than reuse a restricted one.
func (st *initState) spawner(cfg *initConfig, runTasks []*os.File, ready chan<- error) {
	runtime.LockOSThread()
	if err := hardenThread(cfg, st.report); err != nil {
		ready <- err
		return
	}
	ready <- nil
	tid := []byte(strconv.Itoa(unix.Gettid()))
	for job := range st.spawn {
		st.start(job, tid, runTasks)
	}
}

// start forks and execs one command. To put the child in its cgroup v1
// groups before it runs a single instruction, the thread moves itself
// into them, forks (a child inherits its forking thread's groups), and
// moves back; under cgroup v2 the child is cloned straight into its
// group (CLONE_INTO_CGROUP).
func (st *initState) start(job *spawnJob, tid []byte, runTasks []*os.File) {
	req := job.req
	defer closeAll(job.files)
	fail := func(errno syscall.Errno, format string, args ...any) {
		_ = st.ctl.Send(&msg{Op: opStartErr, ID: job.id, Errno: int(errno), Message: fmt.Sprintf(format, args...)})
	}
	nOut := 1
	if req.SplitStderr {
		nOut = 2
	}
	stdin := st.devNull
	if req.Stdin {
		if len(job.files) <= nOut {
			fail(unix.EINVAL, "malformed exec request")
			return
		}
		stdin = job.files[nOut]
		nOut++
	}
	need := nOut + req.V1Tasks
	if req.V2Dir {
		need++
	}
	if len(job.files) < need || len(req.Args) == 0 {
		fail(unix.EINVAL, "malformed exec request")
		return
	}
	stdout := job.files[0]
	stderr := stdout
	if req.SplitStderr {
		stderr = job.files[1]
	}
	v1 := job.files[nOut : nOut+req.V1Tasks]
	var v2 *os.File
	if req.V2Dir {
		v2 = job.files[nOut+req.V1Tasks]
	}
	if fi, err := os.Stat(req.Dir); err != nil || !fi.IsDir() {
		fail(unix.ENOENT, "working directory %s does not exist", req.Dir)
		return
	}
	path, errno := lookPath(req.Args[0], req.Env, req.Dir)
	if errno != 0 {
		if errno == unix.ENOENT {
			fail(errno, "%s: command not found", req.Args[0])
		} else {
			fail(errno, "%s: %s", req.Args[0], errno.Error())
		}
		return
	}
	for _, f := range v1 {
		if _, err := f.Write(tid); err != nil {
			st.leave(tid, runTasks)
			fail(errnoOf(err), "join cgroup: %v", err)
			return
		}
	}
	sys := &syscall.SysProcAttr{Setsid: true}
	if v2 != nil {
		sys.UseCgroupFD = true
		sys.CgroupFD = int(v2.Fd())
	}
	attr := &syscall.ProcAttr{
		Dir:   req.Dir,
		Files: []uintptr{stdin.Fd(), stdout.Fd(), stderr.Fd()},
		Sys:   sys,
	}
	argv := req.Args
	env := slices.DeleteFunc(slices.Clone(req.Env), func(kv string) bool {
		return strings.HasPrefix(kv, limitexec.Env+"=") // the trampoline's alone
	})
	trampoline := needsTrampoline(req.Rlimits)
	if trampoline {
		// The command starts as the trampoline, which applies every
		// limit to itself and executes the command in its place.
		lims := make([]limitexec.Limit, len(req.Rlimits))
		for i, r := range req.Rlimits {
			lims[i] = limitexec.Limit{Resource: r.Resource, Cur: r.Cur, Max: r.Max}
		}
		argv = limitexec.Args(path, req.Args)
		env = append(env, limitexec.Env+"="+limitexec.Encode(lims))
		path = "/proc/self/exe"
	}
	attr.Env = env
	restore := func() {}
	if !trampoline {
		restore = preForkLimits(req.Rlimits)
	}
	st.mu.Lock()
	pid, err := syscall.ForkExec(path, argv, attr)
	if err == nil {
		st.procs[pid] = job.id
	}
	st.mu.Unlock()
	restore()
	st.leave(tid, runTasks)
	if err != nil {
		e := errnoOf(err)
		switch e {
		case unix.ENOENT:
			fail(e, "%s: command not found", req.Args[0])
		case unix.EACCES, unix.EPERM:
			fail(e, "%s: permission denied", req.Args[0])
		default:
			fail(e, "%s: %v", req.Args[0], err)
		}
		return
	}
	if !trampoline && len(req.Rlimits) > 0 {
		// The soft limits held from the fork; the hard ones now, from
		// another thread: this one's seccomp filter refuses setting
		// another process's limits, as it does to every command.
		done := make(chan struct{})
		go func() {
			defer close(done)
			for _, r := range req.Rlimits {
				lim := unix.Rlimit{Cur: r.Cur, Max: r.Max}
				var old unix.Rlimit
				if err := unix.Prlimit(pid, r.Resource, nil, &old); err == nil {
					lim.Max = min(lim.Max, old.Max)
					lim.Cur = min(lim.Cur, lim.Max)
				}
				_ = unix.Prlimit(pid, r.Resource, &lim, nil)
			}
		}()
		<-done
	}
	_ = st.ctl.Send(&msg{Op: opStarted, ID: job.id, Pid: pid})
}

// minForkOpenFiles is the smallest open-file limit lowered on the init
// for the instant of a fork: below it, an init goroutine opening a file
// meanwhile could find no free descriptor under the limit, so the
// command goes through the trampoline instead.
const minForkOpenFiles = 1024

// needsTrampoline reports whether a command with rls starts through
// package limitexec's trampoline (about one Go program's start, a few
// milliseconds) rather than straight from the fork: when a limit must
// hold from its first instruction that the init cannot take on for the
// instant of the fork. Memory and processes (rlimits only without
// cgroups) would stop the init's own runtime from growing its heap or
// starting a thread; a small open-file limit would starve it.
func needsTrampoline(rls []rlimit) bool {
	for _, r := range rls {
		switch r.Resource {
		case unix.RLIMIT_DATA, unix.RLIMIT_NPROC:
			return true
		case unix.RLIMIT_NOFILE:
			if r.Cur < minForkOpenFiles {
				return true
			}
		}
	}
	return false
}

// preForkLimits lowers the init's own soft RLIMIT_FSIZE, RLIMIT_CPU and
// RLIMIT_NOFILE to the command's for the instant of the fork, so the
// command starts with them; its hard limits follow by prlimit (a command
// that raised its soft limit meanwhile is lowered again). All three are
// harmless to the init for that instant: it writes no regular files, it
// absorbs SIGXCPU, and an open-file limit of at least
// [minForkOpenFiles] is far above the descriptors it holds. The returned
// function restores them.
func preForkLimits(rls []rlimit) func() {
	var saved []rlimit
	for _, r := range rls {
		if r.Resource != unix.RLIMIT_FSIZE && r.Resource != unix.RLIMIT_CPU && r.Resource != unix.RLIMIT_NOFILE {
			continue
		}
		var old unix.Rlimit
		if unix.Prlimit(0, r.Resource, nil, &old) != nil {
			continue
		}
		if unix.Prlimit(0, r.Resource, &unix.Rlimit{Cur: min(r.Cur, old.Max), Max: old.Max}, nil) == nil {
			saved = append(saved, rlimit{Resource: r.Resource, Cur: old.Cur, Max: old.Max})
		}
	}
	return func() {
		for _, r := range saved {
			_ = unix.Prlimit(0, r.Resource, &unix.Rlimit{Cur: r.Cur, Max: r.Max}, nil)
		}
	}
}

// leave returns the spawner thread to the run's own cgroups.
func (st *initState) leave(tid []byte, runTasks []*os.File) {
	for _, f := range runTasks {
		_, _ = f.Write(tid)
	}
}

// lookPath finds name in the PATH of env, as a shell would; a name with
// a slash is taken as is (relative to dir).
func lookPath(name string, env []string, dir string) (string, syscall.Errno) {
	check := func(p string) syscall.Errno {
		full := p
		if !filepath.IsAbs(full) {
			full = filepath.Join(dir, full)
		}
		fi, err := os.Stat(full)
		if err != nil {
			return unix.ENOENT
		}
		if fi.IsDir() {
			return unix.EACCES
		}
		if err := unix.Faccessat(unix.AT_FDCWD, full, unix.X_OK, unix.AT_EACCESS); err != nil {
			return unix.EACCES
		}
		return 0
	}
	if strings.Contains(name, "/") {
		return name, check(name)
	}
	pathEnv := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	denied := false
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, name)
		switch check(p) {
		case 0:
			if !filepath.IsAbs(p) {
				p = filepath.Join(dir, p)
			}
			return p, 0
		case unix.EACCES:
			denied = true
		}
	}
	if denied {
		return "", unix.EACCES
	}
	return "", unix.ENOENT
}
