package checkpoint

import (
	"io/fs"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// changeTime is when the file of fi last changed: its inode change
// time, which the kernel sets on every write, rename, link or mode
// change and which no unprivileged process can set back.
func changeTime(fi fs.FileInfo) time.Time {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Ctim.Sec, st.Ctim.Nsec)
	}
	return fi.ModTime()
}

// birthTime is when the file name was created, when the file system
// records it (ok false otherwise).
func birthTime(name string) (t time.Time, ok bool) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, name, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BTIME, &st); err != nil || st.Mask&unix.STATX_BTIME == 0 {
		return time.Time{}, false
	}
	return time.Unix(st.Btime.Sec, int64(st.Btime.Nsec)), true
}
