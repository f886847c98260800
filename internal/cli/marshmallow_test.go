package cli_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// marshmallowAtBase returns a clone of marshmallow-code/marshmallow at the
// recorded task's base commit (testdata/trajectories/spec.json), made
// from the clone or mirror KEEL_MARSHMALLOW_GIT names; it skips the test
// when the variable is not set.
func marshmallowAtBase(t *testing.T) string {
	t.Helper()
	repo := os.Getenv("KEEL_MARSHMALLOW_GIT")
	if repo == "" {
		t.Skip("KEEL_MARSHMALLOW_GIT is not set (a clone or mirror of marshmallow-code/marshmallow)")
	}
	var spec struct {
		BaseCommit string `json:"base_commit"`
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "trajectories", "spec.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &spec); err != nil || spec.BaseCommit == "" {
		t.Fatalf("spec.json: no base_commit (%v)", err)
	}
	ws := filepath.Join(t.TempDir(), "testbed")
	for _, args := range [][]string{{"clone", "-q", repo, ws}, {"-C", ws, "checkout", "-q", spec.BaseCommit}} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	return ws
}
