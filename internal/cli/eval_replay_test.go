package cli_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/keel-run/keel/model/replay"
)

// evalRepo makes a git repository with a README at dir/repo and a suite
// of one case (hello.toml) cloning it, with the recording trajectory
// and the checks (TOML; default: hello.txt contains hello), at
// dir/suite.
func evalRepo(t *testing.T, dir, trajectory, checks string) (repo, suite string) {
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
	if checks == "" {
		checks = "[[check]]\nfile = \"hello.txt\"\ncontains = \"hello\"\n"
	}
	for name, s := range map[string]string{
		"hello.traj.json": trajectory,
		"hello.toml":      "recordings = [\"hello.traj.json\"]\n[workspace]\ngit = \"" + repo + "\"\n" + checks,
	} {
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
	repo, suite := evalRepo(t, dir, evalTrajectory, "")
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

// liveTurn2 is a second turn that appends "fixed" to hello.txt before
// it submits.
const liveTurn2 = `{"role": "assistant", "content": "", "tool_calls": [{"id": "call_9", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"echo fixed >> hello.txt && echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\"}"}}],
  "extra": {"response": {"id": "l2", "object": "chat.completion", "created": 1765000000, "model": "live-model", "usage": {"prompt_tokens": 150, "completion_tokens": 5, "total_tokens": 155},
   "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "", "tool_calls": [{"id": "call_9", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"echo fixed >> hello.txt && echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\"}"}}]}}]}}}`

// TestEvalRecordedThenLive runs a case recorded-then-live: the
// recording answers while the run follows it, and a live model (an
// OpenAI-compatible endpoint over httptest serving recorded responses)
// from the first tool result that differs from the recorded one.
func TestEvalRecordedThenLive(t *testing.T) {
	setup(t)
	// The live model: turn 1 as recorded, then its own turn 2.
	liveTraj := strings.Replace(evalTrajectory, evalTrajectory[strings.Index(evalTrajectory, `{"role": "assistant", "content": "", "tool_calls": [{"id": "call_2"`):strings.Index(evalTrajectory, `{"role": "exit"`)], liveTurn2+",\n ", 1)
	tr, err := replay.Parse([]byte(liveTraj))
	if err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	h := replay.NewHandler(tr)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/chat/completions") {
			asked.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	live := "openai-compatible:live-model@" + srv.URL + "/v1"
	checks := "[[check]]\nfile = \"hello.txt\"\ncontains = \"fixed\"\n"

	// A recording whose first result is not what the call gives now:
	// the recording alone submits without the fix; with --live, the live
	// model answers from turn 2 and fixes it.
	diverging := strings.Replace(evalTrajectory, `"raw_output": "README\nhello.txt\n"`, `"raw_output": "README\nhello.txt\nsetup.py\n"`, 1)
	if diverging == evalTrajectory {
		t.Fatal("the recorded output to change is not in the trajectory")
	}
	_, suite := evalRepo(t, filepath.Join(t.TempDir()), diverging, checks)
	code, out, errOut := keel(t, "eval", "run", suite, "--name", "rec")
	if code != 0 || !strings.Contains(out, "success 0%  (0/1 scored") {
		t.Fatalf("eval run, recorded: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = keel(t, "eval", "run", suite, "--name", "live", "--live", live)
	if code != 0 || !strings.Contains(out, "success 100%  (1/1 scored") || asked.Load() != 1 {
		t.Fatalf("eval run, recorded then live: exit %d, live model asked %d times (want 1)\n%s\n%s", code, asked.Load(), out, errOut)
	}
	// Turn 1 is priced at the recording's model's prices (deepseek-chat
	// has a price), turn 2 at the live model's (it has none).
	b, err := os.ReadFile(filepath.Join(os.Getenv("KEEL_HOME"), "evals", "live", "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res struct{ Spent float64 }
	if err := json.Unmarshal(b, &res); err != nil || res.Spent <= 0 {
		t.Errorf("the recorded-then-live trial cost %v (%v), want the recorded turn's cost", res.Spent, err)
	}
	run := evalRunIDs(t, "live")[0]
	code, out, errOut = keel(t, "runs", "show", run)
	if code != 0 || !strings.Contains(out, "fixed") {
		t.Errorf("runs show of the live trial: exit %d\n%s\n%s", code, out, errOut)
	}

	// A recording the run follows to its end: the live model is never
	// asked.
	asked.Store(0)
	_, suite = evalRepo(t, filepath.Join(t.TempDir()), evalTrajectory, "")
	code, out, errOut = keel(t, "eval", "run", suite, "--name", "follows", "--live", live)
	if code != 0 || !strings.Contains(out, "success 100%  (1/1 scored") || asked.Load() != 0 {
		t.Fatalf("eval run of a recording that does not diverge: exit %d, live model asked %d times (want 0)\n%s\n%s", code, asked.Load(), out, errOut)
	}
	if code, _, errOut := keel(t, "eval", "run", suite, "--model", "openai:gpt-4.1", "--live", live); code != 2 || !strings.Contains(errOut, "needs --model recorded") {
		t.Errorf("--live without --model recorded: exit %d\n%s", code, errOut)
	}
}
