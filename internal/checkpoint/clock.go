package checkpoint

import (
	"os"
	"path/filepath"
	"time"
)

// StartClock returns the file-system clock's time at which a run whose
// workspace is the git repository at dir starts, exactly: a file whose
// change time is not before it was written after StartClock returned,
// and every file written before it was called has an earlier change
// time (agent.GitStart.Since). It reads the clock from a scratch file in
// the repository's .git directory (on the workspace's file system, with
// its time granularity), and waits for the clock's next tick (a
// millisecond or a few: the kernel stamps files with a coarse clock), so
// that a file written just before, in the same tick, is not counted as
// the run's. ok is false when it cannot (no .git directory it may
// write, a clock that does not tick within 100 ms): compare with the
// start's time less a slack then.
func StartClock(dir string) (t time.Time, ok bool) {
	gd := filepath.Join(dir, ".git")
	if fi, err := os.Lstat(gd); err != nil || !fi.IsDir() {
		return time.Time{}, false
	}
	f, err := os.CreateTemp(gd, "keel-clock-*")
	if err != nil {
		return time.Time{}, false
	}
	defer os.Remove(f.Name())
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return time.Time{}, false
	}
	t0 := changeTime(fi)
	for deadline := time.Now().Add(100 * time.Millisecond); time.Now().Before(deadline); {
		if _, err := f.Write([]byte{0}); err != nil {
			return time.Time{}, false
		}
		if fi, err = f.Stat(); err != nil {
			return time.Time{}, false
		}
		if t := changeTime(fi); t.After(t0) {
			return t, true
		}
		time.Sleep(time.Millisecond) // until the clock ticks: files are stamped with a coarse one
	}
	return time.Time{}, false
}
