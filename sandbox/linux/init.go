//go:build linux

package linux

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// initEnv is the environment variable that marks a process re-executed as
// a sandbox's init; its value is the protocol version.
const (
	// markerVar tags a command's processes when there are no cgroups to
	// track them (value: the request id).
	markerVar   = "KEEL_EXEC"
	initEnv     = "_KEEL_SANDBOX_INIT"
	initVersion = "1"
	ctlFD       = 3 // the control socket in the init process
)

// Init runs the sandbox's init process when the current process was
// re-executed as one, and returns immediately otherwise.
//
// Each [Sandbox] starts one init per run by executing /proc/self/exe in
// fresh namespaces, as runc and Docker's reexec do, so every program that
// creates a Sandbox must call Init first thing in main, and every test
// binary whose tests create one must call it first thing in TestMain:
//
//	func main() {
//		linux.Init()
//		...
//	}
//
// When the process is a sandbox init, Init never returns: it serves the
// sandbox until its owner closes it, then exits. It reads nothing but its
// control socket; the marker it looks for is an environment variable that
// Keel never passes to sandboxed commands.
func Init() {
	initCalled.Store(true)
	switch os.Getenv(initEnv) {
	case "":
		return
	case holderMode:
		os.Exit(holdUserns())
	case initVersion:
	default:
		fmt.Fprintf(os.Stderr, "keel sandbox init: protocol %q, want %q\n", os.Getenv(initEnv), initVersion)
		os.Exit(2)
	}
	os.Exit(initMain())
}

// initCalled records that the program called Init, so New can refuse to
// start an init that would run the program's own main instead.
var initCalled atomic.Bool

// initConfig is what the host tells the init to build. Paths are inside
// the sandbox unless named Host.
type initConfig struct {
	MountPath string `json:"mount_path"`
	// HostWorkspace is the workspace's host path, bound by path; empty
	// when the workspace arrives as a detached mount (the first file).
	HostWorkspace string `json:"host_workspace,omitempty"`
	// Protected are workspace-relative paths made read-only; each
	// exists (the host checked), and one that is missing now fails the
	// setup rather than being created.
	Protected []string `json:"protected"`
	// System are host directories bound read-only at the same path.
	System []string `json:"system"`
	// ReadOnly are extra host paths bound read-only at the same path, by
	// path; ReadOnlyTrees are the same but arrive as detached mounts, in
	// order, after the workspace's.
	ReadOnly      []string `json:"read_only,omitempty"`
	ReadOnlyTrees []string `json:"read_only_trees,omitempty"`
	// HostAlias is the workspace's host path, shown in the sandbox as a
	// symbolic link to MountPath when it can be (see hostAlias), so that
	// the paths git records (linked worktrees) are valid in both places.
	HostAlias string `json:"host_alias,omitempty"`
	// Masks are paths hidden inside the read-only tree (empty file or
	// directory over them).
	Masks    []string `json:"masks,omitempty"`
	Hostname string   `json:"hostname"`
	Home     string   `json:"home"`
	TmpSize  int64    `json:"tmp_size"`
	// RunTasks is the number of cgroup v1 "tasks" files of the run's own
	// cgroups, after the detached mounts; the spawner thread returns to
	// them after each fork.
	RunTasks int `json:"run_tasks,omitempty"`
	// Landlock and Seccomp enable those layers on the spawner thread.
	Landlock bool `json:"landlock"`
	Seccomp  bool `json:"seccomp"`
}

// initReport is what the init tells the host once ready.
type initReport struct {
	LandlockABI  int      `json:"landlock_abi"`
	LandlockNote string   `json:"landlock_note,omitempty"`
	Seccomp      bool     `json:"seccomp"`
	SeccompNote  string   `json:"seccomp_note,omitempty"`
	NoNewPrivs   bool     `json:"no_new_privs"`
	NestedNS     bool     `json:"nested_ns_blocked"`
	Warnings     []string `json:"warnings,omitempty"`
	// HostAlias is set when the init made initConfig.HostAlias.
	HostAlias bool `json:"host_alias,omitempty"`
}

// initState is the init process's state after setup.
type initState struct {
	ctl     *conn
	devNull *os.File
	spawn   chan *spawnJob
	report  *initReport

	// mu guards procs. The spawner holds it from fork to registration,
	// so the reaper never sees a child it cannot attribute.
	mu    sync.Mutex
	procs map[int]uint64 // pid of a command's direct child → request id
}

func initMain() int {
	// The init must not be killed or stopped by the processes it serves,
	// nor traced or read through /proc by them.
	// Catching (not ignoring) them keeps the init alive, and, unlike
	// SIG_IGN, does not pass on to the commands it execs.
	absorb := make(chan os.Signal, 16)
	signal.Notify(absorb, syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGTSTP,
		syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGXCPU, syscall.SIGXFSZ)
	go func() {
		for range absorb {
		}
	}()
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	os.Unsetenv(initEnv)
	// Descriptors the host process inherited without close-on-exec
	// (from whatever started it) must not reach the commands.
	_ = unix.CloseRange(ctlFD+1, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)

	f := os.NewFile(ctlFD, "keel-control")
	if f == nil {
		fmt.Fprintln(os.Stderr, "keel sandbox init: no control socket")
		return 2
	}
	ctl, err := newConn(f)
	if err != nil {
		fmt.Fprintf(os.Stderr, "keel sandbox init: %v\n", err)
		return 2
	}
	m, files, err := ctl.Recv()
	if err != nil || m.Op != opConfig || m.Config == nil {
		fmt.Fprintf(os.Stderr, "keel sandbox init: no configuration: %v\n", err)
		return 2
	}
	st, err := setupInit(ctl, m.Config, files)
	if err != nil {
		_ = ctl.Send(&msg{Op: opFatal, Message: err.Error()})
		return 1
	}
	if err := ctl.Send(&msg{Op: opReady, Report: st.report}); err != nil {
		return 1
	}
	go st.reap()
	return st.serve()
}

// setupInit builds the sandbox's file system and starts the spawner
// thread.
func setupInit(ctl *conn, cfg *initConfig, files []*os.File) (*initState, error) {
	rep := &initReport{}
	next := 0
	take := func() (*os.File, error) {
		if next >= len(files) {
			return nil, errors.New("sandbox/linux: configuration is missing a file descriptor")
		}
		f := files[next]
		next++
		return f, nil
	}
	var ws *os.File
	if cfg.HostWorkspace == "" {
		var err error
		if ws, err = take(); err != nil {
			return nil, err
		}
	}
	trees := make([]*os.File, len(cfg.ReadOnlyTrees))
	for i := range trees {
		var err error
		if trees[i], err = take(); err != nil {
			return nil, err
		}
	}
	runTasks := make([]*os.File, cfg.RunTasks)
	for i := range runTasks {
		var err error
		if runTasks[i], err = take(); err != nil {
			return nil, err
		}
	}
	if err := buildRoot(cfg, ws, trees, rep); err != nil {
		return nil, err
	}
	if ws != nil {
		ws.Close()
	}
	closeAll(trees)
	devNull, err := os.OpenFile("/dev/null", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox/linux: open /dev/null: %w", err)
	}
	st := &initState{
		ctl:     ctl,
		devNull: devNull,
		spawn:   make(chan *spawnJob),
		report:  rep,
		procs:   map[int]uint64{},
	}
	ready := make(chan error, 1)
	go st.spawner(cfg, runTasks, ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return st, nil
}

// serve handles host requests until the control socket closes.
func (st *initState) serve() int {
	for {
		m, files, err := st.ctl.Recv()
		if err != nil {
			// The host closed the sandbox (or died): exiting kills every
			// process in the PID namespace.
			return 0
		}
		switch m.Op {
		case opExec:
			if m.Exec == nil {
				closeAll(files)
				continue
			}
			st.spawn <- &spawnJob{id: m.ID, req: m.Exec, files: files}
		case opSignal:
			closeAll(files)
			go st.signalTree(m.ID, m.Pid, m.Signal)
		case opListen:
			closeAll(files)
			st.listen(m.ID)
		default:
			closeAll(files)
		}
	}
}

// reap collects every child of the init: the commands' direct children,
// whose status goes to the host, and orphans reparented to the init,
// which are only buried.
func (st *initState) reap() {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD)
	for {
		for {
			var ws unix.WaitStatus
			var ru unix.Rusage
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG|unix.WALL, &ru)
			if err == unix.EINTR {
				continue
			}
			if err != nil || pid <= 0 {
				break
			}
			if !ws.Exited() && !ws.Signaled() {
				continue
			}
			es := exitStatus{
				Status:   uint32(ws),
				UserUs:   ru.Utime.Sec*1e6 + ru.Utime.Usec,
				SystemUs: ru.Stime.Sec*1e6 + ru.Stime.Usec,
				MaxRSSKB: ru.Maxrss,
			}
			st.mu.Lock()
			id, ok := st.procs[pid]
			if ok {
				delete(st.procs, pid)
			}
			st.mu.Unlock()
			if ok {
				_ = st.ctl.Send(&msg{Op: opExited, ID: id, Pid: pid, Exit: &es})
			}
		}
		<-sigs
	}
}

// signalTree signals every process of a command, for hosts without
// cgroup tracking: its session (which its direct child, pid, leads), every
// process carrying its marker variable (a daemon that left the session),
// and, when no other command is running, every process but the init.
// With SIGKILL it waits until they are gone, up to killWait: a killed
// process blocked in the kernel (an exec reading its program from a
// disk under heavy I/O) dies only when the kernel lets it, which took
// more than the 500 rounds of 2 ms this loop once allowed.
func (st *initState) signalTree(id uint64, pid, sig int) {
	defer func() { _ = st.ctl.Send(&msg{Op: opSignaled, ID: id}) }()
	deadline := time.Now().Add(killWait)
	for time.Now().Before(deadline) {
		members := st.treeMembers(id, pid)
		_ = unix.Kill(-pid, syscall.Signal(sig))
		for _, p := range members {
			_ = unix.Kill(p, syscall.Signal(sig))
		}
		if sig != int(unix.SIGKILL) || len(members) == 0 {
			return
		}
		ts := unix.Timespec{Nsec: 2e6}
		_ = unix.Nanosleep(&ts, nil)
	}
}

// killWait bounds how long the init waits for a command's processes to
// be gone after SIGKILL; the host waits a little longer for its answer.
const killWait = 9 * time.Second

// treeMembers lists the live processes that belong to command id.
func (st *initState) treeMembers(id uint64, sid int) []int {
	st.mu.Lock()
	others := 0
	for _, other := range st.procs {
		if other != id {
			others++
		}
	}
	st.mu.Unlock()
	marker := []byte("\x00" + markerVar + "=" + strconv.FormatUint(id, 10) + "\x00")
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	var out []int
	for _, n := range names {
		p, err := strconv.Atoi(n)
		if err != nil || p <= 1 {
			continue
		}
		b, err := os.ReadFile("/proc/" + n + "/stat")
		if err != nil {
			continue
		}
		// Fields after the parenthesised command name: state ppid pgrp session.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		var state string
		var ppid, pgrp, session int
		if _, err := fmt.Sscanf(s[i+1:], " %s %d %d %d", &state, &ppid, &pgrp, &session); err != nil || state == "Z" {
			continue
		}
		switch {
		case session == sid, others == 0:
			out = append(out, p)
		default:
			env, err := os.ReadFile("/proc/" + n + "/environ")
			if err == nil && bytes.Contains(append([]byte{0}, env...), marker) {
				out = append(out, p)
			}
		}
	}
	return out
}

// listen opens the egress listener on the sandbox's loopback and hands
// its descriptor to the host, which serves the proxy on it from outside.
func (st *initState) listen(id uint64) {
	fd, port, err := loopbackListener()
	if err != nil {
		_ = st.ctl.Send(&msg{Op: opListener, ID: id, Message: err.Error()})
		return
	}
	f := os.NewFile(uintptr(fd), "egress")
	_ = st.ctl.Send(&msg{Op: opListener, ID: id, Port: port}, f)
	f.Close()
}

func loopbackListener() (int, int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, 0, fmt.Errorf("sandbox/linux: egress socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(fd)
		return -1, 0, fmt.Errorf("sandbox/linux: egress bind: %w", err)
	}
	if err := unix.Listen(fd, 128); err != nil {
		unix.Close(fd)
		return -1, 0, fmt.Errorf("sandbox/linux: egress listen: %w", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return -1, 0, fmt.Errorf("sandbox/linux: egress getsockname: %w", err)
	}
	return fd, sa.(*unix.SockaddrInet4).Port, nil
}
