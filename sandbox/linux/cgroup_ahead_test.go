//go:build linux

package linux

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/keel-run/keel/sandbox"
)

// TestCommandGroupsAhead: each command gets cgroups of its own, made
// ahead (runGroup.prepareNext), and Close leaves none behind, the
// groups made for a command that never ran included.
func TestCommandGroupsAhead(t *testing.T) {
	sb, err := New(&sandbox.Spec{Workspace: t.TempDir()}, nil)
	if err != nil {
		t.Skipf("no sandbox here: %v", err)
	}
	defer sb.Close()
	if sb.rg == nil {
		t.Skip("no cgroups here")
	}
	var runDirs []string
	for _, d := range sb.rg.v1 {
		runDirs = append(runDirs, d)
	}
	if sb.rg.v2 != "" {
		runDirs = append(runDirs, sb.rg.v2)
	}
	seen := map[string]bool{}
	for range 3 {
		cg, err := sb.rg.newCommand(sandbox.Limits{Processes: 8})
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(filepath.Dir(cg.procsFile()))
		if seen[name] {
			t.Errorf("cgroup %s given to two commands", name)
		}
		seen[name] = true
		if dir, v := cg.dir("pids"); v != "" {
			if b, err := os.ReadFile(filepath.Join(dir, "pids.max")); err != nil || string(b) != "9\n" {
				t.Errorf("pids.max of %s = %q, %v; want 9", name, b, err)
			}
		}
		cg.removeAsync(&sb.bg)
		sb.rg.prepareNext(&sb.bg)
	}
	if res, err := sb.Exec(context.Background(), &sandbox.Cmd{Args: []string{"true"}, Stdout: io.Discard}); err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec: %v %+v", err, res)
	}
	sb.Close()
	for _, d := range runDirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("after Close, %s: %v; want it removed", d, err)
		}
	}
}
