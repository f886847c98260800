package assemble

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A memory file of the workspace is read only as itself: a symbolic
// link inside the workspace (KEEL.md -> .env, a file the run's policy
// denies and the sandbox hides) or a second hard link is not followed on
// the host (fresh-user trial 7, P3); the user's own directory may link.
func TestReadMemoryRefusesLinksInWorkspace(t *testing.T) {
	t.Parallel()
	home, ws := t.TempDir(), t.TempDir()
	const canary = "DB_PASSWORD=hunter2-DENYCANARY"
	for _, f := range []struct{ name, text string }{{".env", canary}} {
		if err := os.WriteFile(filepath.Join(ws, f.name), []byte(f.text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(".env", filepath.Join(ws, "KEEL.md")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(ws, ".env"), filepath.Join(ws, "AGENTS.md")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "notes.md"), []byte("user notes"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("notes.md", filepath.Join(home, "KEEL.md")); err != nil {
		t.Fatal(err)
	}
	text, _, warns, err := ReadMemory(home, ws, "", DefaultMemoryBytes)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text, "hunter2") {
		t.Errorf("memory holds the linked file's content:\n%s", text)
	}
	if !strings.Contains(text, "user notes") {
		t.Errorf("memory lacks the user's own linked file:\n%s", text)
	}
	if len(warns) != 2 {
		t.Errorf("warnings = %q, want one per linked workspace file", warns)
	}
	// A plain file is read.
	os.Remove(filepath.Join(ws, "KEEL.md"))
	os.WriteFile(filepath.Join(ws, "KEEL.md"), []byte("project rules"), 0o600)
	if text, _, _, _ := ReadMemory("", ws, "", DefaultMemoryBytes); !strings.Contains(text, "project rules") {
		t.Errorf("a regular KEEL.md was not read:\n%s", text)
	}
}
