package fs_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/tool/builtin/fs"
)

// PreviewIn shows what a call would make of its file, by the tool's own
// rules, and writes nothing; the tool then makes exactly that.
func TestPreview(t *testing.T) {
	e := newEnv(t)
	if err := os.WriteFile(filepath.Join(e.dir, "a.py"), []byte("x = 1\r\ny = 2\r\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, tool string
		args       map[string]any
		before     string
		after      string
		problem    string
	}{
		{"edit keeps CRLF", fs.EditName, map[string]any{"path": "a.py", "old_string": "y = 2", "new_string": "y = 3"}, "x = 1\r\ny = 2\r\n", "x = 1\r\ny = 3\r\n", ""},
		{"edit that does not match", fs.EditName, map[string]any{"path": "a.py", "old_string": "z = 9", "new_string": "z = 1"}, "", "", "not found"},
		{"edit of a missing file", fs.EditName, map[string]any{"path": "b.py", "old_string": "a", "new_string": "b"}, "", "", "no such file"},
		{"write of a new file", fs.WriteName, map[string]any{"path": "new/c.txt", "content": "hi\n"}, "", "hi\n", ""},
		{"write outside", fs.WriteName, map[string]any{"path": "../x", "content": "no"}, "", "", "outside"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			raw, _ := json.Marshal(tt.args)
			_, before, after, problem, ok := fs.PreviewIn(e.env.Workspace, tt.tool, raw)
			if !ok {
				t.Fatal("not previewed")
			}
			if tt.problem != "" {
				if !strings.Contains(problem, tt.problem) {
					t.Errorf("problem %q, want %q", problem, tt.problem)
				}
				return
			}
			if problem != "" || string(before) != tt.before || string(after) != tt.after {
				t.Errorf("preview: %q → %q (%s), want %q → %q", before, after, problem, tt.before, tt.after)
			}
			if res := e.call(tt.tool, tt.args); res.IsError {
				t.Fatal(res.Content)
			}
			if b, _ := os.ReadFile(filepath.Join(e.dir, tt.args["path"].(string))); string(b) != tt.after {
				t.Errorf("the tool wrote %q, the preview said %q", b, tt.after)
			}
		})
	}
	if _, _, _, _, ok := fs.PreviewIn(e.env.Workspace, "bash", []byte(`{}`)); ok {
		t.Error("bash previewed")
	}
}
