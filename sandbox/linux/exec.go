//go:build linux

package linux

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/egress"
	"golang.org/x/sys/unix"
)

// defaultKillGrace is the time between SIGTERM and SIGKILL when
// Limits.KillGrace is 0 (sandbox.Limits documents it).
const defaultKillGrace = 2 * time.Second

// drainTimeout bounds the wait for output after a command's processes are
// gone (only an escaped process could still hold the pipe).
const drainTimeout = 2 * time.Second

// phase is the network policy a command runs under.
type phase struct {
	name    string
	network sandbox.Network
}

// Exec runs cmd in the sandbox and returns how it ended; see
// [sandbox.Sandbox]. The call ends when the command's own process exits
// (not when its output pipe closes), then every process it left behind is
// killed. At the wall-time limit, the idle limit or the end of ctx, the
// whole process tree gets SIGTERM, then SIGKILL after Limits.KillGrace.
// When ctx ends first the Result reports how the command ended and the
// error is nil (the caller sees ctx.Err()); an error means the sandbox
// could not run the command at all.
func (s *Sandbox) Exec(ctx context.Context, cmd *sandbox.Cmd) (*sandbox.Result, error) {
	if cmd == nil || len(cmd.Args) == 0 {
		return nil, errors.New("sandbox/linux: exec: empty command")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sandbox/linux: exec: %w", context.Cause(ctx))
	}
	s.phase.RLock()
	defer s.phase.RUnlock()
	return s.run(ctx, cmd, phase{name: "agent", network: s.spec.Network})
}

// Setup runs the run's environment setup command (installing packages,
// creating a virtualenv) before the agent starts, as Codex separates a
// setup phase from the agent phase. It is Exec with three differences:
// it waits for running commands and holds off new ones until it is done;
// its network policy is network instead of the spec's (the proxy serves
// network's allowlist for its duration and closes its connections at the
// end); and it shares everything else with later commands (workspace,
// /tmp, HOME), so what it prepares stays. The caller journals its output
// through cmd.Stdout.
func (s *Sandbox) Setup(ctx context.Context, cmd *sandbox.Cmd, network sandbox.Network) (*sandbox.Result, error) {
	if cmd == nil || len(cmd.Args) == 0 {
		return nil, errors.New("sandbox/linux: setup: empty command")
	}
	if _, err := egress.Parse(network.Allow); err != nil {
		return nil, fmt.Errorf("sandbox/linux: %w", err)
	}
	s.phase.Lock()
	defer s.phase.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sandbox/linux: setup: %w", context.Cause(ctx))
	}
	if len(network.Allow) > 0 {
		if err := s.ensureProxy(); err != nil {
			return nil, err
		}
	}
	s.proxyMu.Lock()
	p := s.proxy
	s.proxyMu.Unlock()
	if p != nil {
		p.setPolicy("setup", network)
		defer p.setPolicy("agent", s.spec.Network)
	}
	return s.run(ctx, cmd, phase{name: "setup", network: network})
}

// run is Exec's body.
func (s *Sandbox) run(ctx context.Context, c *sandbox.Cmd, ph phase) (*sandbox.Result, error) {
	lim := s.spec.Limits
	if c.Limits != nil {
		lim = c.Limits.Merge(s.spec.Limits)
	}
	timeout := c.Timeout
	if timeout == 0 {
		timeout = lim.WallTime
	}
	grace := lim.KillGrace
	if grace <= 0 {
		grace = defaultKillGrace
	}
	req := &execRequest{
		Args:    c.Args,
		Dir:     s.dir(c.Dir),
		Env:     s.env(c.Env, c.Unset, ph),
		Rlimits: s.rlimits(lim),
	}

	if s.guard != nil {
		// Fail closed: after a finding the guard could not make safe,
		// nothing more runs until a person has looked.
		if err := s.guard.unsafe(); err != nil {
			return nil, err
		}
	}
	// Registering first makes Close wait for this call (and its
	// background cleanup) before it tears the sandbox down.
	id, cl, err := s.register()
	if err != nil {
		return nil, err
	}
	defer s.unregister(id)
	s.running.Add(1)
	defer s.running.Add(-1)
	var cg *cmdGroup
	if s.rg != nil {
		if cg, err = s.rg.newCommand(lim); err != nil {
			return nil, err
		}
		s.rg.prepareNext(&s.bg)
	}
	var toClose, readers []*os.File
	cleanup := func() {
		closeAll(toClose)
		toClose = nil
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		cg.removeAsync(&s.bg)
		return nil, fmt.Errorf("sandbox/linux: pipe: %w", err)
	}
	readers = append(readers, outR)
	toClose = append(toClose, outW)
	send := []*os.File{outW}
	stdout, stderr := c.Stdout, c.Stderr
	if stderr != nil && !sameWriter(stdout, stderr) {
		errR, errW, err := os.Pipe()
		if err != nil {
			cleanup()
			closeAll(readers)
			cg.removeAsync(&s.bg)
			return nil, fmt.Errorf("sandbox/linux: pipe: %w", err)
		}
		readers = append(readers, errR)
		toClose = append(toClose, errW)
		send = append(send, errW)
		req.SplitStderr = true
	} else {
		stderr = stdout
	}
	stdinSent := func() {}
	if c.Stdin != nil {
		in, sent, err := sandbox.StdinFile(c.Stdin)
		if err != nil {
			cleanup()
			closeAll(readers)
			cg.removeAsync(&s.bg)
			return nil, err
		}
		// The init holds its own copy once the request is sent.
		stdinSent = sent
		defer sent()
		send = append(send, in)
		req.Stdin = true
	}
	if cg != nil {
		v1, v2, err := cg.files()
		if err != nil {
			cleanup()
			closeAll(readers)
			cg.removeAsync(&s.bg)
			return nil, err
		}
		toClose = append(toClose, v1...)
		send = append(send, v1...)
		req.V1Tasks = len(v1)
		if v2 != nil {
			toClose = append(toClose, v2)
			send = append(send, v2)
			req.V2Dir = true
		}
	}

	if cg == nil {
		req.Env = append(req.Env, markerVar+"="+strconv.FormatUint(id, 10))
	}
	out := newOutput(lim.OutputBytes, c.IdleTimeout)
	protected := s.protectedPaths()
	watchOut := &refusals{w: stdout, protected: protected, mount: s.spec.MountPath}
	out.copy(readers[0], watchOut)
	var watchErr *refusals
	if len(readers) > 1 {
		watchErr = &refusals{w: stderr, protected: protected, mount: s.spec.MountPath}
		out.copy(readers[1], watchErr)
	}
	start := time.Now()
	err = s.ctl.Send(&msg{Op: opExec, ID: id, Exec: req}, send...)
	cleanup()
	stdinSent()
	if err != nil {
		out.abandon()
		cg.removeAsync(&s.bg)
		return nil, err
	}

	var pid int
	select {
	case m := <-cl.started:
		if m.Op == opStartErr {
			out.wait(drainTimeout)
			if stderr != nil {
				fmt.Fprintf(stderr, "keel: %s\n", m.Message)
			}
			cg.removeAsync(&s.bg)
			code := 1
			switch syscall.Errno(m.Errno) {
			case unix.ENOENT:
				if !strings.Contains(m.Message, "working directory") {
					code = 127
				}
			case unix.EACCES, unix.EPERM:
				code = 126
			}
			return &sandbox.Result{ExitCode: code, Duration: time.Since(start)}, nil
		}
		pid = m.Pid
	case <-s.dead:
		out.abandon()
		cg.removeAsync(&s.bg)
		return nil, s.deadError()
	}

	res := &sandbox.Result{}
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	var graceC <-chan time.Time
	termSent, killSent := false, false
	term := func() {
		if termSent {
			return
		}
		termSent = true
		s.signalTree(cg, id, cl, pid, unix.SIGTERM)
		gt := time.NewTimer(grace)
		graceC = gt.C
	}
	kill := func() {
		if killSent {
			return
		}
		killSent = true
		s.signalTree(cg, id, cl, pid, unix.SIGKILL)
	}
	done := ctx.Done()
	idleC, overC := out.idleC, out.overC
	var exit *exitStatus
	for exit == nil {
		select {
		case exit = <-cl.exited:
		case <-timer:
			timer = nil
			res.TimedOut = true
			term()
		case <-idleC:
			idleC = nil
			res.Idle = true
			term()
		case <-overC:
			overC = nil
			res.Limit = "output"
			kill()
		case <-done:
			done = nil
			term()
		case <-graceC:
			graceC = nil
			kill()
		case <-s.dead:
			out.abandon()
			return nil, s.deadError()
		}
	}
	res.Duration = time.Since(start)
	out.stopIdle()

	// The direct child is gone: everything it left behind goes too.
	s.signalTree(cg, id, cl, pid, unix.SIGKILL)
	out.wait(drainTimeout)

	ws := syscall.WaitStatus(exit.Status)
	switch {
	case ws.Exited():
		res.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		res.ExitCode = 128 + int(ws.Signal())
		res.Signal = unix.SignalName(ws.Signal())
	}
	if res.Limit == "" && cg != nil {
		res.Limit = cg.limitHit()
	}
	if res.Limit == "" {
		res.Limit = rlimitHit(res, exit, lim)
	}
	cg.removeAsync(&s.bg)
	// A write the sandbox refused says why.
	explainRefusals(stderr, watchOut, watchErr)
	// The host's git must not find code the command planted.
	s.afterCommand(stderr)
	return res, nil
}

// rlimitHit names the rlimit a command ran into, from how it ended.
func rlimitHit(res *sandbox.Result, exit *exitStatus, lim sandbox.Limits) string {
	cpu := time.Duration(exit.UserUs+exit.SystemUs) * time.Microsecond
	switch {
	case res.Signal == "SIGXFSZ", lim.FileSize > 0 && res.ExitCode == 128+int(unix.SIGXFSZ):
		return "file_size"
	case res.Signal == "SIGXCPU", lim.CPUTime > 0 && res.ExitCode == 128+int(unix.SIGXCPU):
		return "cpu_time"
	case lim.CPUTime > 0 && res.Signal == "SIGKILL" && !res.TimedOut && !res.Idle && cpu >= lim.CPUTime:
		return "cpu_time"
	}
	return ""
}

// signalTree signals every process of one command: through its cgroup
// when there is one, else through the init (the command's session).
// SIGKILL waits until the processes are gone.
func (s *Sandbox) signalTree(cg *cmdGroup, id uint64, cl *call, pid int, sig syscall.Signal) {
	if cg != nil {
		if sig == unix.SIGKILL {
			if err := cg.kill(); err != nil {
				s.log.Warn("sandbox kill", "err", err)
			}
			return
		}
		cg.signal(sig)
		return
	}
	if err := s.ctl.Send(&msg{Op: opSignal, ID: id, Pid: pid, Signal: int(sig)}); err != nil {
		return
	}
	select {
	case <-cl.signaled:
	case <-s.dead:
	case <-time.After(10 * time.Second):
	}
}

// removeAsync deletes the command's cgroups in the background (rmdir may
// have to wait for the kernel to finish tearing processes down).
func (c *cmdGroup) removeAsync(wg *sync.WaitGroup) {
	if c == nil {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.remove()
	}()
}

// dir resolves Cmd.Dir: "" is the mount path, a relative path is below it.
func (s *Sandbox) dir(d string) string {
	if d == "" {
		return s.spec.MountPath
	}
	if !path.IsAbs(d) {
		return path.Join(s.spec.MountPath, d)
	}
	return path.Clean(d)
}

// env builds a command's environment: the non-interactive base, the
// spec's (without the variables unset names), the command's, and the
// proxy settings when the phase has an allowlist. A later KEY replaces
// an earlier one.
func (s *Sandbox) env(extra, unset []string, ph phase) []string {
	all := sandbox.BaseEnv(Home)
	// Placeholders, never the values, of the secrets for hosts.
	for _, kv := range slices.Concat(s.spec.Env, s.hostSecrets.env()) {
		if k, _, _ := strings.Cut(kv, "="); !slices.Contains(unset, k) {
			all = append(all, kv)
		}
	}
	all = append(all, extra...)
	if len(ph.network.Allow) > 0 {
		s.proxyMu.Lock()
		p := s.proxy
		s.proxyMu.Unlock()
		if p != nil {
			all = append(all, proxyEnv(p.port, egress.MustParse(ph.network.Allow).Loopback())...)
		}
	}
	idx := map[string]int{}
	var out []string
	for _, kv := range all {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if i, seen := idx[k]; seen {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// rlimits turns limits into the rlimits applied to the command's process
// (and inherited by its children).
func (s *Sandbox) rlimits(l sandbox.Limits) []rlimit {
	var out []rlimit
	if l.CPUTime > 0 {
		sec := uint64((l.CPUTime + time.Second - 1) / time.Second)
		out = append(out, rlimit{Resource: unix.RLIMIT_CPU, Cur: sec, Max: sec + 1})
	}
	if l.FileSize > 0 {
		out = append(out, rlimit{Resource: unix.RLIMIT_FSIZE, Cur: uint64(l.FileSize), Max: uint64(l.FileSize)})
	}
	if l.OpenFiles > 0 {
		out = append(out, rlimit{Resource: unix.RLIMIT_NOFILE, Cur: uint64(l.OpenFiles), Max: uint64(l.OpenFiles)})
	}
	if l.Memory > 0 && (s.rg == nil || s.cg.limitVia("memory") == "") {
		out = append(out, rlimit{Resource: unix.RLIMIT_DATA, Cur: uint64(l.Memory), Max: uint64(l.Memory)})
	}
	if l.Processes > 0 && (s.rg == nil || s.cg.limitVia("pids") == "") {
		n := uint64(l.Processes) + 32 // the init's own threads count too
		out = append(out, rlimit{Resource: unix.RLIMIT_NPROC, Cur: n, Max: n})
	}
	return out
}

// sameWriter reports whether a and b are the same writer, without
// panicking on writers of incomparable types.
func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// output copies a command's pipes to the caller's writers, counting
// bytes against the output limit and watching for silence.
type output struct {
	limit int64
	total atomic.Int64

	overC    chan struct{}
	overOnce sync.Once
	idleC    chan struct{}
	idleOnce sync.Once
	idle     time.Duration
	timer    *time.Timer

	wg    sync.WaitGroup
	mu    sync.Mutex
	files []*os.File
}

func newOutput(limit int64, idle time.Duration) *output {
	o := &output{limit: limit, overC: make(chan struct{}), idle: idle}
	if idle > 0 {
		o.idleC = make(chan struct{})
		o.timer = time.AfterFunc(idle, func() { o.idleOnce.Do(func() { close(o.idleC) }) })
	}
	return o
}

// copy starts copying r to w (nil discards) until EOF.
func (o *output) copy(r *os.File, w io.Writer) {
	o.mu.Lock()
	o.files = append(o.files, r)
	o.mu.Unlock()
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		defer r.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				if o.timer != nil {
					o.timer.Reset(o.idle)
				}
				keep := o.take(n)
				if keep > 0 && w != nil {
					_, _ = w.Write(buf[:keep])
				}
				if keep < n {
					o.overOnce.Do(func() { close(o.overC) })
				}
			}
			if err != nil {
				return
			}
		}
	}()
}

// take reserves up to n bytes of the output budget and returns how many
// may be written.
func (o *output) take(n int) int {
	if o.limit <= 0 {
		o.total.Add(int64(n))
		return n
	}
	for {
		cur := o.total.Load()
		room := o.limit - cur
		if room <= 0 {
			return 0
		}
		k := int64(n)
		if k > room {
			k = room
		}
		if o.total.CompareAndSwap(cur, cur+k) {
			return int(k)
		}
	}
}

func (o *output) stopIdle() {
	if o.timer != nil {
		o.timer.Stop()
	}
}

// wait waits for the copiers to reach EOF, at most d; after that the pipes
// are closed under them (a process that escaped cleanup holds them).
func (o *output) wait(d time.Duration) {
	o.stopIdle()
	done := make(chan struct{})
	go func() {
		o.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-time.After(d):
	}
	o.mu.Lock()
	for _, f := range o.files {
		_ = f.SetReadDeadline(time.Now())
	}
	o.mu.Unlock()
	<-done
}

// abandon stops copying at once.
func (o *output) abandon() { o.wait(0) }
