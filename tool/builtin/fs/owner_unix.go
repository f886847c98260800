//go:build unix

package fs

import (
	"os"
	"syscall"
)

// keepOwner gives f the owner and group of old when they differ from the
// writer's; best effort, since only a privileged process may give files
// away.
func keepOwner(f *os.File, old os.FileInfo) {
	if st, ok := old.Sys().(*syscall.Stat_t); ok && (int(st.Uid) != os.Geteuid() || int(st.Gid) != os.Getegid()) {
		f.Chown(int(st.Uid), int(st.Gid))
	}
}
