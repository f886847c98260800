package server_test

import (
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/eval"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// testEvals is a service.EvalHost holding results in memory.
type testEvals map[string]*eval.Result

func (h testEvals) EvalIDs() ([]string, error) {
	var ids []string
	for id := range h {
		ids = append(ids, id)
	}
	return append(ids, "not-an-eval"), nil // a directory with no result
}

func (h testEvals) EvalResult(id string) (*eval.Result, error) {
	if r, ok := h[id]; ok {
		return r, nil
	}
	return nil, fmt.Errorf("%s: %w", id, fs.ErrNotExist)
}

func evalResult(id string, started time.Time) *eval.Result {
	u := func(calls, asks int, cost float64) *eval.Usage {
		return &eval.Usage{Status: "completed", Reason: "done", Steps: calls + 1, Calls: calls, Asks: asks, SchemaErrors: 0, Cost: cost, InputTokens: 1000, OutputTokens: 100, WallMS: 2000}
	}
	return &eval.Result{ID: id, Suite: "marsh", Config: eval.Config{Name: "recorded", Model: "recorded", Approve: "deny", Trials: 2},
		Started: started, Finished: started.Add(time.Minute), Cases: []string{"a", "b"}, Spent: 0.04,
		Trials: []*eval.Trial{
			{Case: "a", Trial: 1, Attempt: 1, RunID: "run-a1", Verdict: eval.Passed, Usage: u(4, 0, 0.01)},
			{Case: "a", Trial: 2, Attempt: 2, RunID: "run-a2", Verdict: eval.Passed, Usage: u(4, 0, 0.01),
				Retried: []*eval.Trial{{Case: "a", Trial: 2, Attempt: 1, RunID: "run-a2x", Verdict: eval.Infra, Error: "injected provider fault"}}},
			{Case: "b", Trial: 1, Attempt: 1, RunID: "run-b1", Verdict: eval.Passed, Usage: u(6, 1, 0.01)},
			{Case: "b", Trial: 2, Attempt: 1, RunID: "run-b2", Verdict: eval.Failed, Usage: u(6, 1, 0.01),
				Checks: []eval.CheckResult{{Name: "tests", Detail: "exit status 1"}}},
		}}
}

// Evaluations kept on the server's machine: an admin lists them and
// reads a report with the numbers keel eval report prints, through the
// API, the Go client and the web UI (with the static HTML report); any
// other token is refused.
func TestEvals(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	e := newEnv(t, &envOptions{opts: func(o *service.Options) {
		o.Evals = testEvals{"ev-old": evalResult("ev-old", t0), "ev-new": evalResult("ev-new", t0.Add(time.Hour))}
	}})
	ctx := t.Context()
	list, err := e.admin.Evals(ctx)
	if err != nil || len(list.Evals) != 2 || list.Evals[0].ID != "ev-new" || list.Evals[1].ID != "ev-old" {
		t.Fatalf("evals = %+v, %v", list, err)
	}
	o := list.Evals[0].Overall
	if o.Passed != 3 || o.Scored != 4 || o.Rate != 0.75 || o.K != 2 || o.PassHatK == nil || *o.PassHatK != 0.5 || o.Retried != 1 || o.Errored != 0 ||
		o.Calls != 20 || o.Valid != 1 || o.Asks != 2 || o.Cost.Mean != 0.01 || list.Evals[0].Cases != 2 {
		t.Errorf("overall = %+v", o)
	}
	rep, err := e.admin.Eval(ctx, "ev-new", 1)
	if err != nil || len(rep.Cases) != 2 || len(rep.Trials) != 4 || rep.Eval.Overall.K != 1 {
		t.Fatalf("eval = %+v, %v", rep, err)
	}
	if b := rep.Trials[3]; b.Verdict != "failed" || len(b.FailedChecks) != 1 || b.FailedChecks[0] != "tests: exit status 1" {
		t.Errorf("failed trial = %+v", b)
	}
	if a := rep.Trials[1]; len(a.Retried) != 1 || a.Retried[0].RunID != "run-a2x" {
		t.Errorf("retried trial = %+v", a)
	}
	for _, tc := range []struct {
		id, code string
	}{{"ev-none", api.CodeNotFound}, {".hidden", api.CodeInvalidRequest}} {
		if _, err := e.admin.Eval(ctx, tc.id, 0); !isCode(err, tc.code) {
			t.Errorf("eval %q: %v, want %s", tc.id, err, tc.code)
		}
	}
	if code, body := e.raw(http.MethodGet, "/v1/evals/ev-new?k=-1", e.secret, ""); code != http.StatusBadRequest || !strings.Contains(body, `"k -1: want a number \u003e= 0 (0: the trials)"`) && !strings.Contains(body, `"k -1: want a number >= 0 (0: the trials)"`) {
		t.Errorf("k=-1 = %d %s", code, body)
	}
	reader := e.client(e.newToken("reader", nil, api.ScopeRunsRead))
	if _, err := reader.Evals(ctx); !isCode(err, api.CodeForbidden) {
		t.Errorf("evals with a token that is not an admin's: %v", err)
	}

	code, body := e.uiGet("/ui/evals", e.secret)
	if code != http.StatusOK || !strings.Contains(body, `data-id="ev-new"`) || !strings.Contains(body, "75%") || !strings.Contains(body, "pass^2 50%") {
		t.Errorf("/ui/evals = %d\n%s", code, body)
	}
	code, body = e.uiGet("/ui/evals/ev-new", e.secret)
	for _, want := range []string{"75% (3/4 scored; 95% CI", "1 attempts retried after an infrastructure error", "valid 100%", "check tests: exit status 1", "injected provider fault", `href="/ui/runs/run-b2"`} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("/ui/evals/ev-new = %d, lacks %q\n%s", code, want, body)
		}
	}
	code, body, resp := e.uiResp(http.MethodGet, "/ui/evals/ev-new/report.html", e.secret, nil, "same-origin")
	if code != http.StatusOK || !strings.Contains(body, "<svg") || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("report.html = %d %v\n%.300s", code, resp.Header, body)
	}
	readerSecret := e.newToken("reader2", nil, api.ScopeRunsRead)
	if code, _ := e.uiGet("/ui/evals", readerSecret); code != http.StatusForbidden {
		t.Errorf("/ui/evals as a reader = %d", code)
	}
}
