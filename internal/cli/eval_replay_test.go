package cli_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// evalRepo makes a git repository with a README at dir/repo and a suite
// of one case (hello.toml) cloning it, with the recording trajectory,
// at dir/suite.
func evalRepo(t *testing.T, dir, trajectory string) (repo, suite string) {
	t.Helper()
	repo = filepath.Join(dir, "repo")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "README"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q", repo}, {"-C", repo, "add", "README"},
		{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "readme"}} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	suite = filepath.Join(dir, "suite")
	if err := os.MkdirAll(suite, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]string{
		"hello.traj.json": trajectory,
		"hello.toml": `recordings = ["hello.traj.json"]
[workspace]
git = "` + repo + `"
[[check]]
file = "hello.txt"
contains = "hello"
`} {
		if err := os.WriteFile(filepath.Join(suite, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return repo, suite
}

// evalRunIDs returns the run ids of an evaluation's trials.
func evalRunIDs(t *testing.T, id string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(os.Getenv("KEEL_HOME"), "evals", id, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Trials []struct {
			RunID string `json:"run_id"`
		} `json:"trials"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tr := range res.Trials {
		ids = append(ids, tr.RunID)
	}
	return ids
}

// TestReplayEvalTrial replays a trial of an evaluation, whose workspace
// the evaluation deleted: from the repository the workspace was cloned
// from; when that is gone too, from the checkpoint store alone (with a
// warning); when that is gone as well, it fails and leaves nothing.
func TestReplayEvalTrial(t *testing.T) {
	setup(t)
	home := os.Getenv("KEEL_HOME")
	dir := t.TempDir()
	repo, suite := evalRepo(t, dir, evalTrajectory)
	code, out, errOut := keel(t, "eval", "run", suite, "--name", "r1")
	if code != 0 || !strings.Contains(out, "success 100%  (1/1 scored") {
		t.Fatalf("eval run: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(home, "evals", "r1", "work")); !os.IsNotExist(err) {
		t.Fatalf("the trial's workspace is kept (%v): this test is about replaying one that is gone", err)
	}
	run := evalRunIDs(t, "r1")[0]
	replays := func() int {
		ents, err := os.ReadDir(filepath.Join(home, "replays"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return len(ents)
	}

	code, out, errOut = keel(t, "runs", "replay", run)
	if code != 0 || !strings.Contains(out, "no divergence") || strings.Contains(errOut, "warning") {
		t.Fatalf("runs replay of a trial (its origin still there): exit %d\n%s\n%s", code, out, errOut)
	}
	if n := replays(); n != 1 {
		t.Errorf("%d replays kept, want 1", n)
	}

	// The origin gone too: the files come from the checkpoint store.
	if err := os.Rename(repo, repo+".gone"); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = keel(t, "runs", "replay", run)
	if code != 0 || !strings.Contains(out, "no divergence") || !strings.Contains(errOut, "come from its checkpoint in Keel's store, without the git repository") ||
		!strings.Contains(errOut, repo+", the repository it was cloned from") {
		t.Fatalf("runs replay without the trial's origin: exit %d\n%s\n%s", code, out, errOut)
	}

	// And the checkpoints gone: a clear error, nothing left behind.
	if err := os.RemoveAll(filepath.Join(home, "checkpoints")); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "replay-ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = keel(t, "runs", "replay", run, "--workspace", ws)
	if code != 1 || !strings.Contains(errOut, "restore the run's starting files") {
		t.Fatalf("runs replay without its origin or checkpoints: exit %d\n%s\n%s", code, out, errOut)
	}
	if n := replays(); n != 2 {
		t.Errorf("%d replays kept after a failed one, want 2", n)
	}
	if ents, err := os.ReadDir(ws); err != nil || len(ents) != 0 {
		t.Errorf("--workspace after a failed replay: %v, %v (want it empty)", ents, err)
	}
}
