package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/internal/cli"
)

// TestVersion: `keel version` and `keel --version` print the same line,
// and neither opens or creates a journal.
func TestVersion(t *testing.T) {
	home := filepath.Dir(setup(t))
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, errOut := keel(t, args...)
		if code != 0 || errOut != "" {
			t.Fatalf("keel %v: exit %d, stderr %q", args, code, errOut)
		}
		if !strings.HasPrefix(out, "keel version "+cli.Version+" (") {
			t.Errorf("keel %v printed %q", args, out)
		}
	}
	if code, _, _ := keel(t, "version", "extra"); code != 2 {
		t.Errorf("keel version extra: exit %d, want 2", code)
	}
	entries, err := os.ReadDir(home)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("keel version made %s in KEEL_HOME", e.Name())
	}
}
