package tui

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/view"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/tool"
)

// The running total on each step line includes the summary calls of
// compactions (failed attempts included), so the last step line agrees
// with the final line: the report saw "total 56,405 tok $0.0601" on the
// last step and "96,565 tok · $0.1016" at the end.
func TestStepTotalsCountSummaryCalls(t *testing.T) {
	var errOut, out bytes.Buffer
	p := &Printer{err: &errOut, out: &out, rows: view.NewReader(true), Keel: "keel"}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	seq := int64(0)
	emit := func(typ journal.Type, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		seq++
		p.Event(journal.Event{RunID: "r1", Seq: seq, Time: at, Type: typ, Payload: b})
	}
	emit(journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, Content: "one"}, Usage: model.Usage{InputTokens: 3000, OutputTokens: 50}, Cost: 0.0035})
	failed := model.Usage{InputTokens: 5000, OutputTokens: 2000}
	emit(journal.ContextCompacted, &agent.ContextCompacted{From: 1, To: 2, FirstStep: 1, LastStep: 1, Summary: "s", Mechanical: true, Reason: "threshold",
		Attempts: []agent.SummaryAttempt{{Kind: "empty", Usage: &failed, Cost: 0.025}, {Kind: "empty", Usage: &failed, Cost: 0.025}},
		Usage:    failed.Add(failed), Cost: 0.05})
	emit(journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, Content: "two"}, Usage: model.Usage{InputTokens: 4000, OutputTokens: 50}, Cost: 0.0045})
	var got []string
	for _, m := range regexp.MustCompile(`(?m)^step \d+ .* total (.*)$`).FindAllStringSubmatch(errOut.String(), -1) {
		got = append(got, m[1])
	}
	want := []string{"3,050 tok $0.0035", "21,100 tok $0.0580"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("step totals (-want +got):\n%s\n%s", diff, errOut.String())
	}
}

// The hint after a limit stop names a value above both the limit and
// what the run already used: a run passes a token or cost limit by a
// whole model call, and half a fix would stop the resumed run at once.
func TestContinueHintExceedsUsage(t *testing.T) {
	for _, tt := range []struct {
		name, reason, want string
		st                 agent.State
	}{
		{"steps", "max_steps", "--max-steps 6", agent.State{Limits: agent.Limits{MaxSteps: 3}, Steps: 3}},
		{"tokens over", "max_tokens", "--max-tokens 220", agent.State{Limits: agent.Limits{MaxTokens: 50}, Usage: model.Usage{InputTokens: 100, OutputTokens: 10}}},
		{"tokens at", "max_tokens", "--max-tokens 200", agent.State{Limits: agent.Limits{MaxTokens: 100}, Usage: model.Usage{InputTokens: 90, OutputTokens: 10}}},
		{"cost over", "max_cost", "--max-cost 0.22", agent.State{Limits: agent.Limits{MaxCost: 0.01}, Cost: 0.11}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := continueHint("keel --db /x/k.db", "R", tt.reason, &tt.st)
			if want := "keel --db /x/k.db runs resume R " + tt.want; !strings.HasSuffix(got, want) {
				t.Errorf("continueHint = %q, want it to end %q", got, want)
			}
		})
	}
}

// keel run's printer and keel runs show's timeline say how they show
// every event type (a new one fails here until they do).
func TestEveryEventTypePrinted(t *testing.T) {
	if err := view.Check(printRows); err != nil {
		t.Errorf("printRows: %v", err)
	}
	if err := view.Check(showRows); err != nil {
		t.Errorf("showRows: %v", err)
	}
}

// A client that retries opens a tunnel per attempt: identical decisions
// of the egress proxy in a row print once, then as a count (fresh-user
// trial 3: 30 identical "network: allowed" lines for one wget).
func TestEgressRepeatsCollapse(t *testing.T) {
	var errOut, out bytes.Buffer
	p := &Printer{err: &errOut, out: &out, rows: view.NewReader(true), Keel: "keel"}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	seq := int64(0)
	emit := func(typ journal.Type, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		seq++
		p.Event(journal.Event{RunID: "r1", Seq: seq, Time: at, Type: typ, Payload: b})
	}
	allowed := &agent.SandboxEgress{Phase: "agent", Host: "localhost", Port: 8767, Allowed: true, Method: "CONNECT"}
	refused := &agent.SandboxEgress{Phase: "agent", Host: "example.com", Port: 443, Reason: "not in the run's allowed hosts", Method: "CONNECT"}
	for range 30 {
		emit(journal.SandboxEgress, allowed)
	}
	emit(journal.SandboxEgress, refused)
	emit(journal.SandboxEgress, allowed)
	emit(journal.SandboxEgress, allowed)
	emit(journal.ToolFinished, &agent.ToolFinished{CallID: "call_1", Tool: "bash"})
	var got []string
	for _, l := range strings.Split(errOut.String(), "\n") {
		if strings.Contains(l, "network:") {
			got = append(got, strings.TrimSpace(l))
		}
	}
	want := []string{
		"network: allowed localhost:8767 (agent phase)",
		"network: the same again, 29 more times",
		"network: refused example.com:443 (agent phase): not in the run's allowed hosts",
		"network: allowed localhost:8767 (agent phase)",
		"network: the same again, 1 more time",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("network lines (-want +got):\n%s\n%s", diff, errOut.String())
	}
}

// A model error is printed once: the end line refers to it, also when
// the end adds the provider's wait, which the line after it says
// (fresh-user trial 6, F14: the message twice in full, the wait three
// times).
func TestModelErrorPrintedOnce(t *testing.T) {
	var errOut, out bytes.Buffer
	p := &Printer{err: &errOut, out: &out, rows: view.NewReader(true), Keel: "keel"}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	msg := "model openai: rate_limited (HTTP 429): rate_limit: Rate limit reached, retry later (the provider asked to wait 1h0m0s before the next request)"
	b, _ := json.Marshal(&agent.ModelFailed{Kind: "rate_limited", Message: msg})
	p.Event(journal.Event{RunID: "r1", Seq: 2, Time: at, Type: journal.ModelFailed, Payload: b})
	retry := time.Now().Add(time.Hour).UTC()
	p.Footer("r1", &agent.Outcome{Status: journal.StatusFailed, State: &agent.State{}, End: &agent.RunEnded{Reason: "model_error", Message: msg + "; it can be resumed after " + retry.Format("2006-01-02 15:04:05 UTC"), RetryAt: &retry}})
	got := errOut.String()
	if n := strings.Count(got, "Rate limit reached"); n != 1 {
		t.Errorf("the model error is printed %d times, want once:\n%s", n, got)
	}
	if !strings.Contains(got, "failed (model_error, above)") || !strings.Contains(got, "go on then with: keel runs resume r1") || strings.Contains(got, "can be resumed after") {
		t.Errorf("end lines:\n%s", got)
	}
}

// A resume prints a line only when it changed something: after an
// approval or at the next turn the run simply goes on (the tester saw a
// bare "resumed" line after every approval).
func TestResumedSaysWhatChanged(t *testing.T) {
	for _, tt := range []struct {
		name string
		x    agent.RunResumed
		want string
	}{
		{"after a decision", agent.RunResumed{Model: "scripted:demo"}, ""},
		{"by a person", agent.RunResumed{Model: "m", By: "alice"}, ""},
		{"interrupted", agent.RunResumed{Interrupted: []string{"call_1"}}, "keel: resumed: calls a stop interrupted were repaired (call_1)\n"},
		{"handoff and steps", agent.RunResumed{Handoff: true, Limits: &agent.Limits{MaxSteps: 9}},
			"keel: resumed: a handoff: the next step starts a fresh context from a summary; limits " + (&agent.Limits{MaxSteps: 9}).String() + "\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var errOut, out bytes.Buffer
			p := &Printer{err: &errOut, out: &out, rows: view.NewReader(true), Keel: "keel"}
			b, err := json.Marshal(&tt.x)
			if err != nil {
				t.Fatal(err)
			}
			p.Event(journal.Event{RunID: "r1", Seq: 5, Time: time.Now(), Type: journal.RunResumed, Payload: b})
			if got := errOut.String(); got != tt.want {
				t.Errorf("printed %q, want %q", got, tt.want)
			}
		})
	}
}

// A run a person canceled (Ctrl-C) ends with one line that says so once,
// "canceled (by user)", not "canceled (user: canceled by user)", and how
// to resume it (trial 6, F32).
func TestCanceledLineSaysItOnce(t *testing.T) {
	for _, quiet := range []bool{false, true} {
		var errOut, out bytes.Buffer
		p := &Printer{err: &errOut, out: &out, rows: view.NewReader(true), Keel: "keel", quiet: quiet}
		p.Footer("r1", &agent.Outcome{Status: journal.StatusCanceled, State: &agent.State{}, End: &agent.RunEnded{Reason: agent.ReasonUser, Message: "canceled by user"}})
		got := errOut.String()
		if !strings.Contains(got, "keel: run r1 canceled (by user)") || strings.Contains(got, "user: canceled") {
			t.Errorf("quiet %v: end lines:\n%s", quiet, got)
		}
		if !quiet && !strings.Contains(got, "keel: resume with: keel runs resume r1") {
			t.Errorf("no resume hint:\n%s", got)
		}
	}
}

// A call the policy denies is said once, by its result, with the reason
// (fresh-user trial 10: without a terminal, a "deny CALL: REASON" line
// came first and the result repeated the same reason).
func TestDenialSaidOnce(t *testing.T) {
	var errOut, out bytes.Buffer
	p := &Printer{err: &errOut, out: &out, rows: view.NewReader(true), Keel: "keel"}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	seq := int64(0)
	emit := func(typ journal.Type, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		seq++
		p.Event(journal.Event{RunID: "r1", Seq: seq, Time: at, Type: typ, Payload: b})
	}
	const reason = ".git/hooks/pre-commit: path is protected (REASON-MARK)"
	emit(journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant,
		ToolCalls: []model.ToolCall{{ID: "c1", Name: "write_file", Arguments: `{"path":".git/hooks/pre-commit","content":"x"}`}}}})
	d := &agent.GateDecided{CallID: "c1", Tool: "write_file"}
	d.Effect, d.Reason = "deny", reason
	emit(journal.GateDecided, d)
	emit(journal.ToolFinished, &agent.ToolFinished{CallID: "c1", Tool: "write_file", Synthetic: true, Result: tool.Result{IsError: true, Content: "the policy denied this call: " + reason}})
	got := errOut.String()
	if n := strings.Count(got, "REASON-MARK"); n != 1 {
		t.Errorf("the denial's reason is printed %d times, want once:\n%s", n, got)
	}
	if !strings.Contains(got, "✗ write_file .git/hooks/pre-commit: the policy denied this call: "+reason) {
		t.Errorf("the denied call's result is not said:\n%s", got)
	}
}

// A step's text comes before its step line, as docs/interactive.md shows
// and a streamed answer prints it: each step line closes its step.
func TestStepLineFollowsText(t *testing.T) {
	var stderr, stdout bytes.Buffer
	p := NewPrinter(&stderr, &stdout, false, false)
	b, _ := json.Marshal(&agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, Content: "I will look first."}})
	p.Event(journal.Event{RunID: "r1", Seq: 2, Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Type: journal.ModelResponded, Payload: b})
	text, step := strings.Index(stderr.String(), "I will look first."), strings.Index(stderr.String(), "step 1 ·")
	if text < 0 || step < 0 || text > step {
		t.Errorf("want the text, then the step line:\n%s", stderr.String())
	}
}
