package tool

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestOutputArtifactENOSPC fills a 64 KiB tmpfs while saving the whole
// output: the view says so, no partial artifact is left, and the command's
// output is still drained. Mounting needs root; elsewhere it is skipped.
func TestOutputArtifactENOSPC(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root): %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	ws, err := NewWorkspace(dir, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	o := NewOutput(ws, "r", "c", 1000)
	writeChunks(t, o, bytes.Repeat([]byte("0123456789abcdef\n"), 100_000), 4096)
	o.Close()
	v := checkView(t, o, 1000)
	if !strings.Contains(markerLine(v), "the full output could not be saved: no space left on device") || o.Artifact() != "" {
		t.Errorf("marker = %q, artifact %q", markerLine(v), o.Artifact())
	}
	if _, err := os.Stat(filepath.Join(dir, ".keel/artifacts/r/c.out")); !os.IsNotExist(err) {
		t.Errorf("a partial artifact was left: %v", err)
	}
}
