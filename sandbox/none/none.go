//go:build unix

// Package none is the sandbox backend that offers NO ISOLATION AT ALL.
//
// WARNING: commands run directly on the host, as the user running Keel,
// with that user's files, network, credentials and devices in reach. A
// command can delete anything that user can delete. It exists for tests
// and for people who pass `--sandbox none` on purpose; Keel never falls
// back to it on its own (see [sandbox.ErrUnavailable]).
//
// What it does keep is the non-interactive execution contract of
// [sandbox.Sandbox], so tools behave the same as under a real backend:
//
//   - stdin is /dev/null (unless [sandbox.Cmd].Stdin gives one), and the
//     command runs in its own session (and so its own process group) with
//     no controlling terminal, so programs that prompt see EOF and
//     programs that open /dev/tty fail at once;
//   - the environment is exactly [sandbox.BaseEnv] (HOME is a private
//     temporary directory), then [sandbox.Spec].Env, then [sandbox.Cmd].Env
//     (later entries win), plus the [MarkerVar] that tags the command's
//     processes; nothing of the host environment passes;
//   - the working directory is the workspace; a [sandbox.Cmd].Dir under the
//     mount path is mapped to the host directory (other absolute paths are
//     used as they are, since there is no mount namespace);
//   - the wall-time limit, the idle (no output) watchdog, the output-bytes
//     limit and context cancellation end the whole process tree: SIGTERM,
//     then SIGKILL after [sandbox.Limits].KillGrace;
//   - Exec returns when the direct child exits, without waiting for the
//     output pipe to close; descendants still running then (background
//     jobs) are ended the same way before Exec returns. The policy is that
//     nothing a command starts outlives its call.
//
// The process tree is found as: every process in the command's session or
// process group, plus, on Linux, every process whose environment carries
// the command's [MarkerVar] id and any process still holding the
// command's output pipe (descendants that called setsid, as daemons do).
// On Linux the direct child also gets SIGKILL if the thread that started
// it dies with Keel (PR_SET_PDEATHSIG). A descendant that both leaves the
// session and clears its environment and output escapes this backend;
// sandbox/linux has no such gap.
//
// Limits: FileSize, CPUTime and OpenFiles are applied with prlimit(2) right
// after the command starts (best effort: a process the command forks in
// its first instant may escape them). Memory, Processes and CPUShare are
// NOT enforced; use [github.com/keel-run/keel/sandbox/linux] for those.
// Network policy is not enforced either.
package none

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/keel-run/keel/sandbox"
)

// Sandbox runs commands on the host with no isolation. Create it with
// [New]. Exec is safe for concurrent use; Close ends every running
// command's process tree, waits for those Exec calls to return, removes the
// private HOME and is idempotent.
type Sandbox struct {
	spec  sandbox.Spec
	host  string // real host path of the workspace
	mount string // cleaned mount path
	home  string // private HOME directory

	mu      sync.Mutex
	closed  bool
	running map[int]*tree // running commands by process-group id
	calls   sync.WaitGroup
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// ErrClosed is returned by Exec after Close.
var ErrClosed = errors.New("sandbox/none: sandbox closed")

// DefaultKillGrace is the time between SIGTERM and SIGKILL when
// [sandbox.Limits].KillGrace is 0.
const DefaultKillGrace = 2 * time.Second

// New returns a sandbox that runs commands directly on the host, in the
// workspace directory spec.Workspace, with NO isolation. spec is copied.
// It returns an error if spec is nil, the workspace is not an existing
// directory, the mount path is not absolute, or the private HOME
// directory cannot be created. The HOME directory is made in the
// temporary directory and removed by Close; New also removes those that
// processes killed before their Close left there (see newHome).
func New(spec *sandbox.Spec) (*Sandbox, error) {
	if spec == nil {
		return nil, errors.New("sandbox/none: nil spec")
	}
	s := &Sandbox{spec: *spec, running: map[int]*tree{}}
	s.spec.Env = append([]string(nil), spec.Env...)
	s.spec.Protected = append([]string(nil), spec.Protected...)
	s.spec.Network.Allow = append([]string(nil), spec.Network.Allow...)
	if spec.Workspace == "" {
		return nil, errors.New("sandbox/none: spec has no workspace")
	}
	host, err := filepath.EvalSymlinks(spec.Workspace)
	if err == nil {
		host, err = filepath.Abs(host)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox/none: workspace: %w", err)
	}
	if fi, err := os.Stat(host); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("sandbox/none: workspace %s is not a directory", spec.Workspace)
	}
	s.host = host
	s.mount = spec.MountPath
	if s.mount == "" {
		s.mount = sandbox.DefaultMountPath
	}
	if !path.IsAbs(s.mount) {
		return nil, fmt.Errorf("sandbox/none: mount path %q is not absolute", s.mount)
	}
	s.mount = path.Clean(s.mount)
	home, err := newHome()
	if err != nil {
		return nil, fmt.Errorf("sandbox/none: create home: %w", err)
	}
	s.home = home
	return s, nil
}

// Home returns the private HOME directory commands see.
func (s *Sandbox) Home() string { return s.home }

// Close kills every running command's process tree, waits for their Exec
// calls to return and removes the private HOME directory. It is
// idempotent and returns the error of removing HOME, if any.
func (s *Sandbox) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for _, t := range s.running {
		t.kill(unix.SIGKILL)
	}
	s.mu.Unlock()
	s.calls.Wait()
	if err := os.RemoveAll(s.home); err != nil {
		return fmt.Errorf("sandbox/none: close: %w", err)
	}
	return nil
}

// hostDir maps a Cmd.Dir to a host directory.
func (s *Sandbox) hostDir(dir string) string {
	switch {
	case dir == "":
		return s.host
	case !path.IsAbs(dir):
		return filepath.Join(s.host, filepath.FromSlash(dir))
	}
	c := path.Clean(dir)
	if c == s.mount {
		return s.host
	}
	if rest, ok := strings.CutPrefix(c, s.mount+"/"); ok {
		return filepath.Join(s.host, filepath.FromSlash(rest))
	}
	return c
}

// env builds the command's environment: base, spec, command; later
// entries win.
func (s *Sandbox) env(cmd *sandbox.Cmd) []string {
	env := sandbox.BaseEnv(s.home)
	for _, kv := range s.spec.Env {
		if k, _, _ := strings.Cut(kv, "="); !slices.Contains(cmd.Unset, k) {
			env = append(env, kv)
		}
	}
	env = append(env, cmd.Env...)
	return dedupEnv(env)
}

// dedupEnv keeps the last value of each key, in first-seen order.
func dedupEnv(env []string) []string {
	idx := map[string]int{}
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

func lookupEnv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

// lookPath finds file in the command's PATH (not Keel's own), relative
// entries taken from dir.
func lookPath(file, pathEnv, dir string) (string, error) {
	executable := func(p string) bool {
		fi, err := os.Stat(p)
		return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
	}
	if strings.Contains(file, "/") {
		p := file
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if executable(p) {
			return p, nil
		}
		return "", exec.ErrNotFound
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		if p := filepath.Join(d, file); executable(p) {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// MarkerVar is the environment variable, set to an id unique to each
// Exec, by which the sandbox finds descendants that left the command's
// session; it is the only variable added to [sandbox.BaseEnv], Spec.Env
// and Cmd.Env, and it cannot be overridden.
const MarkerVar = "KEEL_EXEC"

// newExecID returns 16 random hex digits.
func newExecID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// lockedWriter serialises writes to one writer from two pipes.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

// Write writes p to the underlying writer under the lock.
func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// run is the state of one Exec.
type run struct {
	start     time.Time
	lastOut   atomic.Int64 // nanoseconds after start of the latest output
	outBytes  atomic.Int64
	maxOut    int64
	overLimit chan struct{} // closed when output passes maxOut
	overOnce  sync.Once
}

// pump copies one pipe to w until EOF or a read deadline, counting bytes
// and recording activity for the idle watchdog.
func (r *run) pump(src *os.File, w io.Writer, done *sync.WaitGroup) {
	defer done.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			r.lastOut.Store(int64(time.Since(r.start)))
			total := r.outBytes.Add(int64(n))
			chunk := buf[:n]
			if r.maxOut > 0 && total > r.maxOut {
				keep := max(0, int64(n)-(total-r.maxOut))
				chunk = chunk[:keep]
				r.overOnce.Do(func() { close(r.overLimit) })
			}
			if len(chunk) > 0 {
				w.Write(chunk)
			}
		}
		if err != nil {
			return
		}
	}
}

// Exec runs cmd on the host (see the package documentation for what is
// and is not enforced). A command that fails, times out, stays silent for
// IdleTimeout or writes more than OutputBytes is a Result; when ctx ends
// first, the process tree is killed and the Result says how it ended
// (callers check ctx.Err()). A program that cannot be found or executed is
// a Result with exit code 127 or 126 and a message on the command's
// standard error, as a shell reports it. The error return is for a closed
// sandbox, a context that has already ended (nothing is started), a
// missing working directory, or a failure to create pipes or start a
// process.
func (s *Sandbox) Exec(ctx context.Context, cmd *sandbox.Cmd) (*sandbox.Result, error) {
	if cmd == nil || len(cmd.Args) == 0 {
		return nil, errors.New("sandbox/none: exec: empty command")
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("sandbox/none: exec: %w", context.Cause(ctx))
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	s.calls.Add(1)
	s.mu.Unlock()
	defer s.calls.Done()

	lim := s.spec.Limits
	if cmd.Limits != nil {
		lim = cmd.Limits.Merge(s.spec.Limits)
	}
	timeout := cmd.Timeout
	if timeout == 0 {
		timeout = lim.WallTime
	}
	grace := lim.KillGrace
	if grace <= 0 {
		grace = DefaultKillGrace
	}
	var wmu sync.Mutex
	stdout, stderr := cmd.Stdout, cmd.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	split := stderr != nil
	if split && stderr == stdout {
		split = false
	}
	dir := s.hostDir(cmd.Dir)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("sandbox/none: exec: working directory %s is not a directory", cmd.Dir)
	}
	id := newExecID()
	env := append(s.env(cmd), MarkerVar+"="+id)
	argv0, err := lookPath(cmd.Args[0], lookupEnv(env, "PATH"), dir)
	if err != nil {
		w := stdout
		if split {
			w = stderr
		}
		fmt.Fprintf(w, "keel: %s: command not found\n", cmd.Args[0])
		return &sandbox.Result{ExitCode: 127}, nil
	}

	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox/none: exec: pipe: %w", err)
	}
	pipes := []*os.File{pr}
	c := &exec.Cmd{
		Path:        argv0,
		Args:        cmd.Args,
		Dir:         dir,
		Env:         env,
		Stdout:      pw,
		Stderr:      pw,
		SysProcAttr: sysProcAttr(),
	}
	var pw2 *os.File
	if split {
		var pr2 *os.File
		if pr2, pw2, err = os.Pipe(); err != nil {
			pr.Close()
			pw.Close()
			return nil, fmt.Errorf("sandbox/none: exec: pipe: %w", err)
		}
		pipes = append(pipes, pr2)
		c.Stderr = pw2
	}
	closeWrite := func() {
		pw.Close()
		if pw2 != nil {
			pw2.Close()
		}
	}
	if cmd.Stdin != nil {
		in, sent, err := sandbox.StdinFile(cmd.Stdin)
		if err != nil {
			closeWrite()
			closeAll(pipes)
			return nil, fmt.Errorf("sandbox/none: exec: %w", err)
		}
		defer sent()
		c.Stdin = in // an *os.File: exec.Cmd hands it over without a copier
	}
	r := &run{start: time.Now(), maxOut: lim.OutputBytes, overLimit: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		closeWrite()
		closeAll(pipes)
		return nil, ErrClosed
	}
	err = c.Start()
	var t *tree
	if err == nil {
		t = &tree{pid: c.Process.Pid, marker: []byte("\x00" + MarkerVar + "=" + id + "\x00"), inodes: pipeInodes(pipes)}
		s.running[t.pid] = t
	}
	s.mu.Unlock()
	closeWrite()
	if err != nil {
		closeAll(pipes)
		w := stdout
		if split {
			w = stderr
		}
		if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENOEXEC) || errors.Is(err, syscall.EISDIR) {
			fmt.Fprintf(w, "keel: %s: %v\n", cmd.Args[0], err)
			return &sandbox.Result{ExitCode: 126}, nil
		}
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) {
			fmt.Fprintf(w, "keel: %s: %v\n", cmd.Args[0], err)
			return &sandbox.Result{ExitCode: 127}, nil
		}
		return nil, fmt.Errorf("sandbox/none: exec %s: %w", cmd.Args[0], err)
	}
	pid := c.Process.Pid
	defer func() {
		s.mu.Lock()
		delete(s.running, pid)
		s.mu.Unlock()
	}()
	applyLimits(pid, lim)

	var readers sync.WaitGroup
	readers.Add(len(pipes))
	go r.pump(pr, lockedWriter{&wmu, stdout}, &readers)
	if split {
		go r.pump(pipes[1], lockedWriter{&wmu, stderr}, &readers)
	}
	readersDone := make(chan struct{})
	go func() { readers.Wait(); close(readersDone) }()

	waitDone := make(chan error, 1)
	go func() { waitDone <- c.Wait() }()

	res := &sandbox.Result{}
	var wallC, idleC, graceC <-chan time.Time
	if timeout > 0 {
		wall := time.NewTimer(timeout)
		defer wall.Stop()
		wallC = wall.C
	}
	var idleT *time.Timer
	if cmd.IdleTimeout > 0 {
		idleT = time.NewTimer(cmd.IdleTimeout)
		defer idleT.Stop()
		idleC = idleT.C
	}
	ctxDone := ctx.Done()
	overC := (<-chan struct{})(r.overLimit)
	var killAt time.Time // when SIGKILL is due, once the tree is ending
	var graceT *time.Timer
	defer func() {
		if graceT != nil {
			graceT.Stop()
		}
	}()
	end := func(set func()) {
		if !killAt.IsZero() {
			return
		}
		set()
		t.kill(unix.SIGTERM)
		killAt = time.Now().Add(grace)
		graceT = time.NewTimer(grace)
		graceC = graceT.C
	}
wait:
	for {
		select {
		case <-waitDone:
			break wait
		case <-wallC:
			end(func() { res.TimedOut = true })
		case <-idleC:
			quiet := time.Since(r.start) - time.Duration(r.lastOut.Load())
			if quiet >= cmd.IdleTimeout {
				end(func() { res.Idle = true })
			} else {
				idleT.Reset(cmd.IdleTimeout - quiet)
			}
		case <-overC:
			overC = nil
			end(func() { res.Limit = "output" })
		case <-ctxDone:
			ctxDone = nil
			end(func() {})
		case <-graceC:
			graceC = nil
			t.kill(unix.SIGKILL)
		}
	}
	// A tree already told to end keeps what is left of its grace.
	rest := grace
	if !killAt.IsZero() {
		rest = max(0, time.Until(killAt))
	}
	res.Duration = time.Since(r.start)
	st := c.ProcessState
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		sig := ws.Signal()
		res.ExitCode = 128 + int(sig)
		res.Signal = unix.SignalName(sig)
		switch {
		case sig == syscall.SIGXFSZ && res.Limit == "":
			res.Limit = "file_size"
		case sig == syscall.SIGXCPU && res.Limit == "":
			res.Limit = "cpu_time"
		}
	} else {
		res.ExitCode = st.ExitCode()
	}
	// A shell reports a child killed by a signal as 128+signal.
	switch {
	case res.Limit != "":
	case lim.FileSize > 0 && res.ExitCode == 128+int(syscall.SIGXFSZ):
		res.Limit = "file_size"
	case lim.CPUTime > 0 && res.ExitCode == 128+int(syscall.SIGXCPU):
		res.Limit = "cpu_time"
	}

	// The direct child is gone. End what it left behind, then collect the
	// rest of the output without waiting on holders that cannot be seen.
	t.reap(rest)
	select {
	case <-readersDone:
	case <-time.After(100 * time.Millisecond):
		t.killHolders()
		select {
		case <-readersDone:
		case <-time.After(time.Second):
			for _, p := range pipes {
				p.SetReadDeadline(time.Now())
			}
			<-readersDone
		}
	}
	closeAll(pipes)
	return res, nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// tree identifies the processes of one command: its session and process
// group (led by pid), processes whose environment carries marker
// ("\x00KEEL_EXEC=id\x00"), and processes holding the output pipes.
type tree struct {
	pid    int
	marker []byte
	inodes []uint64
}

// reap ends every process left in the tree: SIGTERM, up to grace to exit,
// then SIGKILL, and waits (bounded) until they are gone.
func (t *tree) reap(grace time.Duration) {
	if len(t.members()) == 0 {
		return
	}
	if grace > 0 {
		t.kill(unix.SIGTERM)
		if t.waitGone(grace) {
			return
		}
	}
	t.kill(unix.SIGKILL)
	t.waitGone(2 * time.Second)
}

// waitGone polls until no live process is left in the tree or d passes;
// it reports whether the tree is empty.
func (t *tree) waitGone(d time.Duration) bool {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if len(t.members()) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
}

// kill sends sig to the process group and to every member of the tree.
func (t *tree) kill(sig unix.Signal) {
	unix.Kill(-t.pid, sig)
	for _, p := range t.members() {
		unix.Kill(p, sig)
	}
}
