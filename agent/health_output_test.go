package agent_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
)

// responses is a fake model that answers the k-th request (whatever it
// holds) with resps[k], and records every request.
type responses struct {
	mu    sync.Mutex
	resps []model.Response
	reqs  []*model.Request
}

func (r *responses) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req)
	if len(r.reqs) > len(r.resps) {
		return nil, &model.Error{Kind: model.KindExhausted, Message: "responses exhausted"}
	}
	resp := r.resps[len(r.reqs)-1]
	resp.Message.Role = model.RoleAssistant
	return &resp, nil
}

var someUsage = model.Usage{InputTokens: 10, OutputTokens: 5}

func text(s, stop string) model.Response {
	return model.Response{Message: model.Message{Content: s}, StopReason: stop, Usage: someUsage}
}

func callResp(stop string, cs ...model.ToolCall) model.Response {
	return model.Response{Message: model.Message{ToolCalls: cs}, StopReason: stop, Usage: someUsage}
}

// toolResults returns "id: first line" for every tool.finished of a run.
func toolResults(t *testing.T, evs []journal.Event) []string {
	t.Helper()
	var out []string
	for i := range evs {
		v, err := agent.Decode(&evs[i])
		if err != nil {
			t.Fatal(err)
		}
		if f, ok := v.(*agent.ToolFinished); ok {
			out = append(out, f.CallID+": "+firstLineOf(f.Content))
		}
	}
	return out
}

// A response cut at the output-token limit, or an empty one, is not a
// completion: a cut response's calls never run (even complete ones), the
// model is told and tries again, and too many in a row fail the run.
func TestIncompleteResponses(t *testing.T) {
	cutNote := "keel.output: [Keel: your response was cut at the output-token limit before it was complete, so it does not count as your answer. Continue more briefly, and keep each response short. The run stops after 3 incomplete responses in a row.]"
	emptyNote := "keel.output: [Keel: your response was empty: no text and no tool call. That does not finish the task. Continue with the next step, and keep each response short. The run stops after 3 incomplete responses in a row.]"
	for _, tt := range []struct {
		name    string
		resps   []model.Response
		status  journal.Status
		reason  string
		ran     []string // the tools' call log
		results []string
		notes   []string
	}{
		{
			name:   "cut text answer, then a real one",
			resps:  []model.Response{text("I will now run the", "length"), text("Done: fixed.", "stop")},
			status: journal.StatusCompleted, reason: "answer",
			notes: []string{cutNote},
		},
		{
			name:   "cut response with a complete call",
			resps:  []model.Response{callResp("length", tc("a", "write", `{"path":"p3.txt","content":"pwned"}`)), callResp("tool_calls", tc("b", "echo", `{"text":"x"}`)), text("done", "stop")},
			status: journal.StatusCompleted, reason: "answer",
			ran:     []string{"echo x"},
			results: []string{"a: " + agent.CutResult, "b: x"},
		},
		{
			name:   "cut response with a complete and a partial call",
			resps:  []model.Response{callResp("length", tc("a", "echo", `{"text":"first"}`), tc("b", "write", `{"path":"p2.txt","content":"pw`)), text("done", "stop")},
			status: journal.StatusCompleted, reason: "answer",
			results: []string{"a: " + agent.CutResult, "b: " + agent.CutResult},
		},
		{
			name:   "empty answer, then a real one",
			resps:  []model.Response{text("", "stop"), text(" \n", "stop"), text("Done.", "stop")},
			status: journal.StatusCompleted, reason: "answer",
			notes: []string{emptyNote, emptyNote},
		},
		{
			name:   "empty answers stop the run",
			resps:  []model.Response{text("", "stop"), text("", "stop"), text("", "stop"), text("never", "stop")},
			status: journal.StatusFailed, reason: "empty_answers",
			notes: []string{emptyNote, emptyNote},
		},
		{
			name:   "empty and cut by reasoning stop the run",
			resps:  []model.Response{text("", "length"), text("", "length"), text("", "length")},
			status: journal.StatusFailed, reason: "output_limit",
			notes: []string{cutNote, cutNote},
		},
		{
			name:   "cut calls every time stop the run",
			resps:  []model.Response{callResp("length", tc("a", "echo", `{"text":"1"}`)), callResp("length", tc("b", "echo", `{"text":"2"}`)), callResp("length", tc("c", "echo", `{"text":"3"}`)), text("never", "stop")},
			status: journal.StatusFailed, reason: "output_limit",
			results: []string{"a: " + agent.CutResult, "b: " + agent.CutResult, "c: " + agent.CutResult},
		},
		{
			name:   "a complete response resets the count",
			resps:  []model.Response{text("", "stop"), text("", "stop"), callResp("tool_calls", tc("a", "echo", `{"text":"1"}`)), text("", "stop"), text("done", "stop")},
			status: journal.StatusCompleted, reason: "answer",
			ran:     []string{"echo 1"},
			results: []string{"a: 1"},
			notes:   []string{emptyNote, emptyNote, emptyNote},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			m := &responses{resps: tt.resps}
			id := e.create(&agent.RunCreated{})
			out, err := e.rt.Execute(context.Background(), id, e.params(m))
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != tt.status || out.End.Reason != tt.reason {
				t.Fatalf("outcome %v %+v, want %v %s", out.Status, out.End, tt.status, tt.reason)
			}
			evs := e.events(id)
			if diff := cmp.Diff(tt.ran, e.log.get()); diff != "" {
				t.Errorf("tools that ran (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.results, toolResults(t, evs)); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.notes, userMessages(t, evs)); diff != "" {
				t.Errorf("notes (-want +got):\n%s", diff)
			}
			checkPairs(t, m.reqs)
		})
	}
}

// A response cut at the output-token limit whose calls were journaled
// before a crash is repaired on resume the same way: its calls get the
// cut result and never run.
func TestCutResponseResumed(t *testing.T) {
	e := newEnv(t)
	id := e.create(&agent.RunCreated{})
	cut := &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{tc("a", "write", `{"path":"x","content":"y"}`)}}, StopReason: "length"}
	if _, err := e.store.Append(context.Background(), id, 1, journal.Draft{Type: journal.ModelResponded, Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Payload: mustJSON(cut)}); err != nil {
		t.Fatal(err)
	}
	m := &responses{resps: []model.Response{text("done", "stop")}}
	out, err := e.rt.Execute(context.Background(), id, e.params(m))
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusCompleted || len(e.log.get()) != 0 {
		t.Fatalf("outcome %v %+v, ran %q", out.Status, out.End, e.log.get())
	}
	if diff := cmp.Diff([]string{"a: " + agent.CutResult}, toolResults(t, e.events(id))); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
}

// A response over MaxResponseBytes is neither stored nor run: the model
// is told its size and tries again, and too many in a row stop the run.
func TestOversizeResponse(t *testing.T) {
	big := func(id string) model.Response {
		return callResp("tool_calls", tc(id, "write", `{"path":"big","content":"`+strings.Repeat("x", agent.MaxResponseBytes)+`"}`))
	}
	for _, tt := range []struct {
		name   string
		resps  []model.Response
		status journal.Status
		reason string
		ran    []string
		notes  int
	}{
		{"one oversize, then parts", []model.Response{big("a"), callResp("tool_calls", tc("b", "write", `{"path":"big","content":"part1"}`)), text("done", "stop")},
			journal.StatusCompleted, "answer", []string{"write big=part1"}, 1},
		{"oversize again and again", []model.Response{big("a"), big("b"), big("c"), text("never", "stop")},
			journal.StatusFailed, "response_too_large", nil, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			m := &responses{resps: tt.resps}
			id := e.create(&agent.RunCreated{})
			out, err := e.rt.Execute(context.Background(), id, e.params(m))
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != tt.status || out.End.Reason != tt.reason {
				t.Fatalf("outcome %v %+v, want %v %s", out.Status, out.End, tt.status, tt.reason)
			}
			if diff := cmp.Diff(tt.ran, e.log.get()); diff != "" {
				t.Errorf("tools that ran (-want +got):\n%s", diff)
			}
			notes := userMessages(t, e.events(id))
			if len(notes) != tt.notes {
				t.Fatalf("notes %q, want %d", notes, tt.notes)
			}
			for _, n := range notes {
				if !strings.HasPrefix(n, "keel.limit: [Keel: your last response was 4194") || !strings.Contains(n, "write a large file in parts") {
					t.Errorf("note %q", n)
				}
			}
			for _, r := range m.reqs {
				for _, msg := range r.Messages {
					if len(msg.Content) > agent.MaxResponseBytes || len(msg.ToolCalls) > 0 && len(msg.ToolCalls[0].Arguments) > agent.MaxResponseBytes {
						t.Fatal("an oversize response reached a later request")
					}
				}
			}
			if out.State.Steps != len(tt.ran)+1 && tt.status == journal.StatusCompleted {
				t.Errorf("steps %d", out.State.Steps)
			}
		})
	}
}

// Tool-call ids are unique in the run: a provider that reuses "call_0"
// every turn gets replacements from the second turn on, so artifacts and
// approvals addressed by id never mix two calls up.
func TestCallIDsUniquePerRun(t *testing.T) {
	e := newEnv(t)
	m := &script{turns: []model.Message{
		calls(tc("call_0", "echo", `{"text":"a"}`), tc("call_1", "echo", `{"text":"b"}`)),
		calls(tc("call_0", "echo", `{"text":"c"}`), tc("call_keel_1_1", "echo", `{"text":"d"}`)),
		calls(tc("call_keel_3_0", "echo", `{"text":"e"}`), tc("call_1", "echo", `{"text":"f"}`)),
		answer("done"),
	}}
	id := e.create(&agent.RunCreated{})
	out, err := e.rt.Execute(context.Background(), id, e.params(m))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, turn := range out.State.Turns {
		for _, c := range turn.Calls {
			ids = append(ids, c.ID)
		}
	}
	want := []string{"call_0", "call_1", "call_keel_2_0", "call_keel_2_1", "call_keel_3_0", "call_keel_3_1"}
	if diff := cmp.Diff(want, ids); diff != "" {
		t.Errorf("ids (-want +got):\n%s", diff)
	}
	checkPairs(t, m.reqs)
}

// A provider that reports no usage is charged Keel's estimate, marked
// as such, so that --max-tokens still stops the run.
func TestEstimatedUsage(t *testing.T) {
	for _, tt := range []struct {
		name      string
		usage     model.Usage
		estimated bool
		reason    string
	}{
		{"no usage: estimated, the limit stops the run", model.Usage{}, true, "max_tokens"},
		{"reported usage is kept", model.Usage{InputTokens: 1, OutputTokens: 1}, false, "answer"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			var resps []model.Response
			for i := range 5 {
				r := callResp("tool_calls", tc("c"+string(rune('a'+i)), "echo", `{"text":"`+strings.Repeat("word ", 40+i)+`"}`))
				r.Usage = tt.usage
				resps = append(resps, r)
			}
			done := text("done", "stop")
			done.Usage = tt.usage
			m := &responses{resps: append(resps, done)}
			id := e.create(&agent.RunCreated{Limits: agent.Limits{MaxTokens: 400}})
			var price []model.Usage
			p := e.params(m)
			p.Price = func(u model.Usage) float64 { price = append(price, u); return float64(u.Total()) / 1e6 }
			out, err := e.rt.Execute(context.Background(), id, p)
			if err != nil {
				t.Fatal(err)
			}
			if out.End.Reason != tt.reason {
				t.Fatalf("outcome %v %+v, want %s", out.Status, out.End, tt.reason)
			}
			var sum int64
			for _, ev := range e.events(id) {
				v, _ := agent.Decode(&ev)
				r, ok := v.(*agent.ModelResponded)
				if !ok {
					continue
				}
				if r.UsageEstimated != tt.estimated {
					t.Errorf("usage_estimated %v, want %v", r.UsageEstimated, tt.estimated)
				}
				if tt.estimated && (r.Usage.InputTokens != r.EstimatedInputTokens || r.Usage.OutputTokens <= 40 || r.Cost == 0) {
					t.Errorf("estimated usage %+v (estimate %d in), cost %g", r.Usage, r.EstimatedInputTokens, r.Cost)
				}
				sum += r.Usage.Total()
			}
			if sum != out.State.Usage.Total() || len(price) != out.State.Steps {
				t.Errorf("run total %d, sum of steps %d; priced %d of %d steps", out.State.Usage.Total(), sum, len(price), out.State.Steps)
			}
		})
	}
}

// A run stopped by incomplete or oversize responses can be resumed: the
// model gets its allowance again, and the incomplete newest response is
// answered with a note, never taken for an answer.
func TestIncompleteThenResume(t *testing.T) {
	for _, tt := range []struct {
		name   string
		first  []model.Response
		reason string
	}{
		{"empty answers", []model.Response{text("", "stop"), text("", "stop"), text("", "stop")}, "empty_answers"},
		{"cut answers", []model.Response{text("I will", "length"), text("I will", "length"), text("I will", "length")}, "output_limit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			id := e.create(&agent.RunCreated{})
			out, err := e.rt.Execute(context.Background(), id, e.params(&responses{resps: tt.first}))
			if err != nil || out.End.Reason != tt.reason {
				t.Fatalf("first execution: %v %+v", err, out)
			}
			m := &responses{resps: []model.Response{text("", "stop"), text("Done.", "stop")}}
			out, err = e.rt.Execute(context.Background(), id, e.params(m))
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != journal.StatusCompleted || out.End.Output != "Done." || len(m.reqs) != 2 {
				t.Fatalf("resumed: %v %+v after %d requests", out.Status, out.End, len(m.reqs))
			}
		})
	}
}
