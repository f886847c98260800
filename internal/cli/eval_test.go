package cli_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// evalTrajectory is a two-turn recording: write hello.txt, then submit.
const evalTrajectory = `{"trajectory_format": "mini-swe-agent-1.1", "info": {"submission": ""}, "messages": [
 {"role": "system", "content": "You are a helpful assistant."},
 {"role": "user", "content": "Write hello.txt containing hello."},
 {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"echo hello > hello.txt && ls\"}"}}],
  "extra": {"response": {"id": "r1", "model": "deepseek-chat", "choices": [{"finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 100, "completion_tokens": 10}}}},
 {"role": "tool", "tool_call_id": "call_1", "content": "README\nhello.txt", "extra": {"returncode": 0, "raw_output": "README\nhello.txt\n"}},
 {"role": "assistant", "content": "", "tool_calls": [{"id": "call_2", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\"}"}}],
  "extra": {"response": {"id": "r2", "model": "deepseek-chat", "choices": [{"finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 150, "completion_tokens": 5}}}},
 {"role": "exit", "content": ""}]}`

// TestEvalRunCompareFreezeReplay runs a suite of one case with its
// recording in the Linux sandbox: trials, an injected provider fault
// (retried, not the agent's), compare, replay without divergence, ATIF,
// freeze and the frozen case's verdict reproduced.
func TestEvalRunCompareFreezeReplay(t *testing.T) {
	setup(t)
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	for _, args := range [][]string{{"init", "-q", repo}, {"-C", repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "start"}} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(repo, "README"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"-C", repo, "add", "README"}, {"-C", repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "readme"}} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	suite := filepath.Join(dir, "suite")
	if err := os.MkdirAll(suite, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(suite, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("hello.traj.json", evalTrajectory)
	write("hello.toml", `recordings = ["hello.traj.json"]
[workspace]
git = "`+repo+`"
[[check]]
file = "hello.txt"
contains = "hello"
[[check]]
run = "grep -q hello hello.txt && echo PASSED t::hello"
passed = ["t::hello"]
`)
	// An id that would leave $KEEL_HOME/evals is refused before anything runs.
	if code, _, errOut := keel(t, "eval", "run", suite, "--name", "../../escape"); code != 2 || !strings.Contains(errOut, "evaluation id") {
		t.Errorf("eval run --name ../../escape: exit %d\n%s", code, errOut)
	}
	code, out, errOut := keel(t, "eval", "run", suite, "--trials", "2", "--concurrency", "2", "--name", "e1", "--keep")
	e1Err := errOut
	if code != 0 || !strings.Contains(out, "success 100%  (2/2 scored") || !strings.Contains(out, "pass^2 100%") {
		t.Fatalf("eval run: exit %d\n%s\n%s", code, out, errOut)
	}
	home := os.Getenv("KEEL_HOME")
	b, err := os.ReadFile(filepath.Join(home, "evals", "e1", "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Trials []struct {
			RunID string `json:"run_id"`
		} `json:"trials"`
	}
	if err := json.Unmarshal(b, &res); err != nil || len(res.Trials) != 2 {
		t.Fatalf("result.json: %v %s", err, b)
	}
	if page, err := os.ReadFile(filepath.Join(home, "evals", "e1", "report.html")); err != nil || !strings.Contains(string(page), "<svg") {
		t.Errorf("report.html: %v", err)
	}
	run := res.Trials[0].RunID

	t.Setenv("KEEL_DEBUG", "eval_fault=provider@1")
	code, out, errOut = keel(t, "eval", "run", suite, "--trials", "1", "--name", "e2")
	if code != 0 || !strings.Contains(out, "success 100%  (1/1 scored") || !strings.Contains(out, "1 attempts retried after an infrastructure error") || !strings.Contains(out, "injected provider fault") {
		t.Fatalf("eval run with a provider fault: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Setenv("KEEL_DEBUG", "")

	code, out, errOut = keel(t, "eval", "compare", "e1", "e2")
	if code != 0 || !strings.Contains(out, "within the noise") {
		t.Errorf("compare: exit %d\n%s\n%s", code, out, errOut)
	}

	// An unknown id and a negative k are said as the API says them
	// (report 14, Q7 and Q19), exit 2.
	if code, out, errOut := keel(t, "eval", "report", "nosuch"); code != 2 || out != "" || errOut != "keel: no evaluation nosuch\n" {
		t.Errorf("report of an unknown id: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := keel(t, "eval", "report", "e1", "--pass-k", "-1"); code != 2 || errOut != "keel: k -1: want a number >= 0 (0: the trials)\n" {
		t.Errorf("report --pass-k -1: exit %d\n%s", code, errOut)
	}

	code, out, errOut = keel(t, "runs", "replay", run)
	if code != 0 || !strings.Contains(out, "no divergence") {
		t.Errorf("runs replay: exit %d\n%s\n%s", code, out, errOut)
	}

	code, out, errOut = keel(t, "runs", "export", "--atif", run)
	if code != 0 || !strings.Contains(out, `"schema_version": "ATIF-v1.4"`) {
		t.Errorf("runs export --atif: exit %d\n%.300s\n%s", code, out, errOut)
	}

	frozen := filepath.Join(dir, "frozen")
	code, out, errOut = keel(t, "eval", "freeze", run, "-o", frozen, "--check", "grep -q hello hello.txt", "--patch")
	if code != 0 || !strings.Contains(out, "verdict passed") {
		// What the trials' checkpoints held, and what eval run said.
		for _, tr := range res.Trials {
			_, cps, cpErr := keel(t, "runs", "checkpoints", tr.RunID)
			_, show, _ := keel(t, "runs", "show", tr.RunID)
			t.Logf("trial run %s checkpoints:\n%s%s\n%s", tr.RunID, cps, cpErr, show)
		}
		t.Logf("eval run e1 said:\n%s", e1Err)
		t.Fatalf("freeze: exit %d\n%s\n%s", code, out, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(frozen, "case.toml")); err != nil || !strings.Contains(string(b), "max_steps = 500") || !strings.Contains(string(b), `timeout = "12h0m0s"`) {
		t.Errorf("the frozen case lost the run's limits (500 steps, 12h): %v\n%s", err, b)
	}
	code, out, errOut = keel(t, "eval", "run", frozen, "--name", "e3")
	if code != 0 || !strings.Contains(out, "expected verdicts reproduced: 1 of 1") {
		t.Errorf("frozen case: exit %d\n%s\n%s", code, out, errOut)
	}

	// The same numbers on the server of this KEEL_HOME, and keel eval
	// list alike on both (Q7).
	srv := startServe(t)
	c := srv.apiClient(t)
	code, listed, errOut := keel(t, "eval", "list")
	if code != 0 || !strings.Contains(listed, "EVAL") || !strings.Contains(listed, "e1 ") || !strings.Contains(listed, "e2 ") || !strings.Contains(listed, "e3 ") {
		t.Errorf("eval list: exit %d\n%s%s", code, listed, errOut)
	}
	if code, out, errOut := keel(t, "--server", srv.url, "eval", "list"); code != 0 || out != listed {
		t.Errorf("--server eval list: exit %d\n%s%s\nwant the local list:\n%s", code, out, errOut, listed)
	}
	if code, _, errOut := keel(t, "--server", srv.url, "eval", "report", "e1"); code != 2 || !strings.Contains(errOut, "/ui/evals/e1") {
		t.Errorf("--server eval report: exit %d, want 2 naming the server's report\n%s", code, errOut)
	}
	list, err := c.Evals(t.Context())
	if err != nil || len(list.Evals) != 3 || len(list.Unreadable) != 0 {
		t.Fatalf("GET /v1/evals: %+v, %v", list, err)
	}
	rep, err := c.Eval(t.Context(), "e2", 0)
	if err != nil || rep.Eval.Overall.Passed != 1 || rep.Eval.Overall.Retried != 1 || len(rep.Trials) != 1 || len(rep.Trials[0].Retried) != 1 ||
		!strings.Contains(rep.Trials[0].Retried[0].Error, "injected provider fault") {
		t.Errorf("GET /v1/evals/e2: %+v, %v", rep, err)
	}
	if rep, err := c.Eval(t.Context(), "e1", 0); err != nil || rep.Eval.Overall.Scored != 2 || rep.Eval.Overall.PassHatK == nil || *rep.Eval.Overall.PassHatK != 1 || rep.Trials[0].RunID != run {
		t.Errorf("GET /v1/evals/e1: %+v, %v", rep, err)
	}
}
