//go:build !linux

package checkpoint

import (
	"io/fs"
	"time"
)

// changeTime is when the file of fi last changed (its modification time
// here: a process can set it back).
func changeTime(fi fs.FileInfo) time.Time { return fi.ModTime() }

// birthTime is unknown here.
func birthTime(string) (time.Time, bool) { return time.Time{}, false }
