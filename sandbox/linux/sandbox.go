//go:build linux

package linux

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
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

	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/egress"
	"golang.org/x/sys/unix"
)

// systemDirs are the host directories bound read-only at the same path.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/var"}

// reservedMountPaths may not hold the workspace (or contain it).
var reservedMountPaths = []string{"/proc", "/dev", "/sys", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/var"}

// secretMasks are host files hidden even where the sandbox's identity
// could read them (globs allowed).
var secretMasks = []string{
	"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
	"/etc/ssh/ssh_host_*_key", "/etc/ssl/private", "/etc/security/opasswd",
}

// Sandbox is a Linux sandbox for one run: one init process in fresh user,
// mount, PID, network, IPC and UTS namespaces that forks each command.
// Exec is safe for concurrent use; Close is idempotent.
type Sandbox struct {
	spec sandbox.Spec
	opts Options
	log  *slog.Logger
	mech Mechanisms

	init      *exec.Cmd
	initDone  chan struct{} // closed when the init process has exited
	initErr   *tailBuffer
	ctl       *conn
	cg        *cgroupHost
	rg        *runGroup
	wsRoot    string        // host real path of the workspace
	root      *os.Root      // the workspace, for host-side checks
	stateRoot *os.Root      // Options.StateDir, if set
	guard     *guard        // the git guard (guard.go)
	running   atomic.Int32  // commands in flight, for the periodic check
	watchEnd  chan struct{} // closed by Close to stop the periodic check
	watching  sync.WaitGroup

	phase sync.RWMutex // Exec holds it shared, Setup exclusively

	mu       sync.Mutex
	inflight sync.WaitGroup // registered calls; Add under mu while open
	calls    map[uint64]*call
	nextID   uint64
	closed   bool
	dead     chan struct{} // closed when the control socket fails
	deadErr  error

	proxy   *egressProxy
	proxyMu sync.Mutex
	// hostSecrets are Options.HostSecrets with their placeholders and CA.
	hostSecrets *hostSecrets
	bg          sync.WaitGroup
	closeOne    sync.Once
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// call is one command in flight.
type call struct {
	started  chan *msg
	exited   chan *exitStatus
	signaled chan struct{}
	listener chan listenerMsg
}

type listenerMsg struct {
	m *msg
	f *os.File
}

// New starts a sandbox for spec. It returns an error wrapping
// [sandbox.ErrUnavailable] when this machine cannot isolate (the message
// says why and which setting to change), and other errors for a bad spec
// (a missing workspace, a reserved mount path, a protected path that is a
// symbolic link). New never falls back to less isolation than it
// reports: what it could not apply is in [Sandbox.Mechanisms].
func New(spec *sandbox.Spec, opts *Options) (*Sandbox, error) {
	if spec == nil {
		return nil, errors.New("sandbox/linux: nil spec")
	}
	if !initCalled.Load() {
		return nil, errors.New("sandbox/linux: linux.Init was not called first in main (or TestMain); the sandbox re-executes this binary as its init and needs that hook (see the package documentation)")
	}
	s := &Sandbox{spec: *spec, calls: map[uint64]*call{}, dead: make(chan struct{})}
	s.spec.Env = slices.Clone(spec.Env)
	s.spec.Protected = slices.Clone(spec.Protected)
	s.spec.Network.Allow = slices.Clone(spec.Network.Allow)
	if opts != nil {
		s.opts = *opts
		s.opts.ReadOnlyPaths = slices.Clone(opts.ReadOnlyPaths)
	}
	s.log = s.opts.Logger
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.opts.TmpSize <= 0 {
		s.opts.TmpSize = 1 << 30
	}
	if s.opts.Hostname == "" {
		s.opts.Hostname = "keel"
	}
	if s.opts.UID <= 0 {
		s.opts.UID = DefaultUID
	}
	if err := s.validate(); err != nil {
		return nil, specError{err}
	}
	if _, err := egress.Parse(s.spec.Network.Allow); err != nil {
		return nil, specError{fmt.Errorf("sandbox/linux: %w", err)}
	}
	if err := probe(); err != nil {
		return nil, err
	}
	s.opts.HostSecrets = slices.Clone(s.opts.HostSecrets)
	if len(s.opts.HostSecrets) > 0 {
		hs, err := newHostSecrets(s.opts.HostSecrets)
		if err != nil {
			return nil, specError{err}
		}
		s.hostSecrets = hs
		s.opts.ReadOnlyPaths = append(s.opts.ReadOnlyPaths, hs.dir)
	}
	protected, err := s.prepareWorkspace()
	if err != nil {
		s.closeGuard()
		s.hostSecrets.close()
		return nil, err
	}
	if err := s.start(protected); err != nil {
		s.Close()
		return nil, err
	}
	if len(s.spec.Network.Allow) > 0 {
		if err := s.ensureProxy(); err != nil {
			s.Close()
			return nil, err
		}
		s.proxy.setPolicy("agent", s.spec.Network)
		s.mech.Network = "egress proxy: " + strings.Join(s.spec.Network.Allow, ", ")
	}
	s.startWatch()
	return s, nil
}

// validate checks the spec and fills in defaults.
func (s *Sandbox) validate() error {
	if s.spec.Workspace == "" {
		return errors.New("sandbox/linux: spec has no workspace")
	}
	abs, err := filepath.Abs(s.spec.Workspace)
	if err != nil {
		return fmt.Errorf("sandbox/linux: workspace %s: %w", s.spec.Workspace, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return fmt.Errorf("sandbox/linux: workspace %s: %w", s.spec.Workspace, err)
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return fmt.Errorf("sandbox/linux: workspace %s is not a directory", s.spec.Workspace)
	}
	s.wsRoot = real
	if s.spec.MountPath == "" {
		s.spec.MountPath = sandbox.DefaultMountPath
	}
	mp := s.spec.MountPath
	if !path.IsAbs(mp) || path.Clean(mp) != mp || mp == "/" {
		return fmt.Errorf("sandbox/linux: mount path %q must be an absolute, clean path other than /", mp)
	}
	for _, r := range reservedMountPaths {
		if mp == r || strings.HasPrefix(mp, r+"/") {
			return fmt.Errorf("sandbox/linux: mount path %s is inside %s, which the sandbox provides itself", mp, r)
		}
	}
	for _, r := range []string{"/tmp", "/run", Home, "/home", "/mnt"} {
		if mp == r {
			return fmt.Errorf("sandbox/linux: mount path %s is a directory the sandbox provides itself; use a path below it", mp)
		}
	}
	for _, p := range s.opts.ReadOnlyPaths {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("sandbox/linux: read-only path %q is not absolute", p)
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("sandbox/linux: read-only path: %w", err)
		}
	}
	return nil
}

// protectedPaths returns DefaultProtected plus the spec's, cleaned and
// deduplicated, in order.
func (s *Sandbox) protectedPaths() []string {
	var out []string
	for _, p := range append(slices.Clone(sandbox.DefaultProtected), s.spec.Protected...) {
		c := path.Clean("/" + filepath.ToSlash(p))[1:]
		if c == "" || slices.Contains(out, c) {
			continue
		}
		out = append(out, c)
	}
	return out
}

// startedInit is an init process in its fresh namespaces, waiting for
// its configuration on ctl.
type startedInit struct {
	cmd      *exec.Cmd
	ctl      *conn
	initErr  *tailBuffer
	initDone chan struct{} // closed when the process has exited
	key      initKey
	// cg and rg are the host's cgroups and the init's run group, made
	// and the init placed in it while the init starts (prestart); rg
	// is nil when they were not (New then makes them as for an init
	// it starts itself).
	cg *cgroupHost
	rg *runGroup
}

// discard ends an init nobody will configure, and removes its run
// group once it has exited; the channel is closed when that is done.
func (si *startedInit) discard() <-chan struct{} {
	si.ctl.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-si.initDone
		if si.rg != nil {
			si.rg.remove()
		}
	}()
	return done
}

// placeInit makes the run group of a prestarted init and moves the init
// into it, as start does for an init it starts itself, so that New does
// not wait for the cgroup file system (moving a process between cgroup
// v1 groups waits for an RCU grace period, milliseconds on a busy
// machine). Anything that fails is left to start, which tries again and
// reports it; an init that cannot be placed is discarded.
func (si *startedInit) placeInit() bool {
	if !si.key.cgroups {
		return true
	}
	cg := detectCgroups()
	if cg.tracking() == "" {
		return true
	}
	cg.sweepStale()
	pid := si.cmd.Process.Pid
	rg, err := newRunGroup(cg, fmt.Sprintf("keel-%d-%d", os.Getpid(), pid), si.key.delegate())
	if err != nil {
		return true
	}
	si.rg = rg
	if err := rg.addInit(pid); err != nil {
		si.discard()
		return false
	}
	si.cg = cg
	return true
}

// initKey is what an init is started with: the host identity its root
// maps to, and whether it may drop its groups (Keel runs as root).
type initKey struct {
	uid, gid int
	root     bool
	// cgroups: the sandbox uses cgroups where the machine has them
	// (Options.NoCgroups unset).
	cgroups bool
}

// delegate is the host uid the run group's cgroup v2 processes file is
// given to (the sandbox's root, when Keel runs as root), or -1.
func (k initKey) delegate() int {
	if k.root {
		return k.uid
	}
	return -1
}

// initKeyFor is the key of the init of a sandbox with opts.
func initKeyFor(opts *Options) initKey {
	root := os.Geteuid() == 0
	k := initKey{uid: os.Geteuid(), gid: os.Getegid(), root: root, cgroups: opts == nil || !opts.NoCgroups}
	if root {
		uid := DefaultUID
		if opts != nil && opts.UID > 0 {
			uid = opts.UID
		}
		k.uid, k.gid = uid, uid
	}
	return k
}

// startInit starts an init: /proc/self/exe in fresh user, mount, PID,
// network, IPC and UTS namespaces, with its root mapped to key's host
// identity.
func startInit(key initKey) (*startedInit, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox/linux: socketpair: %w", err)
	}
	host := os.NewFile(uintptr(pair[0]), "keel-control")
	child := os.NewFile(uintptr(pair[1]), "keel-control-init")
	defer child.Close()
	ctl, err := newConn(host)
	if err != nil {
		return nil, err
	}
	si := &startedInit{ctl: ctl, initErr: &tailBuffer{max: 8 << 10}, initDone: make(chan struct{}), key: key}
	si.cmd = &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{"keel-sandbox-init"},
		Env:        []string{initEnv + "=" + initVersion},
		ExtraFiles: []*os.File{child},
		Stderr:     si.initErr,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: key.uid, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: key.gid, Size: 1}},
			// Root may drop its supplementary groups in the child; an
			// unprivileged user may not call setgroups in a user
			// namespace it creates.
			GidMappingsEnableSetgroups: key.root,
			Credential:                 &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}, NoSetGroups: !key.root},
			// No Pdeathsig: it fires when the creating OS thread exits,
			// not the process. If Keel dies, the kernel closes the control
			// socket and the init exits on its end.
		},
	}
	if err := si.cmd.Start(); err != nil {
		ctl.Close()
		return nil, startError(err)
	}
	go func() {
		_ = si.cmd.Wait()
		close(si.initDone)
	}()
	return si, nil
}

// spare is the init Prestart started for the next New of this process.
var spare struct {
	mu sync.Mutex
	si *startedInit
}

// Prestart starts, in the background, the init process of the next
// sandbox New creates in this process with opts (the same UID), so that
// New does not wait for the process to start: an init is this program
// executed again, and a large program takes milliseconds to get going.
// The init waits in its fresh namespaces, unconfigured, until New
// configures it exactly as it configures an init it starts itself; New
// starts its own when there is none (or it was started with another
// UID). A process that never calls New leaves it to exit with the
// process. Call it where a sandbox will soon be needed (a command that
// runs an agent) and, in a process that creates sandboxes one after the
// other (a server), after each New.
func Prestart(opts *Options) {
	if !initCalled.Load() || probe() != nil {
		return
	}
	go prestart(initKeyFor(opts))
}

// prestart starts the spare init for key unless one is alive.
func prestart(key initKey) {
	spare.mu.Lock()
	defer spare.mu.Unlock()
	if spare.si != nil {
		select {
		case <-spare.si.initDone:
		default:
			if spare.si.key == key {
				return // one is ready
			}
		}
		spare.si.discard()
		spare.si = nil
	}
	si, err := startInit(key)
	if err == nil && si.placeInit() {
		spare.si = si
	}
}

// takeSpare returns the prestarted init for key, if one is alive.
func takeSpare(key initKey) *startedInit {
	spare.mu.Lock()
	defer spare.mu.Unlock()
	si := spare.si
	if si == nil || si.key != key {
		return nil
	}
	spare.si = nil
	select {
	case <-si.initDone:
		si.discard()
		return nil
	default:
		sparesTaken.Add(1)
		return si
	}
}

// sparesTaken counts the prestarted inits New took (tests).
var sparesTaken atomic.Int64

// start launches the init (or takes the one Prestart started), which
// binds the workspace paths protected read-only, and waits until it is
// ready.
func (s *Sandbox) start(protected []string) error {
	key := initKeyFor(&s.opts)
	root, hostUID := key.root, key.uid
	si := takeSpare(key)
	if si == nil {
		var err error
		if si, err = startInit(key); err != nil {
			return err
		}
	}
	cmd := si.cmd
	s.init, s.ctl, s.initErr, s.initDone = cmd, si.ctl, si.initErr, si.initDone
	ready := make(chan *msg, 1)
	go s.reader(ready)

	cfg := &initConfig{
		MountPath: s.spec.MountPath,
		HostAlias: s.wsRoot,
		Protected: protected,
		System:    systemDirs,
		Hostname:  s.opts.Hostname,
		Home:      Home,
		TmpSize:   s.opts.TmpSize,
		Landlock:  !s.opts.NoLandlock,
		Seccomp:   !s.opts.NoSeccomp,
	}
	for _, g := range secretMasks {
		m, _ := filepath.Glob(g)
		cfg.Masks = append(cfg.Masks, m...)
	}
	// Paths the run's policy forbids are masked like secrets: those in
	// the workspace at the mount path, others at their host path.
	for _, h := range s.spec.Hidden {
		switch c := path.Clean(filepath.ToSlash(h)); {
		case path.IsAbs(c):
			cfg.Masks = append(cfg.Masks, c)
		case c != "." && c != ".." && !strings.HasPrefix(c, "../"):
			cfg.Masks = append(cfg.Masks, path.Join(s.spec.MountPath, c))
		}
	}
	var files []*os.File
	defer func() { closeAll(files) }()

	s.mech.Namespaces = []string{"user", "mount", "pid", "net", "ipc", "uts"}
	if root {
		ws, idmapNote, err := s.workspaceTree(cmd.Process.Pid)
		if err != nil {
			return err
		}
		if ws != nil {
			files = append(files, ws)
			s.mech.Identity = fmt.Sprintf("sandbox root is host uid %d; workspace mounted with an ID mapping (%s)", s.opts.UID, idmapNote)
		} else {
			cfg.HostWorkspace = s.wsRoot
			s.mech.Identity = fmt.Sprintf("sandbox root is host uid %d; workspace bound without ID mapping (%s), so writes need it to be writable by that uid", s.opts.UID, idmapNote)
			s.mech.Warnings = append(s.mech.Warnings, "idmapped workspace unavailable: "+idmapNote)
		}
		for _, p := range s.opts.ReadOnlyPaths {
			t, err := roTree(p)
			if err != nil {
				return err
			}
			files = append(files, t)
			cfg.ReadOnlyTrees = append(cfg.ReadOnlyTrees, p)
		}
	} else {
		cfg.HostWorkspace = s.wsRoot
		cfg.ReadOnly = s.opts.ReadOnlyPaths
		s.mech.Identity = fmt.Sprintf("sandbox root is the invoking user (host uid %d), without capabilities", hostUID)
	}

	if si.rg != nil {
		// A prestarted init is in its run group already.
		s.cg, s.rg = si.cg, si.rg
	} else {
		s.cg = &cgroupHost{v1: map[string]string{}}
		if !s.opts.NoCgroups {
			s.cg = detectCgroups()
		}
		if s.cg.tracking() != "" {
			s.cg.sweepStale()
			name := fmt.Sprintf("keel-%d-%d", os.Getpid(), cmd.Process.Pid)
			rg, err := newRunGroup(s.cg, name, key.delegate())
			if err != nil {
				s.mech.Warnings = append(s.mech.Warnings, err.Error())
				s.cg = &cgroupHost{v1: map[string]string{}}
			} else {
				s.rg = rg
				if err := rg.addInit(cmd.Process.Pid); err != nil {
					return err
				}
			}
		}
	}
	if s.rg != nil {
		tasks, err := s.rg.initTasks()
		if err != nil {
			return err
		}
		files = append(files, tasks...)
		cfg.RunTasks = len(tasks)
		// The first command's groups are made while the init
		// starts (Close waits for them).
		s.rg.prepareNext(&s.bg)
	}
	if err := s.ctl.Send(&msg{Op: opConfig, Config: cfg}, files...); err != nil {
		return s.unavailableOr(err)
	}
	var m *msg
	select {
	case m = <-ready:
	case <-time.After(60 * time.Second):
		return fmt.Errorf("sandbox/linux: init did not become ready in 60s: %s", s.initErr.String())
	}
	if m == nil {
		return s.unavailableOr(fmt.Errorf("sandbox/linux: init exited during setup: %w", s.deadErr))
	}
	if m.Op == opFatal {
		return setupError(m.Message)
	}
	s.describe(m.Report)
	if s.guard != nil {
		s.guard.relocation(s.spec.MountPath, m.Report.HostAlias)
	}
	return nil
}

// workspaceTree returns the workspace as a detached mount with an ID
// mapping from its owner to the sandbox's uid, or nil and the reason when
// the kernel or file system cannot do that.
func (s *Sandbox) workspaceTree(initPid int) (*os.File, string, error) {
	var st unix.Stat_t
	if err := unix.Stat(s.wsRoot, &st); err != nil {
		return nil, "", fmt.Errorf("sandbox/linux: stat workspace: %w", err)
	}
	usernsPath := fmt.Sprintf("/proc/%d/ns/user", initPid)
	note := "owner uid 0"
	if st.Uid != 0 || st.Gid != 0 {
		holder, err := idmapHolder(int(st.Uid), int(st.Gid), s.opts.UID)
		if err != nil {
			return nil, err.Error(), nil
		}
		defer holder.release()
		usernsPath = holder.nsPath
		note = fmt.Sprintf("owner uid %d", st.Uid)
	}
	ns, err := os.Open(usernsPath)
	if err != nil {
		return nil, "", fmt.Errorf("sandbox/linux: open %s: %w", usernsPath, err)
	}
	defer ns.Close()
	for _, rec := range []uint{unix.AT_RECURSIVE, 0} {
		fd, err := unix.OpenTree(unix.AT_FDCWD, s.wsRoot, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|rec)
		if err != nil {
			return nil, "open_tree: " + err.Error(), nil
		}
		attr := &unix.MountAttr{
			Attr_set:  unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
			Userns_fd: uint64(ns.Fd()),
		}
		err = unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|rec, attr)
		if err == nil {
			return os.NewFile(uintptr(fd), "workspace"), note, nil
		}
		unix.Close(fd)
		note = "mount_setattr(MOUNT_ATTR_IDMAP): " + err.Error()
	}
	return nil, note, nil
}

// roTree returns host path p as a detached, read-only mount.
func roTree(p string) (*os.File, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, p, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return nil, fmt.Errorf("sandbox/linux: read-only path %s: %w", p, err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sandbox/linux: read-only path %s: %w", p, err)
	}
	return os.NewFile(uintptr(fd), p), nil
}

// reader dispatches the init's messages until the socket fails.
func (s *Sandbox) reader(ready chan<- *msg) {
	defer func() {
		s.mu.Lock()
		if s.deadErr == nil {
			s.deadErr = errors.New("init exited")
		}
		close(s.dead)
		s.mu.Unlock()
		select {
		case ready <- nil:
		default:
		}
	}()
	for {
		m, files, err := s.ctl.Recv()
		if err != nil {
			<-s.initDoneOrTimeout()
			s.mu.Lock()
			if tail := strings.TrimSpace(s.initErr.String()); tail != "" {
				s.deadErr = fmt.Errorf("%w: %s", err, tail)
			} else {
				s.deadErr = err
			}
			s.mu.Unlock()
			return
		}
		switch m.Op {
		case opReady, opFatal:
			closeAll(files)
			ready <- m
			continue
		}
		s.mu.Lock()
		c := s.calls[m.ID]
		s.mu.Unlock()
		if c == nil {
			closeAll(files)
			continue
		}
		switch m.Op {
		case opStarted, opStartErr:
			c.started <- m
		case opExited:
			c.exited <- m.Exit
		case opSignaled:
			c.signaled <- struct{}{}
		case opListener:
			var f *os.File
			if len(files) > 0 {
				f, files = files[0], files[1:]
			}
			c.listener <- listenerMsg{m: m, f: f}
		}
		closeAll(files)
	}
}

func (s *Sandbox) initDoneOrTimeout() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		select {
		case <-s.initDone:
		case <-time.After(2 * time.Second):
		}
		close(ch)
	}()
	return ch
}

// register allocates a request id.
func (s *Sandbox) register() (uint64, *call, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, nil, errors.New("sandbox/linux: sandbox is closed")
	}
	select {
	case <-s.dead:
		return 0, nil, fmt.Errorf("sandbox/linux: sandbox init is gone: %w", s.deadErr)
	default:
	}
	s.nextID++
	c := &call{
		started:  make(chan *msg, 1),
		exited:   make(chan *exitStatus, 1),
		signaled: make(chan struct{}, 8),
		listener: make(chan listenerMsg, 1),
	}
	s.calls[s.nextID] = c
	s.inflight.Add(1)
	return s.nextID, c, nil
}

func (s *Sandbox) unregister(id uint64) {
	s.mu.Lock()
	delete(s.calls, id)
	s.mu.Unlock()
	s.inflight.Done()
}

// deadError is the error for a call cut short by the init's death.
func (s *Sandbox) deadError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("sandbox/linux: sandbox closed while the command ran")
	}
	return fmt.Errorf("sandbox/linux: sandbox init is gone: %w", s.deadErr)
}

// Close kills every process of the sandbox (ending the init ends its PID
// namespace), removes its cgroups, stops the egress proxy and runs the
// git guard's last check (see [Quarantine]); it removes nothing else
// from the workspace. It is idempotent and returns nil after the first
// call.
func (s *Sandbox) Close() error {
	var err error
	s.closeOne.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.stopWatch()
		if s.ctl != nil {
			s.ctl.Close()
		}
		if s.init != nil && s.init.Process != nil {
			select {
			case <-s.initDone:
			case <-time.After(2 * time.Second):
				_ = s.init.Process.Kill()
				<-s.initDone
			}
		}
		// Calls in flight see the init gone and return; then their
		// background cgroup removals can be waited for.
		s.inflight.Wait()
		s.proxyMu.Lock()
		if s.proxy != nil {
			s.proxy.close()
		}
		s.proxyMu.Unlock()
		s.bg.Wait()
		if s.rg != nil {
			s.rg.remove()
		}
		s.closeGuard()
		s.hostSecrets.close()
	})
	return err
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.b))
}

// specError is an error of the Spec: it matches [sandbox.ErrInvalidSpec]
// and reads as the error it holds.
type specError struct{ error }

func (e specError) Unwrap() error { return e.error }

func (e specError) Is(target error) bool { return target == sandbox.ErrInvalidSpec }
