//go:build linux

package linux

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// The host and the sandbox's init process talk over one SOCK_SEQPACKET
// socket pair: every message is one JSON object, and file descriptors
// (output pipes, cgroup files, listening sockets) travel with it as
// SCM_RIGHTS. A message too large for one packet travels in a sealed
// memfd whose descriptor is the message's last file.

// Message operations.
const (
	opConfig   = "config"   // host → init: set up the file system (first message)
	opReady    = "ready"    // init → host: setup done; carries the report
	opFatal    = "fatal"    // init → host: setup failed; init exits
	opExec     = "exec"     // host → init: start a command
	opStarted  = "started"  // init → host: command running, with its pid
	opStartErr = "starterr" // init → host: command could not start
	opExited   = "exited"   // init → host: the command's direct child exited
	opSignal   = "signal"   // host → init: signal a command's process tree (no cgroup)
	opSignaled = "signaled" // init → host: opSignal done
	opListen   = "listen"   // host → init: open the egress listener
	opListener = "listener" // init → host: the listener's port, with its fd
)

const (
	maxPacket  = 64 << 10 // messages above this travel in a memfd
	maxFDs     = 16       // most descriptors one message carries
	bigMsgFlag = "memfd"
)

// msg is the envelope of every message. Exactly one payload field is set,
// according to Op.
type msg struct {
	Op string `json:"op"`
	ID uint64 `json:"id,omitempty"`
	// Big marks a message whose JSON body is in the last file.
	Big bool `json:"big,omitempty"`

	Config  *initConfig  `json:"config,omitempty"`
	Report  *initReport  `json:"report,omitempty"`
	Exec    *execRequest `json:"exec,omitempty"`
	Exit    *exitStatus  `json:"exit,omitempty"`
	Signal  int          `json:"signal,omitempty"`
	Pid     int          `json:"pid,omitempty"`
	Port    int          `json:"port,omitempty"`
	Errno   int          `json:"errno,omitempty"`
	Message string       `json:"message,omitempty"`
}

// execRequest asks the init to start one command. File descriptors arrive
// in this order: stdout, then stderr when SplitStderr, then stdin when
// Stdin, then the cgroup files named by Cgroup.
type execRequest struct {
	Path        string   `json:"path"` // resolved in the sandbox; may be ""
	Args        []string `json:"args"`
	Dir         string   `json:"dir"`
	Env         []string `json:"env"`
	SplitStderr bool     `json:"split_stderr,omitempty"`
	Rlimits     []rlimit `json:"rlimits,omitempty"`
	// Stdin is true when the command's standard input follows the
	// output pipes (otherwise it is /dev/null).
	Stdin bool `json:"stdin,omitempty"`
	// V1Tasks is the number of cgroup v1 "tasks" files passed after the
	// output pipes; the spawner thread joins them to fork the command.
	V1Tasks int `json:"v1_tasks,omitempty"`
	// V2Dir is true when a cgroup v2 directory fd follows the v1 files;
	// the command is cloned into it (CLONE_INTO_CGROUP).
	V2Dir bool `json:"v2_dir,omitempty"`
}

// rlimit is one resource limit applied to a command right after fork.
type rlimit struct {
	Resource int    `json:"resource"`
	Cur      uint64 `json:"cur"`
	Max      uint64 `json:"max"`
}

// exitStatus is how the direct child ended.
type exitStatus struct {
	Status   uint32 `json:"status"`    // raw wait status
	UserUs   int64  `json:"user_us"`   // CPU time in user mode, µs
	SystemUs int64  `json:"system_us"` // CPU time in kernel mode, µs
	MaxRSSKB int64  `json:"max_rss_kb"`
}

// conn is one end of the control socket. Send is safe for concurrent use;
// Recv must be called from one goroutine.
type conn struct {
	uc  *net.UnixConn
	wmu sync.Mutex
	buf []byte
	oob []byte
}

// newConn wraps f, a SOCK_SEQPACKET socket, and closes f: the conn holds
// its own close-on-exec duplicate, served by the runtime's poller (so
// Close wakes a blocked Recv and the peer sees the end at once).
func newConn(f *os.File) (*conn, error) {
	defer f.Close()
	fc, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("sandbox/linux: control socket: %w", err)
	}
	uc, ok := fc.(*net.UnixConn)
	if !ok {
		fc.Close()
		return nil, fmt.Errorf("sandbox/linux: control socket is a %T", fc)
	}
	return &conn{
		uc:  uc,
		buf: make([]byte, maxPacket+1024),
		oob: make([]byte, unix.CmsgSpace(4*(maxFDs+1))),
	}, nil
}

// errClosed is returned by Recv when the peer has closed the socket.
var errClosed = errors.New("sandbox/linux: control socket closed")

// Send writes m with the given descriptors. The caller keeps ownership of
// files (Send does not close them).
func (c *conn) Send(m *msg, files ...*os.File) error {
	body, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("sandbox/linux: encode %s: %w", m.Op, err)
	}
	fds := make([]int, 0, len(files)+1)
	for _, f := range files {
		fds = append(fds, int(f.Fd()))
	}
	if len(body) > maxPacket {
		mf, err := sealedMemfd(body)
		if err != nil {
			return err
		}
		defer mf.Close()
		body, _ = json.Marshal(&msg{Op: m.Op, ID: m.ID, Big: true})
		fds = append(fds, int(mf.Fd()))
	}
	if len(fds) > maxFDs+1 {
		return fmt.Errorf("sandbox/linux: send %s: %d descriptors, at most %d", m.Op, len(fds), maxFDs)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, _, err = c.uc.WriteMsgUnix(body, oob, nil)
	// Keep the files reachable until the kernel holds its references.
	for _, f := range files {
		_ = f.Fd()
	}
	if err != nil {
		return fmt.Errorf("sandbox/linux: send %s: %w", m.Op, err)
	}
	return nil
}

// Recv reads one message and the descriptors that came with it, which the
// caller owns. It returns errClosed at the peer's end.
func (c *conn) Recv() (*msg, []*os.File, error) {
	n, oobn, _, _, err := c.uc.ReadMsgUnix(c.buf, c.oob)
	if err != nil {
		if errors.Is(err, net.ErrClosed) {
			return nil, nil, errClosed
		}
		return nil, nil, fmt.Errorf("sandbox/linux: receive: %w", err)
	}
	files, ferr := parseRights(c.oob[:oobn])
	if n == 0 && oobn == 0 {
		return nil, nil, errClosed
	}
	if ferr != nil {
		closeAll(files)
		return nil, nil, ferr
	}
	body := c.buf[:n]
	m := new(msg)
	if err := json.Unmarshal(body, m); err != nil {
		closeAll(files)
		return nil, nil, fmt.Errorf("sandbox/linux: decode message: %w", err)
	}
	if m.Big {
		if len(files) == 0 {
			return nil, nil, errors.New("sandbox/linux: large message without its memfd")
		}
		mf := files[len(files)-1]
		files = files[:len(files)-1]
		big, err := readAllAt(mf)
		mf.Close()
		if err != nil {
			closeAll(files)
			return nil, nil, err
		}
		m = new(msg)
		if err := json.Unmarshal(big, m); err != nil {
			closeAll(files)
			return nil, nil, fmt.Errorf("sandbox/linux: decode large message: %w", err)
		}
	}
	return m, files, nil
}

// Close closes the socket; a blocked Recv on either side returns
// errClosed.
func (c *conn) Close() error { return c.uc.Close() }

func parseRights(oob []byte) ([]*os.File, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	scms, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("sandbox/linux: parse control message: %w", err)
	}
	var files []*os.File
	for _, scm := range scms {
		fds, err := unix.ParseUnixRights(&scm)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "passed"))
		}
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

func sealedMemfd(body []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("keel-msg", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("sandbox/linux: memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "keel-msg")
	if _, err := f.Write(body); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox/linux: memfd write: %w", err)
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox/linux: memfd seal: %w", err)
	}
	return f, nil
}

func readAllAt(f *os.File) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("sandbox/linux: memfd stat: %w", err)
	}
	if st.Size() > 256<<20 {
		return nil, fmt.Errorf("sandbox/linux: message of %d bytes is too large", st.Size())
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, fmt.Errorf("sandbox/linux: memfd read: %w", err)
	}
	return b, nil
}
