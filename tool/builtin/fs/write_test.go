package fs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/tool/builtin/fs"
)

func TestWriteFile(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wantOK(t, e.call(fs.WriteName, map[string]any{"path": "new/deep/dir/a.txt", "content": "hello\n"}), "created new/deep/dir/a.txt: 6 bytes, 1 line")
	if e.read("new/deep/dir/a.txt") != "hello\n" {
		t.Errorf("content not written")
	}
	if fi, _ := os.Stat(filepath.Join(e.dir, "new/deep/dir/a.txt")); fi.Mode().Perm() != 0o644 {
		t.Errorf("new file mode = %v, want 0644", fi.Mode())
	}
	// Replacing keeps the mode of the old file, setuid bits included.
	e.write("run.sh", "#!/bin/sh\n")
	os.Chmod(filepath.Join(e.dir, "run.sh"), 0o750|os.ModeSetgid)
	wantOK(t, e.call(fs.WriteName, map[string]any{"path": "run.sh", "content": "#!/bin/sh\necho hi\n"}), "replaced run.sh")
	if fi, _ := os.Stat(filepath.Join(e.dir, "run.sh")); fi.Mode() != 0o750|os.ModeSetgid {
		t.Errorf("mode after replace = %v, want %v", fi.Mode(), 0o750|os.ModeSetgid)
	}
	// Exact bytes: no newline added, NUL and CRLF kept.
	wantOK(t, e.call(fs.WriteName, map[string]any{"path": "raw.bin", "content": "a\r\nb\x00c"}))
	if e.read("raw.bin") != "a\r\nb\x00c" {
		t.Errorf("content changed on write: %q", e.read("raw.bin"))
	}
	wantOK(t, e.call(fs.WriteName, map[string]any{"path": "empty", "content": ""}), "0 bytes, 0 lines")
	// Errors.
	os.Mkdir(filepath.Join(e.dir, "adir"), 0o755)
	wantErr(t, e.call(fs.WriteName, map[string]any{"path": "adir", "content": "x"}), "it is a directory")
	wantErr(t, e.call(fs.WriteName, map[string]any{"path": "raw.bin/x", "content": "x"}), "not a directory")
	wantErr(t, e.call(fs.WriteName, map[string]any{"path": ".", "content": "x"}), "workspace root")
	wantErr(t, e.call(fs.WriteName, map[string]any{"path": "a"}), "missing required argument", "content")
	assertNoTemp(t, e.dir)
}

// assertNoTemp fails if a temporary file of an atomic write is left.
func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".keel-") && strings.HasSuffix(d.Name(), ".tmp") {
			t.Errorf("temporary file left: %s", p)
		}
		return nil
	})
}
