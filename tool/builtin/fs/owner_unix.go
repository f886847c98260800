//go:build unix

package fs

import (
	"os"
	"syscall"
)

// keepOwner gives f the owner and group of old when they differ from the
// writer's, and reports whether f has them now: only a privileged process
// may give files away.
func keepOwner(f *os.File, old os.FileInfo) bool {
	st, ok := old.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) == os.Geteuid() && int(st.Gid) == os.Getegid() {
		return true
	}
	return f.Chown(int(st.Uid), int(st.Gid)) == nil
}

// links returns fi's hard link count.
func links(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}
