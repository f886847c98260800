package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An agent definition a run cannot use (not trusted, unparsable) is a
// configuration error: exit 2, nothing ran.
func TestTeamDefinitionErrorsExit2(t *testing.T) {
	db := setup(t)
	traj := writeTrajectory(t, "say hi", nil)
	for _, tt := range []struct{ name, def, want string }{
		{"untrusted", "---\ndescription: helps\n---\nYou help.\n", "is not trusted"},
		{"unparsable", "no front matter\n", "agent definition"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ws := t.TempDir()
			dir := filepath.Join(ws, ".keel", "agents")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "helper.md"), []byte(tt.def), 0o644); err != nil {
				t.Fatal(err)
			}
			if tt.name == "unparsable" {
				if code, _, errOut := keel(t, "config", "trust", "--workspace", ws); code != 0 {
					t.Fatalf("config trust = %d\n%s", code, errOut)
				}
			}
			code, _, errOut := keel(t, "run", "--db", db, "--team", "--model", "replay:"+traj, "--workspace", ws, "-q")
			if code != 2 || !strings.Contains(errOut, tt.want) {
				t.Errorf("keel run --team = %d, want 2 with %q\n%s", code, tt.want, errOut)
			}
		})
	}
}
