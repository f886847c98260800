package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool"
)

// hasMessage reports whether req carries a user message with exactly
// content, and where.
func hasMessage(req *model.Request, content string) int {
	for i, m := range req.Messages {
		if m.Role == model.RoleUser && m.Content == content {
			return i
		}
	}
	return -1
}

// roles renders a request's messages as "role:content-or-call" lines.
func roles(req *model.Request) []string {
	var out []string
	for _, m := range req.Messages {
		s := string(m.Role) + ":"
		switch {
		case m.Role == model.RoleTool:
			s += m.ToolCallID
		case len(m.ToolCalls) > 0:
			s += m.ToolCalls[0].ID
		default:
			s += firstLineOf(m.Content)
		}
		out = append(out, s)
	}
	return out
}

// A message given to a run killed in the middle of a call is journaled
// with the resume; the model reads it after the repaired call's result.
func TestMessageToInterruptedRun(t *testing.T) {
	e := newEnv(t)
	id := e.create(&agent.RunCreated{})
	// The runtime died while c1 ran: tool.started, no tool.finished.
	ev := func(typ journal.Type, v any) journal.Draft {
		b, _ := json.Marshal(v)
		return journal.Draft{Type: typ, Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Payload: b}
	}
	if _, err := e.store.Append(context.Background(), id, 1,
		ev(journal.ModelResponded, &agent.ModelResponded{Message: calls(tc("c1", "write", `{"path":"a.txt","content":"x"}`))}),
		ev(journal.GateDecided, &agent.GateDecided{CallID: "c1", Tool: "write", Decision: policy.Decision{Effect: policy.Allow}}),
		ev(journal.ToolStarted, &agent.ToolStarted{CallID: "c1", Tool: "write", Arguments: json.RawMessage(`{"path":"a.txt","content":"x"}`)}),
	); err != nil {
		t.Fatal(err)
	}
	m := &script{turns: []model.Message{calls(tc("c1", "write", `{}`)), answer("done")}}
	p := e.params(m)
	p.Message = "also write b.txt"
	out, err := e.rt.Execute(context.Background(), id, p)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusCompleted {
		t.Fatalf("outcome %s %+v", out.Status, out.End)
	}
	got := types(e.events(id))[4:6]
	if diff := cmp.Diff([]string{"run.resumed", "user.message"}, got); diff != "" {
		t.Errorf("the message is not journaled with the resume (-want +got):\n%s", diff)
	}
	want := []string{"user:do the thing", "assistant:c1", "tool:c1", "user:also write b.txt"}
	if diff := cmp.Diff(want, roles(m.reqs[0])); diff != "" {
		t.Errorf("request after the resume (-want +got):\n%s", diff)
	}
	checkPairs(t, m.reqs)
}

// A message given to a run paused for an approval is journaled at once
// and reaches the model after the call is decided.
func TestMessageToRunWaitingForApproval(t *testing.T) {
	e := newEnv(t)
	id := e.create(&agent.RunCreated{})
	ask := func(ctx context.Context, c *policy.Call) policy.Decision {
		if c.Tool == "write" {
			return policy.Decision{Effect: policy.Ask, Policies: []string{"ask"}, Reason: "a person decides"}
		}
		return policy.Decision{Effect: policy.Allow}
	}
	m := &script{turns: []model.Message{calls(tc("c1", "write", `{"path":"a.txt","content":"x"}`)), answer("done")}}
	p := e.params(m)
	p.Policy = ask
	if out, err := e.rt.Execute(context.Background(), id, p); err != nil || out.Status != journal.StatusPaused {
		t.Fatalf("first execution: %v %v", out, err)
	}
	p = e.params(m)
	p.Policy, p.Message = ask, "write it in upper case"
	out, err := e.rt.Execute(context.Background(), id, p)
	if err != nil || out.Status != journal.StatusPaused {
		t.Fatalf("execution with a message: %v %v", out, err)
	}
	if n := len(out.State.Messages); out.State.Messages[n-1].Content != "write it in upper case" {
		t.Fatalf("the message is not journaled while the call waits: %+v", out.State.Messages)
	}
	if err := e.rt.Resolve(context.Background(), id, "c1", &agent.ApprovalResolved{Decision: policy.Allow, By: "ops"}); err != nil {
		t.Fatal(err)
	}
	p = e.params(m)
	p.Policy = ask
	if out, err = e.rt.Execute(context.Background(), id, p); err != nil || out.Status != journal.StatusCompleted {
		t.Fatalf("after approval: %v %v", out, err)
	}
	want := []string{"user:do the thing", "assistant:c1", "tool:c1", "user:write it in upper case"}
	if diff := cmp.Diff(want, roles(m.reqs[len(m.reqs)-1])); diff != "" {
		t.Errorf("request after the approval (-want +got):\n%s", diff)
	}
	if st, err := agent.Fold(id, e.events(id)); err != nil || len(st.Messages) != len(out.State.Messages) {
		t.Errorf("refold: %v", err)
	}
}

// A completed run continues with a person's message as a follow-up; it
// refuses to execute without one.
func TestFollowUpOnCompletedRun(t *testing.T) {
	e := newEnv(t)
	id := e.create(&agent.RunCreated{})
	m := &script{turns: []model.Message{answer("first answer"), calls(tc("c1", "echo", `{"text":"more"}`)), answer("second answer")}}
	if out, err := e.rt.Execute(context.Background(), id, e.params(m)); err != nil || out.End.Output != "first answer" {
		t.Fatalf("first execution: %v %v", out, err)
	}
	if _, err := e.rt.Execute(context.Background(), id, e.params(m)); !errors.Is(err, agent.ErrRunCompleted) {
		t.Fatalf("execute of a completed run without a message: %v, want ErrRunCompleted", err)
	}
	p := e.params(m)
	p.Message = "now echo more"
	out, err := e.rt.Execute(context.Background(), id, p)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusCompleted || out.End.Output != "second answer" || out.State.FollowUps != 1 {
		t.Fatalf("follow-up: %s %+v, %d follow-ups", out.Status, out.End, out.State.FollowUps)
	}
	evs := e.events(id)
	want := []string{"run.created", "model.responded", "run.completed", "run.resumed", "user.message", "model.responded"}
	if diff := cmp.Diff(want, types(evs)[:6]); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	v, _ := agent.Decode(&evs[3])
	if !v.(*agent.RunResumed).FollowUp {
		t.Error("run.resumed of the follow-up is not marked FollowUp")
	}
	if diff := cmp.Diff([]string{"user:do the thing", "assistant:first answer", "user:now echo more"}, roles(m.reqs[1])); diff != "" {
		t.Errorf("follow-up request (-want +got):\n%s", diff)
	}
	// Only a follow-up may continue a completed run.
	if _, err := agent.Fold(id, append(evs[:3:3], journal.Event{RunID: id, Seq: 4, Type: journal.RunResumed, Payload: []byte(`{}`)})); err == nil {
		t.Error("a run.resumed without follow_up after run.completed folds")
	}
	if _, err := agent.Fold(id, append(evs[:4:4], journal.Event{RunID: id, Seq: 5, Type: journal.ModelResponded, Payload: []byte(`{"message":{"role":"assistant"}}`)})); err == nil {
		t.Error("a follow-up without its message folds")
	}
}

// A person's message stays verbatim in every later request, right after
// the task, when compaction takes its turn out of the view, through
// several compactions.
func TestMessageSurvivesCompaction(t *testing.T) {
	e := newEnv(t)
	turns := echoTurns(24, 1200)
	const window = 3000
	id := e.create(&agent.RunCreated{Context: &agent.ContextConfig{Window: window, Family: "generic"}})
	first := &turnModel{turns: turns[:2]}
	if out, err := e.rt.Execute(context.Background(), id, e.params(first)); err != nil || out.End.Reason != "model_error" {
		t.Fatalf("first execution: %+v %v", out.End, err)
	}
	const msg = "PERSON: after each echo, check the log too"
	m := &turnModel{turns: turns, summary: "Goal: echo things. Done: echoed."}
	p := e.params(m)
	p.Message = msg
	out, err := e.rt.Execute(context.Background(), id, p)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusCompleted {
		t.Fatalf("outcome %s %+v", out.Status, out.End)
	}
	if n := len(out.State.Compactions()); n < 2 {
		t.Fatalf("%d compactions, want at least 2", n)
	}
	compacted := 0
	for i, r := range m.reqs {
		at := hasMessage(r, msg)
		if at < 0 {
			t.Fatalf("request %d lacks the person's message: %q", i, roles(r))
		}
		if r.PriorTurns > 0 {
			compacted++
			if at != 1 {
				t.Errorf("request %d: the message is at %d, want right after the task", i, at)
			}
		}
		if n := estimate(r, out.State); n > window {
			t.Errorf("request %d estimated at %d tokens, window %d", i, n, window)
		}
	}
	if compacted == 0 {
		t.Error("no request came after a compaction of the message's turn")
	}
	checkPairs(t, m.reqs)
}

// Fitting a request into a window too small for it leaves out older
// turns, never a person's message.
func TestMessageSurvivesWindowing(t *testing.T) {
	const msg = "PERSON: use the v2 API"
	var evs []journal.Event
	add := func(typ journal.Type, v any) {
		b, _ := json.Marshal(v)
		evs = append(evs, journal.Event{RunID: "r", Seq: int64(len(evs) + 1), Type: typ, Payload: b})
	}
	add(journal.RunCreated, &agent.RunCreated{Task: "the task", Context: &agent.ContextConfig{Window: 1500, Family: "generic"}})
	for i := range 12 {
		id := fmt.Sprintf("c%d", i)
		add(journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Content: strings.Repeat("thinking ", 60), ToolCalls: []model.ToolCall{tc(id, "echo", `{"text":"x"}`)}}})
		add(journal.ToolFinished, &agent.ToolFinished{CallID: id, Tool: "echo", Result: *tool.Text(strings.Repeat("output ", 300))})
		if i == 2 {
			add(journal.UserMessage, &agent.UserMessage{Content: msg})
		}
	}
	st, err := agent.Fold("r", evs)
	if err != nil {
		t.Fatal(err)
	}
	req := agent.BuildRequest(st, 0)
	if req.PriorTurns < 4 || slices.Contains(roles(req), "assistant:c3") {
		t.Fatalf("the request was not windowed past the message: %q", roles(req))
	}
	if hasMessage(req, msg) < 0 {
		t.Errorf("windowing left out the person's message: %q", roles(req))
	}
}
