package checkpoint_test

import (
	"path/filepath"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/checkpoint"
)

// A warmed hook's first snapshot is the workspace as it is at that call,
// not as it was when warm took its snapshot: a file written in between
// (an MCP server starting in the sandbox, another process) is in it.
func TestWarmHookSeesLaterChanges(t *testing.T) {
	dir := repo(t, map[string]string{"a.py": "a = 1\n", "sub/b.py": "b = 1\n"})
	hook, warm, release := checkpoint.WarmHook(filepath.Join(t.TempDir(), "store"), dir)
	defer release()
	if hook == nil {
		t.Skip("no git")
	}
	warm(t.Context())
	write(t, dir, "sub/b.py", "b = 2\n")
	write(t, dir, "c.py", "c = 1\n")
	cp, err := hook(t.Context(), "r", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The same workspace snapshotted by a store of its own, in full.
	other, err := checkpoint.OpenCheckpoints(t.Context(), filepath.Join(t.TempDir(), "other"), dir)
	if err != nil {
		t.Fatal(err)
	}
	want, err := other.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if cp == nil || cp.Tree != want {
		t.Fatalf("first snapshot after warm: %+v, want tree %s", cp, want)
	}
	// Nothing changed since: no checkpoint.
	prev := &agent.Snapshot{Tree: cp.Tree, Commit: cp.Commit, Store: cp.Store}
	if again, err := hook(t.Context(), "r", prev); err != nil || again != nil {
		t.Fatalf("unchanged workspace: %+v, %v", again, err)
	}
}
