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
