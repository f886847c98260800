package fs_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/keel-run/keel/tool/builtin/fs"
)

// TestWriteENOSPC fills a 64 KiB tmpfs: write_file and edit_file return
// a tool error and the old file is intact. It mounts the tmpfs itself,
// which needs root (CAP_SYS_ADMIN); elsewhere it is skipped.
func TestWriteENOSPC(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k,mode=0755"); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root): %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	e := newEnvAt(t, dir, nil)
	e.write("f.txt", "old content\n")
	big := strings.Repeat("x", 1<<20)
	wantErr(t, e.call(fs.WriteName, map[string]any{"path": "f.txt", "content": big}), "no space left on device; the file was not changed")
	wantErr(t, e.call(fs.EditName, map[string]any{"path": "f.txt", "old_string": "old", "new_string": big}), "no space left on device; the file was not changed")
	wantErr(t, e.call(fs.WriteName, map[string]any{"path": "new.txt", "content": big}), "no space left on device")
	if got := e.read("f.txt"); got != "old content\n" {
		t.Errorf("f.txt = %q after a failed write", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "new.txt")); !os.IsNotExist(err) {
		t.Errorf("new.txt exists after a failed write: %v", err)
	}
	assertNoTemp(t, dir)
	// Once there is room again, writing works.
	wantOK(t, e.call(fs.WriteName, map[string]any{"path": "f.txt", "content": "fits\n"}))
}
