package server

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/view"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/tool"
)

// The web UI's timeline and conversation say how they show every event
// type (a new one fails here until they do).
func TestEveryEventTypeRendered(t *testing.T) {
	if err := view.Check(timelineRows); err != nil {
		t.Errorf("timelineRows: %v", err)
	}
	if err := view.Check(convRows); err != nil {
		t.Errorf("convRows: %v", err)
	}
}

// The run's final answer shows once in the conversation: as the model's
// message, not again as the end's output; an output the model did not
// say (a submission) still shows at the end.
func TestConversationAnswerOnce(t *testing.T) {
	for _, tt := range []struct {
		name, said, output string
		want               int
	}{
		{"answer", "All tests pass now.", "All tests pass now.", 1},
		{"answer with spaces", "All tests pass now.\n", "All tests pass now.", 1},
		{"submission", "Done.", "All tests pass now.", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newConvRenderer("r1")
			var b strings.Builder
			for i, ev := range []struct {
				typ journal.Type
				v   any
			}{
				{journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, Content: tt.said}}},
				{journal.RunCompleted, &agent.RunEnded{Reason: agent.ReasonAnswer, Output: tt.output}},
			} {
				p, err := json.Marshal(ev.v)
				if err != nil {
					t.Fatal(err)
				}
				for _, it := range r.render(&journal.Event{RunID: "r1", Seq: int64(i + 1), Type: ev.typ, Time: time.Unix(1, 0), Payload: p}) {
					b.WriteString(string(it.HTML))
				}
			}
			if n := strings.Count(b.String(), "All tests pass now."); n != tt.want {
				t.Errorf("the answer shows %d times, want %d:\n%s", n, tt.want, b.String())
			}
		})
	}
}

// Identical decisions of the egress proxy in a row (a client's retries)
// show as one note with a count, which each repeat replaces (fresh-user
// trial 3: 30 identical notes for one wget); a different decision, or
// another item between, starts a new note.
func TestConversationEgressRepeats(t *testing.T) {
	r := newConvRenderer("r1")
	allowed := &agent.SandboxEgress{Phase: "agent", Host: "localhost", Port: 8767, Allowed: true, Method: "CONNECT"}
	refused := &agent.SandboxEgress{Phase: "agent", Host: "example.com", Port: 443, Reason: "not allowed", Method: "CONNECT"}
	evs := []struct {
		typ journal.Type
		v   any
	}{{journal.RunCreated, &agent.RunCreated{Task: "fetch"}}}
	for range 30 {
		evs = append(evs, struct {
			typ journal.Type
			v   any
		}{journal.SandboxEgress, allowed})
	}
	evs = append(evs, struct {
		typ journal.Type
		v   any
	}{journal.SandboxEgress, refused}, struct {
		typ journal.Type
		v   any
	}{journal.SandboxEgress, allowed})
	var order []string
	shown := map[string]string{}
	for i, ev := range evs {
		p, err := json.Marshal(ev.v)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range r.render(&journal.Event{RunID: "r1", Seq: int64(i + 1), Type: ev.typ, Time: time.Unix(1, 0), Payload: p}) {
			if _, ok := shown[it.ID]; !ok {
				order = append(order, it.ID)
			}
			shown[it.ID] = string(it.HTML)
		}
	}
	if want := []string{"i1", "i2", "i32", "i33"}; strings.Join(order, " ") != strings.Join(want, " ") {
		t.Fatalf("items %v, want %v", order, want)
	}
	if !strings.Contains(shown["i2"], "allowed localhost:8767 (agent phase) · 30 times in a row") {
		t.Errorf("the repeated note: %s", shown["i2"])
	}
	if strings.Contains(shown["i33"], "times in a row") || !strings.Contains(shown["i32"], "refused example.com:443") {
		t.Errorf("the notes after it: %s / %s", shown["i32"], shown["i33"])
	}
}

// A plain resume (after a decision, the next turn) shows nothing in the
// conversation; one that changed something, or a person's, says so in
// words, never as the raw event type (fresh-user trial 6, F19).
func TestConversationResumed(t *testing.T) {
	for _, tt := range []struct {
		name string
		x    agent.RunResumed
		want string
	}{
		{"after a decision", agent.RunResumed{Model: "scripted:demo"}, ""},
		{"by a person", agent.RunResumed{Model: "m", By: "alice"}, "resumed</span> by alice"},
		{"interrupted", agent.RunResumed{Interrupted: []string{"call_1"}}, "resumed</span> calls a stop interrupted were repaired (call_1)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := json.Marshal(&tt.x)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			for _, it := range newConvRenderer("r1").render(&journal.Event{RunID: "r1", Seq: 3, Type: journal.RunResumed, Time: time.Unix(1, 0), Payload: p}) {
				b.WriteString(string(it.HTML))
			}
			if got := b.String(); tt.want == "" && got != "" || !strings.Contains(got, tt.want) || strings.Contains(got, "run.resumed") {
				t.Errorf("shown %q, want %q", got, tt.want)
			}
		})
	}
}

// A call shows its tool's name once, then its arguments (fresh-user
// trial 6, F10: "bash bash cat > …", "write_file write_file notes.txt").
func TestConversationCallNamedOnce(t *testing.T) {
	p, err := json.Marshal(&agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{
		{ID: "c1", Name: "bash", Arguments: `{"command":"cat notes.txt"}`},
		{ID: "c2", Name: "write_file", Arguments: `{"path":"notes.txt","content":"x"}`},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, it := range newConvRenderer("r1").render(&journal.Event{RunID: "r1", Seq: 2, Type: journal.ModelResponded, Time: time.Unix(1, 0), Payload: p}) {
		b.WriteString(string(it.HTML))
	}
	for _, want := range []string{`<span class="tool">bash</span> <code class="args">cat notes.txt</code>`,
		`<span class="tool">write_file</span> <code class="args">notes.txt</code>`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %s in\n%s", want, b.String())
		}
	}
}

// A call a person denied stays labelled denied when its synthetic
// result follows and the run goes on (fresh-user trial 18, U5: it became
// "error"); a call that ran and failed is labelled error.
func TestConversationDeniedStaysDenied(t *testing.T) {
	ev := func(seq int64, typ journal.Type, x any) *journal.Event {
		p, err := json.Marshal(x)
		if err != nil {
			t.Fatal(err)
		}
		return &journal.Event{RunID: "r1", Seq: seq, Type: typ, Time: time.Unix(seq, 0), Payload: p}
	}
	call := model.ToolCall{ID: "c1", Name: "edit_file", Arguments: `{"path":"t.py","old_string":"a","new_string":"b"}`}
	for _, tt := range []struct {
		name   string
		events []*journal.Event
		want   string
	}{
		{"denied by a person", []*journal.Event{
			ev(2, journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{call}}}),
			ev(3, journal.ApprovalRequested, &agent.ApprovalRequested{CallID: "c1"}),
			ev(4, journal.ApprovalResolved, &agent.ApprovalResolved{CallID: "c1", Decision: "deny", By: "root", Reason: "use a regex"}),
			ev(5, journal.ToolFinished, &agent.ToolFinished{CallID: "c1", Tool: "edit_file", Result: tool.Result{Content: "denied", IsError: true}, Synthetic: true}),
		}, `<span class="state">denied</span>`},
		{"denied by the policy", []*journal.Event{
			ev(2, journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{call}}}),
			ev(3, journal.GateDecided, &agent.GateDecided{CallID: "c1", Decision: policy.Decision{Effect: "deny", Reason: "forbidden"}}),
			ev(4, journal.ToolFinished, &agent.ToolFinished{CallID: "c1", Tool: "edit_file", Result: tool.Result{Content: "denied", IsError: true}, Synthetic: true}),
		}, `<span class="state">denied</span>`},
		{"ran and failed", []*journal.Event{
			ev(2, journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{call}}}),
			ev(3, journal.ToolFinished, &agent.ToolFinished{CallID: "c1", Tool: "edit_file", Result: tool.Result{Content: "no match", IsError: true}}),
		}, `<span class="state">error · 0s</span>`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newConvRenderer("r1")
			var last string
			for _, e := range tt.events {
				for _, it := range r.render(e) {
					last = string(it.HTML)
				}
			}
			if !strings.Contains(last, tt.want) {
				t.Errorf("the call's block after its result:\n%s\nwant %s", last, tt.want)
			}
		})
	}
}

// A run's status is one word: a paused run a process now executes (just
// approved) is "executing", not "paused executing" (fresh-user trial 18,
// U2); a queued one "queued"; a fork never started "paused not started".
func TestStatusOneWord(t *testing.T) {
	pages := newUIPages(nil)
	for _, tt := range []struct {
		name string
		run  api.Run
		want string
	}{
		{"approved, executing", api.Run{Status: "paused", Executing: true}, "executing"},
		{"running, executing", api.Run{Status: "running", Executing: true}, "executing"},
		{"queued", api.Run{Status: "paused", Queued: true}, "queued"},
		{"paused", api.Run{Status: "paused"}, "paused"},
		{"a fork not started", api.Run{Status: "paused", Reason: "forked"}, "paused not started"},
		{"completed", api.Run{Status: "completed"}, "completed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			if err := pages.t.ExecuteTemplate(&b, "status", tt.run); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(strings.Fields(stripTags(b.String())), " "); got != tt.want {
				t.Errorf("shown %q (%s), want %q", got, b.String(), tt.want)
			}
		})
	}
}

func stripTags(s string) string {
	var b strings.Builder
	in := false
	for _, r := range s {
		switch {
		case r == '<':
			in = true
		case r == '>':
			in = false
			b.WriteByte(' ')
		case !in:
			b.WriteRune(r)
		}
	}
	return b.String()
}
