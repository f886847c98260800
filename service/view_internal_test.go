package service

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/view"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
)

// The runs' summaries say how they fold every event type (a new one
// fails here until they do).
func TestEveryEventTypeSummarized(t *testing.T) {
	if err := view.Check(summaryRows); err != nil {
		t.Errorf("summaryRows: %v", err)
	}
}

// A run's summary counts the tokens and cost of the summary calls of
// context compaction, as the fold (and keel runs show, and keel run's
// lines) do.
func TestSummaryCountsSummaryCalls(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var evs []journal.Event
	add := func(typ journal.Type, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, journal.Event{RunID: "r1", Seq: int64(len(evs) + 1), Time: at, Type: typ, Payload: b})
	}
	add(journal.RunCreated, &agent.RunCreated{Task: "t", Model: "scripted:x"})
	add(journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, Content: "one"}, Usage: model.Usage{InputTokens: 3000, OutputTokens: 50}, Cost: 0.0035})
	add(journal.ContextCompacted, &agent.ContextCompacted{From: 1, To: 2, FirstStep: 1, LastStep: 1, Summary: "s", Reason: "threshold",
		Usage: model.Usage{InputTokens: 10000, OutputTokens: 4000}, Cost: 0.05})
	st, err := agent.Fold("r1", evs)
	if err != nil {
		t.Fatal(err)
	}
	var s summary
	for i := range evs {
		if err := s.apply(&evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if r := s.run; r.Steps != st.Steps || r.Tokens != st.Usage.Total() || r.Cost != st.Cost || r.Tokens != 17050 {
		t.Errorf("summary: %d steps, %d tokens, $%f; fold: %d, %d, $%f", r.Steps, r.Tokens, r.Cost, st.Steps, st.Usage.Total(), st.Cost)
	}
}
