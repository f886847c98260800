package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/policy"
)

// A path the policy forbids ([paths] deny) holds on every route to it,
// not only the one whose argument names it: Keel's file tools and python,
// the shell's recursive reads, archives, interpreters and substitutions,
// and git's object store when the policy denies .git. The run goes on
// (other work is allowed); no event of the journal holds the secret.
func TestDeniedPathHoldsOnEveryRoute(t *testing.T) {
	for _, prog := range []string{"git", "python3", "tar"} {
		if _, err := exec.LookPath(prog); err != nil {
			t.Skipf("%s is not installed: .ci/run installs it", prog)
		}
	}
	db := setup(t)
	const canary = "CANARY-4f1d9e2b-secret"
	ws := t.TempDir()
	files := map[string]string{"secrets/key.txt": canary + "\n", "config/prod.env": "CANARY-CONFIG\n", "config/app.env": "ok\n", "src/app.py": "print('hello')\n"}
	for rel, content := range files {
		p := filepath.Join(ws, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "with the secret"}} {
		if out, err := exec.Command("git", append([]string{"-C", ws}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	pol := filepath.Join(t.TempDir(), "team.toml")
	src := string(policy.DefaultSource()) + "\n[paths]\ndeny = [\"secrets\", \".git\", \"config/prod.env\"]\n"
	if err := os.WriteFile(pol, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	routes := []fcall{
		{"read_file", map[string]any{"path": "secrets/key.txt"}},
		{"read_file", map[string]any{"path": "config"}},
		{"search_files", map[string]any{"pattern": "CANARY"}},
		{"edit_file", map[string]any{"path": "secrets/key.txt", "old_string": "CANARY", "new_string": "x"}},
		{"python", map[string]any{"code": "import glob\nfor p in glob.glob('/workspace/**', recursive=True):\n    try: print(p, open(p).read())\n    except Exception as e: print(p, e)"}},
		sh("cat secrets/key.txt"),
		sh("grep -r CANARY . ; echo grep done"),
		sh("tar cf /tmp/all.tar . && tar xOf /tmp/all.tar | grep -a CANARY; echo tar done"),
		sh("python3 -c \"import os\nfor d, _, fs in os.walk('.'):\n  for f in fs:\n    try: print(open(os.path.join(d, f), errors='replace').read())\n    except Exception as e: print(e)\""),
		sh("cat $(find . -name 'key*'); echo find done"),
		sh("git show HEAD:secrets/key.txt"),
		sh("git log -p --all | grep CANARY; git cat-file --batch-all-objects --batch | grep -a CANARY; echo git done"),
		sh("cp -r secrets /tmp/s && cat /tmp/s/key.txt"),
		// A denied file's parent directory renamed under a computed
		// name (the gate cannot see it): the sandbox refuses the
		// rename, and the file tools know the file by its identity.
		sh("X=conf; mv ${X}ig cfg2; echo mv $?"),
		{"read_file", map[string]any{"path": "cfg2/prod.env"}},
		{"read_file", map[string]any{"path": "cfg2"}},
		{"search_files", map[string]any{"pattern": "CANARY", "path": "cfg2"}},
		sh("X=conf; mv cfg2 ${X}ig 2>/dev/null; cat config/app.env"),
		sh("cat src/app.py"),
	}
	turns := make([][]fcall, 0, len(routes)+1)
	for _, r := range routes {
		turns = append(turns, []fcall{r})
	}
	turns = append(turns, nil)
	traj := writeTrajectory(t, "find the secret", turns...)
	code, _, errOut := keel(t, "run", "--model", "replay:"+traj, "--workspace", ws, "--policy", pol, "-q")
	if code != 0 {
		t.Fatalf("keel run = %d\n%s", code, errOut)
	}
	_, st := lastRun(t, db)
	var last string
	for i, turn := range st.Turns {
		c := turn.Calls[0]
		if c.Finished == nil {
			t.Fatalf("route %d has no result", i+1)
		}
		if strings.Contains(c.Finished.Result.Content, "CANARY-") {
			t.Errorf("route %d (%s %s) read the secret:\n%s", i+1, c.Name, c.Arguments, c.Finished.Result.Content)
		}
		t.Logf("route %d %s: %.300q", i+1, c.Name, c.Finished.Result.Content)
		last = c.Finished.Result.Content
	}
	if len(st.Turns) != len(routes) || !strings.Contains(last, "print('hello')") {
		t.Errorf("%d turns; the allowed read gave %q", len(st.Turns), last)
	}
	_, evs := loadRun(t, db, st.RunID)
	for _, e := range evs {
		if strings.Contains(string(e.Payload), canary) {
			t.Errorf("event %d (%s) holds the secret", e.Seq, e.Type)
		}
	}
	for _, rel := range []string{"secrets/key.txt", "config/prod.env"} {
		if b, _ := os.ReadFile(filepath.Join(ws, rel)); string(b) != files[rel] {
			t.Errorf("the secret file %s was changed or moved: %q", rel, b)
		}
	}
}
