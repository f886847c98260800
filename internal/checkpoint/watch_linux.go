//go:build linux

package checkpoint

import (
	"errors"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watchMask is what a watched directory reports: any change of an entry's
// content, metadata or name, and the directory's own removal.
const watchMask = unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE | unix.IN_CREATE | unix.IN_DELETE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW | unix.IN_EXCL_UNLINK

// maxPending bounds the paths a watcher keeps between two drains; past
// it the next snapshot is a full one.
const maxPending = 100_000

// hub is the process's one inotify instance (the kernel allows a user
// 128 by default; a server or worker snapshots many workspaces), shared
// by every watcher: a drain reads every queued event and hands each to
// the watchers of its directory (two runs in one workspace watch the
// same directories, which the kernel gives one watch).
type hub struct {
	mu   sync.Mutex
	fd   int
	err  error
	subs map[int32][]sub // watch → who watches it, as which directory
	buf  []byte
}

type sub struct {
	w   *watcher
	dir string
}

var (
	theHub  hub
	hubOnce sync.Once
)

func openHub() (*hub, error) {
	hubOnce.Do(func() {
		theHub.fd, theHub.err = unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
		theHub.subs = map[int32][]sub{}
		theHub.buf = make([]byte, 64<<10)
	})
	return &theHub, theHub.err
}

// watcher lists the paths of one work tree that may have changed since
// it was last drained, from inotify watches on its directories. The
// kernel queues an event in the system call that makes the change,
// whichever process (or mount namespace: the sandbox) makes it, so a
// drain after a command ended sees every change the command made by a
// system call. A file changed only through a shared memory mapping
// after its writer closed it reports nothing: the periodic full
// snapshot catches that.
//
// A watcher is not safe for concurrent use (the snapshot that uses it
// holds the workspace's lock); watchers of one process may be used
// concurrently.
type watcher struct {
	h        *hub
	root     string
	dirs     map[string]int32 // directory (relative, "" the root) → watch
	pending  map[string]struct{}
	overflow bool
}

// newWatcher returns a watcher of the work tree at root.
func newWatcher(root string) (*watcher, error) {
	h, err := openHub()
	if err != nil {
		return nil, err
	}
	return &watcher{h: h, root: root, dirs: map[string]int32{}, pending: map[string]struct{}{}}, nil
}

// close removes the watcher's watches.
func (w *watcher) close() { w.unwatch("") }

// watch adds a watch on directory dir (relative). Call it before reading
// the directory, so that no entry made meanwhile goes unseen.
func (w *watcher) watch(dir string) error {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	wd, err := unix.InotifyAddWatch(h.fd, filepath.Join(w.root, dir), watchMask)
	if err != nil {
		return err
	}
	id := int32(wd)
	subs := h.subs[id]
	found := false
	for i := range subs {
		if subs[i].w == w {
			// The kernel keeps one watch per directory: this one moved.
			delete(w.dirs, subs[i].dir)
			subs[i].dir = dir
			found = true
		}
	}
	if !found {
		h.subs[id] = append(subs, sub{w: w, dir: dir})
	}
	w.dirs[dir] = id
	return nil
}

// watched reports whether dir has a watch.
func (w *watcher) watched(dir string) bool {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	_, ok := w.dirs[dir]
	return ok
}

// unwatch removes the watches of dir and of every directory below it
// ("" all).
func (w *watcher) unwatch(dir string) {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	for d, id := range w.dirs {
		if dir != "" && d != dir && !strings.HasPrefix(d, dir+"/") {
			continue
		}
		delete(w.dirs, d)
		subs := h.subs[id][:0]
		for _, s := range h.subs[id] {
			if s.w != w {
				subs = append(subs, s)
			}
		}
		if len(subs) == 0 {
			unix.InotifyRmWatch(h.fd, uint32(id))
			delete(h.subs, id)
		} else {
			h.subs[id] = subs
		}
	}
}

// errOverflow is drain's error when events were lost (the kernel's queue
// or the watcher's pending paths were full): only a full snapshot knows
// what changed.
var errOverflow = errors.New("checkpoint: too many changes to follow")

// drain moves into dirty every path (relative to the root) an event
// named since the last drain; it does not block.
func (w *watcher) drain(dirty map[string]struct{}) error {
	h := w.h
	h.mu.Lock()
	err := h.read()
	for p := range w.pending {
		dirty[p] = struct{}{}
	}
	clear(w.pending)
	overflow := w.overflow
	w.overflow = false
	h.mu.Unlock()
	if err != nil {
		return err
	}
	if overflow {
		return errOverflow
	}
	return nil
}

// read hands every queued event to its watchers. Callers hold h.mu.
func (h *hub) read() error {
	for {
		n, err := unix.Read(h.fd, h.buf)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN || n <= 0 {
			return nil
		}
		if err != nil {
			return err
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&h.buf[off]))
			name := h.buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				for _, subs := range h.subs {
					for _, s := range subs {
						s.w.overflow = true
					}
				}
				continue
			}
			if i := indexNUL(name); i >= 0 {
				name = name[:i]
			}
			for _, s := range h.subs[ev.Wd] {
				p := s.dir
				if len(name) > 0 {
					p = path.Join(s.dir, string(name))
				}
				if len(s.w.pending) >= maxPending {
					s.w.overflow = true
				} else {
					s.w.pending[p] = struct{}{}
				}
				if ev.Mask&unix.IN_IGNORED != 0 && s.w.dirs[s.dir] == ev.Wd {
					// The directory is gone: its parent's event names it.
					delete(s.w.dirs, s.dir)
				}
			}
			if ev.Mask&unix.IN_IGNORED != 0 {
				delete(h.subs, ev.Wd)
			}
		}
	}
}

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}
