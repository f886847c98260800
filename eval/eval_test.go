package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-3 }

func TestWilson(t *testing.T) {
	for _, tc := range []struct {
		k, n   int
		lo, hi float64
	}{
		{0, 0, 0, 0},
		{5, 5, 0.5655, 1},
		{0, 5, 0, 0.4345},
		{50, 100, 0.4038, 0.5962},
		{81, 263, 0.2553, 0.3662},
	} {
		lo, hi := Wilson(tc.k, tc.n)
		if !near(lo, tc.lo) || !near(hi, tc.hi) {
			t.Errorf("Wilson(%d, %d) = %.4f, %.4f; want %.4f, %.4f", tc.k, tc.n, lo, hi, tc.lo, tc.hi)
		}
	}
}

func TestPassAtKAndHat(t *testing.T) {
	for _, tc := range []struct {
		n, c, k  int
		at, hatk float64
	}{
		{5, 5, 5, 1, 1},
		{5, 4, 5, 1, 0},
		{5, 4, 1, 0.8, 0.8},
		{5, 2, 2, 0.7, 0.1},
		{5, 0, 3, 0, 0},
		{10, 3, 3, 1 - 35.0/120, 1.0 / 120},
	} {
		if got := PassAtK(tc.n, tc.c, tc.k); !near(got, tc.at) {
			t.Errorf("PassAtK(%d,%d,%d) = %.4f, want %.4f", tc.n, tc.c, tc.k, got, tc.at)
		}
		if got := PassHatK(tc.n, tc.c, tc.k); !near(got, tc.hatk) {
			t.Errorf("PassHatK(%d,%d,%d) = %.4f, want %.4f", tc.n, tc.c, tc.k, got, tc.hatk)
		}
	}
	if !math.IsNaN(PassAtK(3, 1, 4)) {
		t.Error("PassAtK with k > n should be NaN")
	}
}

func TestDiffInterval(t *testing.T) {
	// Newcombe (1998), example: 56/70 vs 48/80 → diff 0.2, CI 0.0524 to 0.3339.
	d, lo, hi := DiffInterval(48, 80, 56, 70)
	if !near(d, 0.2) || !near(lo, 0.0524) || !near(hi, 0.3339) {
		t.Errorf("DiffInterval = %.4f [%.4f, %.4f], want 0.2 [0.0524, 0.3339]", d, lo, hi)
	}
	// Identical small samples: the interval contains 0.
	if _, lo, hi := DiffInterval(3, 5, 4, 5); lo > 0 || hi < 0 {
		t.Errorf("3/5 vs 4/5: interval [%f, %f] should contain 0", lo, hi)
	}
}

func TestLoadCaseFilesAndSuite(t *testing.T) {
	fsys := fstest.MapFS{
		"s/suite.toml": {Data: []byte(`name = "demo"
[defaults]
env = ["A=1"]
mount_path = "/src"
[sources]
"org/repo" = "/mirrors/repo"
[[case]]
name = "inline"
task = "say hi"
[[case.check]]
file = "hi.txt"
contains = "hi"
`)},
		"s/b.toml": {Data: []byte(`task = "fix it"
env = ["B=2"]
[workspace]
repo = "org/repo"
commit = "abc"
[[check]]
run = "pytest -rA"
passed = ["t::a"]
[[check]]
patch = "diff --git a/x b/x"
`)},
		"s/harbor-task/task.toml":              {Data: []byte("[verifier]\ntimeout_sec = 120.0\n[agent]\ntimeout_sec = 600.0\n")},
		"s/harbor-task/instruction.md":         {Data: []byte("Write hello.txt containing hello.\n")},
		"s/harbor-task/tests/test.sh":          {Data: []byte("#!/bin/bash\ngrep -q hello /app/hello.txt && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n")},
		"s/harbor-task/environment/Dockerfile": {Data: []byte("FROM debian\n")},
		"s/harbor-task/environment/seed.txt":   {Data: []byte("seed\n")},
	}
	s, err := Load(fsys, "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "demo" || len(s.Cases) != 3 {
		t.Fatalf("suite %q with %d cases, want demo with 3", s.Name, len(s.Cases))
	}
	b, h, in := s.Cases[0], s.Cases[1], s.Cases[2]
	if b.Name != "b" || b.Workspace.Git != "/mirrors/repo" || b.Workspace.MountPath != "/src" || strings.Join(b.Env, ",") != "A=1,B=2" {
		t.Errorf("case b = %+v", b)
	}
	if h.Name != "harbor-task" || h.Workspace.MountPath != "/app" || h.Workspace.Files != "environment" || time.Duration(h.Timeout) != 10*time.Minute {
		t.Errorf("harbor case = %+v", h)
	}
	if sh := h.Checks[0].Files["test.sh"]; !strings.Contains(sh, ".keel-eval/logs/verifier/reward.txt") {
		t.Errorf("harbor test.sh not rewritten: %s", sh)
	}
	if in.Name != "inline" || in.Checks[0].File != "hi.txt" {
		t.Errorf("inline case = %+v", in)
	}
	for _, bad := range []struct{ name, file, want string }{
		{"nochecks", "task = \"x\"\n", "no checks"},
		{"twokinds", "task = \"x\"\n[[check]]\nrun = \"true\"\nfile = \"a\"\n", "exactly one"},
		{"unknown", "task = \"x\"\ncolour = 1\n[[check]]\nrun = \"true\"\n", "unknown key"},
		{"nosource", "task = \"x\"\n[workspace]\nrepo = \"o/r\"\n[[check]]\nrun = \"true\"\n", "--source o/r=DIR"},
	} {
		_, err := Load(fstest.MapFS{bad.name + ".toml": {Data: []byte(bad.file)}}, bad.name+".toml", nil)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: error %v, want one containing %q", bad.name, err, bad.want)
		}
	}
}

func TestImportSWEBench(t *testing.T) {
	s, err := Load(os.DirFS("../testdata/trajectories"), ".", &LoadOptions{Sources: map[string]string{"marshmallow-code/marshmallow": "/m"}})
	if err != nil {
		t.Fatal(err)
	}
	c := s.Cases[0]
	if c.Name != "marshmallow-code__marshmallow-1359" || c.Workspace.Git != "/m" || c.Workspace.Commit != "b40a0f4e33823e6d0f341f7e8684e359a99060d1" || c.Workspace.MountPath != "/testbed" {
		t.Fatalf("case = %+v", c)
	}
	if len(c.Recordings) < 2 || c.Recordings[0] != "deepseek_chat_dev.traj.json" || !strings.Contains(c.Task, "DateTime") {
		t.Errorf("recordings %v, task %.80q", c.Recordings, c.Task)
	}
	ch := c.Checks[0]
	if !strings.Contains(ch.Run, "git apply .keel-eval/test.patch") || !strings.Contains(ch.Run, "pytest -rA tests/test_fields.py") || len(ch.Passed) < 2 || ch.Files["test.patch"] == "" {
		t.Errorf("check = %+v", ch)
	}
}

func TestNotPassedAndPatch(t *testing.T) {
	out := "PASSED tests/a.py::t6[a-Missing data.]\nPASSED tests/a.py::t1\nFAILED tests/a.py::t2 - assert\nPASSED tests/a.py::t3[x-y]\ntests/b.py::t4 PASSED [ 50%]\n"
	got := notPassed(out, []string{"tests/a.py::t1", "tests/a.py::t2", "tests/a.py::t3[x-y]", "tests/b.py::t4", "tests/a.py::t5", "tests/a.py::t6[a-Missing"})
	if strings.Join(got, ",") != "tests/a.py::t2,tests/a.py::t5" {
		t.Errorf("notPassed = %v", got)
	}
	ok, _ := samePatch("diff --git a/x b/x\nindex 1..2 100644\n--- a/x\n+++ b/x\n", "diff --git a/x b/x\nindex 3..4 100644\n--- a/x  \n+++ b/x\n")
	if !ok {
		t.Error("patches differing in index lines and trailing blanks should match")
	}
	if ok, d := samePatch("a\nb\n", "a\nc\n"); ok || !strings.Contains(d, "line 2") {
		t.Errorf("samePatch differing = %v %q", ok, d)
	}
}

// fakeExec journals each trial as a run with the given events and runs
// the checks with bash on the host (the real sandbox is the command
// line's; this tests the runner's orchestration and classification).
type fakeExec struct {
	store journal.Store
	mu    sync.Mutex
	n     int
	// fail makes attempt Seq fail on the infrastructure: "exec" returns
	// an error, "provider" journals a provider failure, "sandbox" a
	// result the runtime could not produce.
	fail map[int]string
	// write is written to hello.txt in the workspace by passing trials
	// (trial numbers in pass).
	pass map[int]bool
}

func (f *fakeExec) Execute(ctx context.Context, tr *TrialRun) (string, error) {
	if f.fail[tr.Seq] == "exec" {
		return "", errors.New("sandbox: cannot create user namespace (injected)")
	}
	f.mu.Lock()
	f.n++
	id := fmt.Sprintf("%s-run%02d", tr.Labels["eval.id"], f.n)
	f.mu.Unlock()
	if f.pass[tr.Trial] {
		if err := os.WriteFile(filepath.Join(tr.Workspace, "hello.txt"), []byte("hello\n"), 0o644); err != nil {
			return "", err
		}
	}
	now := time.Unix(1000, 0)
	var drafts []journal.Draft
	add := func(typ journal.Type, v any) {
		b, _ := json.Marshal(v)
		now = now.Add(time.Second)
		drafts = append(drafts, journal.Draft{Type: typ, Time: now, Payload: b})
	}
	add(journal.RunCreated, &agent.RunCreated{Task: tr.Case.Task, Model: tr.Model, Labels: tr.Labels, Workspace: tr.Workspace})
	calls := []model.ToolCall{{ID: "c1", Name: "bash", Arguments: `{"command":"echo hi"}`}, {ID: "c2", Name: "nope", Arguments: `{}`}, {ID: "c3", Name: "bash", Arguments: `{"command":"rm -rf /"}`}}
	add(journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, ToolCalls: calls}, Usage: model.Usage{InputTokens: 100, OutputTokens: 10}, Cost: 0.01})
	add(journal.GateDecided, &agent.GateDecided{CallID: "c1", Tool: "bash", Decision: policy.Decision{Effect: policy.Allow}})
	add(journal.GateDecided, &agent.GateDecided{CallID: "c2", Tool: "nope", Decision: policy.Decision{Effect: policy.Deny, Policies: []string{agent.PolicyValidate}, Reason: `unknown tool "nope"`}})
	add(journal.GateDecided, &agent.GateDecided{CallID: "c3", Tool: "bash", Decision: policy.Decision{Effect: policy.Ask}})
	add(journal.ApprovalRequested, &agent.ApprovalRequested{CallID: "c3", Tool: "bash"})
	add(journal.ApprovalResolved, &agent.ApprovalResolved{CallID: "c3", Decision: policy.Deny, By: "keel-eval"})
	add(journal.ToolStarted, &agent.ToolStarted{CallID: "c1", Tool: "bash"})
	res := tool.Result{Content: "hi"}
	if f.fail[tr.Seq] == "sandbox" {
		res = tool.Result{IsError: true, Content: runtimeFailure + ": sandbox: exec: injected fault"}
	}
	add(journal.ToolFinished, &agent.ToolFinished{CallID: "c1", Tool: "bash", Result: res})
	if f.fail[tr.Seq] == "provider" {
		add(journal.ModelFailed, &agent.ModelFailed{Kind: model.KindRetryable.String(), Message: "503 overloaded (injected)"})
		add(journal.RunFailed, &agent.RunEnded{Reason: agent.ReasonModelError})
	} else {
		add(journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, Content: "done"}, Usage: model.Usage{InputTokens: 200, OutputTokens: 5}, Cost: 0.02})
		add(journal.RunCompleted, &agent.RunEnded{Reason: agent.ReasonAnswer, Output: "done"})
	}
	if _, err := f.store.Append(ctx, id, 0, drafts...); err != nil {
		return "", err
	}
	err := tr.After(ctx, func(ctx context.Context, script string, timeout time.Duration) (int, string, error) {
		cmd := exec.CommandContext(ctx, "bash", "-c", script)
		cmd.Dir = tr.Workspace
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), out.String(), nil
		}
		return 0, out.String(), err
	})
	return id, err
}

func TestRunnerClassifiesRetriesAndReports(t *testing.T) {
	dir := t.TempDir()
	suiteDir := filepath.Join(dir, "suite")
	if err := os.MkdirAll(suiteDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(suiteDir, "hello.toml"), []byte(`task = "write hello.txt"
[[check]]
file = "hello.txt"
contains = "hello"
[[check]]
run = "test -f hello.txt && echo PASSED t::hello"
passed = ["t::hello"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Load(os.DirFS(suiteDir), ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	store := mem.New()
	// Attempt 1 fails to execute, attempt 3 (trial 2's first) meets a
	// provider fault, attempt 5 a sandbox fault: each is retried.
	fx := &fakeExec{store: store, fail: map[int]string{1: "exec", 3: "provider", 5: "sandbox"}, pass: map[int]bool{1: true, 2: true, 3: true}}
	r := &Runner{ID: "e1", Exec: fx, Store: store, Root: suiteDir, WorkDir: filepath.Join(dir, "work")}
	res, err := r.Run(context.Background(), s, Config{Model: "scripted", Trials: 5, Concurrency: 1, Retries: 2})
	if err != nil {
		t.Fatal(err)
	}
	rep := NewReport(res, 0)
	o := rep.Overall
	if o.Trials != 5 || o.Scored != 5 || o.Passed != 3 || o.Failed != 2 || o.Errored != 0 || o.Retried != 3 {
		t.Fatalf("overall = %+v", o)
	}
	if o.Asks != 5 || o.AskDenials != 5 || o.UnknownTools != 5 || o.Calls != 15 || !near(o.Valid, 10.0/15) {
		t.Errorf("validity: asks %d unknown %d calls %d valid %.3f", o.Asks, o.UnknownTools, o.Calls, o.Valid)
	}
	if o.PassAtK == nil || *o.PassAtK != 1 || o.PassHatK == nil || *o.PassHatK != 0 || o.Flaky != 1 {
		t.Errorf("pass@5 %v pass^5 %v flaky %d", o.PassAtK, o.PassHatK, o.Flaky)
	}
	// Five trials, the provider-fault attempt's first call and the
	// sandbox-fault attempt's two calls.
	if !near(res.Spent, 5*0.03+0.01+0.03) {
		t.Errorf("spent %.4f", res.Spent)
	}
	kinds := []string{}
	for _, tr := range res.Trials {
		for _, p := range tr.Retried {
			kinds = append(kinds, p.Error)
		}
	}
	if len(kinds) != 3 || !strings.Contains(kinds[0], "user namespace") || !strings.HasPrefix(kinds[1], "provider: retryable") || !strings.HasPrefix(kinds[2], "sandbox: ") {
		t.Errorf("retried attempts: %q", kinds)
	}
	// Labels tag every run.
	evs, err := store.Read(context.Background(), res.Trials[4].RunID, 1)
	if err != nil {
		t.Fatal(err)
	}
	var c agent.RunCreated
	_ = json.Unmarshal(evs[0].Payload, &c)
	if c.Labels["eval.id"] != "e1" || c.Labels["eval.case"] != "hello" || c.Labels["eval.trial"] != "5" || c.Labels["eval.config"] != "scripted" {
		t.Errorf("labels = %v", c.Labels)
	}
	var text, js, page bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "success 60%  (3/5 scored; 95% CI 23%–88%)") {
		t.Errorf("text report:\n%s", text.String())
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Overall.Passed != 3 {
		t.Errorf("JSON round trip: %v %+v", err, back.Overall)
	}
	if err := WriteHTML(&page, nil, rep); err != nil {
		t.Fatal(err)
	}
	if p := page.String(); !strings.Contains(p, "<svg") || strings.Contains(p, "http://") || strings.Contains(p, "https://") || strings.Contains(p, "<script") {
		t.Errorf("HTML page must have inline SVG and no external asset")
	}

	// Budget: nothing starts once it is spent.
	fx2 := &fakeExec{store: store, pass: map[int]bool{}}
	r2 := &Runner{ID: "e2", Exec: fx2, Store: store, Root: suiteDir, WorkDir: filepath.Join(dir, "work2")}
	res2, err := r2.Run(context.Background(), s, Config{Model: "scripted", Trials: 4, Budget: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	rep2 := NewReport(res2, 0)
	if rep2.Overall.Scored != 2 || rep2.Overall.Skipped != 2 {
		t.Errorf("budget 0.05 at 0.03 a trial: scored %d skipped %d, want 2 and 2", rep2.Overall.Scored, rep2.Overall.Skipped)
	}
	cmp := Compare(rep, rep2)
	var ct bytes.Buffer
	if err := cmp.WriteText(&ct); err != nil {
		t.Fatal(err)
	}
	if cmp.Significant || !strings.Contains(ct.String(), "within the noise") {
		t.Errorf("3/5 vs 0/2 should be within the noise:\n%s", ct.String())
	}
}
