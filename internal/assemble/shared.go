package assemble

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// holdWorkspace marks the workspace dir as used by one more execution
// for as long as it runs: a shared flock(2) on the directory, which every
// execution assembled on this machine takes (whatever its journal,
// process or sandbox) and the kernel drops when the process dies. Before
// taking it, an exclusive attempt that fails means another execution
// holds it: shared then describes them ("pid 3225", "another execution
// of this process"), else it is "". release drops the lock. A directory
// that cannot be opened or locked is not an error: the warning is lost,
// nothing else.
func holdWorkspace(dir string) (shared string, release func()) {
	f, err := os.Open(dir)
	if err != nil {
		return "", func() {}
	}
	fd := int(f.Fd())
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
		shared = lockHolders(f)
	}
	// From exclusive (or none) to shared; an exclusive check of another
	// execution starting holds it only for an instant.
	if err := unix.Flock(fd, unix.LOCK_SH); err != nil {
		f.Close()
		return shared, func() {}
	}
	return shared, func() { f.Close() }
}

// lockHolders describes the processes other than this one that hold a
// flock on f, as /proc/locks lists them.
func lockHolders(f *os.File) string {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "another execution"
	}
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)), st.Ino)
	var pids []string
	if l, err := os.Open("/proc/locks"); err == nil {
		defer l.Close()
		self := strconv.Itoa(os.Getpid())
		sc := bufio.NewScanner(l)
		for sc.Scan() {
			// "1: FLOCK  ADVISORY  READ 3225 fe:00:1234 0 EOF" (a
			// waiter's line has "->" after the number).
			fields := strings.Fields(sc.Text())
			for i, fld := range fields {
				if fld == id && i > 0 && fields[1] != "->" && slices.Contains(fields, "FLOCK") {
					if pid := fields[i-1]; pid != self && !slices.Contains(pids, pid) {
						pids = append(pids, pid)
					}
				}
			}
		}
	}
	if len(pids) == 0 {
		return "another execution of this process"
	}
	return "pid " + strings.Join(pids, ", pid ")
}
