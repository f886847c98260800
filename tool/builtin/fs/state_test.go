package fs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/tool"
)

// With a state directory, whole outputs are saved there, not in the
// workspace, and read_file reads them at the path the result names; it
// reads nothing else of the state directory.
func TestArtifactsInStateDir(t *testing.T) {
	e := newEnv(t)
	ws := e.env.Workspace
	state := filepath.Join(t.TempDir(), "state")
	if err := ws.SetState(state); err != nil {
		t.Fatal(err)
	}
	if err := ws.SetState(filepath.Join(e.dir, "inside")); err == nil {
		t.Error("a state directory inside the workspace was accepted")
	}
	out := tool.NewOutput(ws, "run1", "c9", 1000)
	out.Write([]byte(strings.Repeat("line of output\n", 2000)))
	out.Close()
	art := out.Artifact()
	if want := filepath.Join(ws.StateDir(), "artifacts", "run1", "c9.out"); art != want || !strings.Contains(out.View(), want) {
		t.Fatalf("artifact %q (view names it: %v), want %s", art, strings.Contains(out.View(), want), want)
	}
	if _, err := os.Stat(filepath.Join(e.dir, ".keel")); !os.IsNotExist(err) {
		t.Errorf("the workspace has a .keel: %v", err)
	}
	if b, err := tool.ReadArtifact(ws, art, 1<<20); err != nil || len(b) != 30000 {
		t.Errorf("ReadArtifact: %d bytes, %v", len(b), err)
	}
	wantOK(t, e.call("read_file", map[string]any{"path": art, "offset": 1999}), "line of output")
	os.MkdirAll(filepath.Join(ws.StateDir(), "kernels"), 0o755)
	os.WriteFile(filepath.Join(ws.StateDir(), "kernels", "run1.json"), []byte("{}"), 0o644)
	for _, p := range []string{filepath.Join(ws.StateDir(), "kernels", "run1.json"), ws.StateDir() + "/artifacts/../kernels/run1.json"} {
		wantErr(t, e.call("read_file", map[string]any{"path": p}), "outside the workspace")
	}
}
