//go:build unix

package fs_test

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/keel-run/keel/tool/builtin/fs"
)

// TestReadFileFIFO checks that a named pipe is refused at once instead of
// blocking the call forever.
func TestReadFileFIFO(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mkfifo(t, filepath.Join(e.dir, "pipe"))
	wantErr(t, e.call(fs.ReadName, map[string]any{"path": "pipe"}), "not a regular file (a named pipe)")
	wantErr(t, e.call(fs.WriteName, map[string]any{"path": "pipe", "content": "x"}), "a named pipe")
	wantErr(t, e.call(fs.EditName, map[string]any{"path": "pipe", "old_string": "a", "new_string": "b"}), "a named pipe")
}

func mkfifo(t *testing.T, p string) {
	t.Helper()
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
}
