package cli_test

import (
	"encoding/base64"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A long output that prints the run's secret is saved whole to a file the
// result names, before any redaction: that file is read by the model,
// printed by `runs show --full` and served by the API, so it holds the
// secret no more than the result does.
func TestSecretNotInWholeOutput(t *testing.T) {
	db := setup(t)
	const name, secret = "KEEL_T_WHOLE", "kcW-whole-0123456789abcdef"
	t.Setenv(name, secret)
	traj := writeTrajectory(t, "print a lot",
		[]fcall{sh(`seq -f 'line %06g of the output' 6000; printenv ` + name + `; printenv ` + name + ` | base64; seq -f 'tail %06g' 6000`)}, nil)
	code, _, errOut := keel(t, "run", "--db", db, "--model", "replay:"+traj, "--workspace", t.TempDir(), "--secret-env", name, "--no-wait", "-q")
	if code != 0 {
		t.Fatalf("keel run = %d\n%s", code, errOut)
	}
	id, st := lastRun(t, db)
	artifact := ""
	for _, turn := range st.Turns {
		for _, c := range turn.Calls {
			if c.Finished != nil && c.Finished.Artifact != "" {
				artifact = c.Finished.Artifact
			}
		}
	}
	if artifact == "" {
		t.Fatal("the long output names no whole-output file")
	}
	canaries := []string{secret, base64.StdEncoding.EncodeToString([]byte(secret + "\n"))[:24]}
	found := 0
	filepath.WalkDir(os.Getenv("KEEL_HOME"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".out") {
			return nil
		}
		found++
		b, _ := os.ReadFile(p)
		if !strings.Contains(string(b), "line 003000 of the output") {
			t.Errorf("%s lost the output: %d bytes", p, len(b))
		}
		for _, c := range canaries {
			if strings.Contains(string(b), c) {
				t.Errorf("%s holds the secret (%q)", p, c)
			}
		}
		return nil
	})
	if found == 0 {
		t.Errorf("no whole-output file under KEEL_HOME (result names %s)", artifact)
	}
	_, out, _ := keel(t, "runs", "show", "--db", db, id, "--full")
	for _, c := range canaries {
		if strings.Contains(out, c) {
			t.Errorf("runs show --full prints the secret (%q)", c)
		}
	}
	if !strings.Contains(out, "line 003000 of the output") {
		t.Errorf("runs show --full lacks the whole output:\n%.500s", out)
	}
}
