package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The hint of a run whose model has no price names the key Keel looks
// its price up by, and that key works: for a replay it is the
// recording's model, not the replay: spec (fresh-user trial 3: adding
// [prices."replay:PATH"], as the hint suggested, changed nothing).
func TestNoPriceHintNamesItsKey(t *testing.T) {
	db := setup(t)
	home := filepath.Dir(db)
	var traj map[string]any
	data, err := os.ReadFile(trajectory)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &traj); err != nil {
		t.Fatal(err)
	}
	// The recording's model: its config's, and each answer's.
	traj["info"].(map[string]any)["config"].(map[string]any)["model"].(map[string]any)["model_name"] = "toy-lead"
	for _, m := range traj["messages"].([]any) {
		extra, _ := m.(map[string]any)["extra"].(map[string]any)
		if r, ok := extra["response"].(map[string]any); ok {
			r["model"] = "toy-lead"
		}
	}
	path := filepath.Join(t.TempDir(), "toy.traj.json")
	data, _ = json.Marshal(traj)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func() string {
		t.Helper()
		code, _, errOut := keel(t, "run", "--model", "replay:"+path, "--workspace", t.TempDir(), "--sandbox", "none", "--max-steps", "1")
		if code != 1 {
			t.Fatalf("keel run = %d\n%s", code, errOut)
		}
		return errOut
	}
	errOut := run()
	want := `no price known for replay:` + path + ` (priced as "toy-lead"): cost shows $0 (add [prices."toy-lead"]`
	if !strings.Contains(errOut, want) {
		t.Fatalf("the hint: want %q in\n%s", want, errOut)
	}
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte("[prices.\"toy-lead\"]\ninput = 1.0\noutput = 2.0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if errOut := run(); strings.Contains(errOut, "no price known") {
		t.Errorf("the key the hint named does not price the run:\n%s", errOut)
	}
}
