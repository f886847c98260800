package eval

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model/replay"
)

// recorded is the replay of the 74-turn trajectory with approvals,
// compactions and a crash, as released v0.1 journaled it.
func recorded(t *testing.T) []journal.Event {
	t.Helper()
	f, err := os.Open("../testdata/journals/v0.1-replay-approvals-compaction-crash.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	evs, _, err := journal.ReadJSONL(f)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func TestMeasureRecordedJournal(t *testing.T) {
	u, err := Measure(recorded(t))
	if err != nil {
		t.Fatal(err)
	}
	if u.Status != "completed" || u.Steps != 74 || u.Asks != 4 || u.Calls != 74 || u.Infra != "" || u.InputTokens == 0 {
		t.Errorf("usage = %+v", u)
	}
	if v := Classify(u, true); v != Passed {
		t.Errorf("verdict %s", v)
	}
}

func TestTrajectoryFromJournalReplays(t *testing.T) {
	evs := recorded(t)
	b, err := Trajectory(evs, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := replay.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	created, _ := agent.Decode(&evs[0])
	if tr.Len() != 74 || tr.Task() != created.(*agent.RunCreated).Task {
		t.Fatalf("trajectory: %d turns, task %.60q", tr.Len(), tr.Task())
	}
	// Every tool call has its journaled result, and the usage is kept.
	n := 0
	for i := range evs {
		if evs[i].Type != journal.ToolFinished {
			continue
		}
		v, _ := agent.Decode(&evs[i])
		f := v.(*agent.ToolFinished)
		r, ok := tr.ToolResult(f.CallID)
		if !ok || r.Content != f.Content {
			t.Fatalf("call %s: recorded %v %.60q, journal %.60q", f.CallID, ok, r.Content, f.Content)
		}
		n++
	}
	turn, _ := tr.Turn(0)
	if n != 74 || turn.Usage.InputTokens == 0 {
		t.Errorf("%d results, first turn usage %+v", n, turn.Usage)
	}
}

func TestATIF(t *testing.T) {
	b, err := ATIF(recorded(t), "test")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Schema string `json:"schema_version"`
		Steps  []struct {
			ID        int    `json:"step_id"`
			Source    string `json:"source"`
			ToolCalls []struct {
				ToolCallID string `json:"tool_call_id"`
			} `json:"tool_calls"`
			Observation *struct {
				Results []struct {
					SourceCallID string `json:"source_call_id"`
				} `json:"results"`
			} `json:"observation"`
		} `json:"steps"`
		Final struct {
			Steps  int     `json:"total_steps"`
			Prompt int64   `json:"total_prompt_tokens"`
			Cost   float64 `json:"total_cost_usd"`
		} `json:"final_metrics"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	agents := 0
	for i, s := range doc.Steps {
		if s.ID != i+1 {
			t.Fatalf("step %d has id %d: ids must be sequential from 1", i, s.ID)
		}
		if s.Source == "agent" {
			agents++
			for j, c := range s.ToolCalls {
				if s.Observation == nil || len(s.Observation.Results) <= j || s.Observation.Results[j].SourceCallID != c.ToolCallID {
					t.Fatalf("step %d: call %s has no observation", s.ID, c.ToolCallID)
				}
			}
		}
	}
	if doc.Schema != ATIFVersion || agents != 74 || doc.Final.Steps != len(doc.Steps) || doc.Final.Prompt == 0 {
		t.Errorf("ATIF: schema %s, %d agent steps, final %+v", doc.Schema, agents, doc.Final)
	}
}

func TestDiverge(t *testing.T) {
	orig := recorded(t)
	same, err := Diverge(orig, orig, nil)
	if err != nil {
		t.Fatal(err)
	}
	if same.Divergence != nil || same.Tools != 74 || same.SameTools != 74 || same.Requests != 74 {
		t.Fatalf("a journal against itself: %+v %+v", same, same.Divergence)
	}
	// Change the output of the 10th tool result, and separately the
	// decision of the 20th gate: each is reported at its event.
	nth := func(typ journal.Type, n int) int {
		for i := range orig {
			if orig[i].Type == typ {
				if n--; n == 0 {
					return i
				}
			}
		}
		t.Fatalf("no %d-th %s", n, typ)
		return 0
	}
	edit := func(i int, f func(v any)) []journal.Event {
		evs := append([]journal.Event(nil), orig...)
		v, _ := agent.Decode(&evs[i])
		f(v)
		b, _ := json.Marshal(v)
		evs[i].Payload = b
		return evs
	}
	ti := nth(journal.ToolFinished, 10)
	changed := edit(ti, func(v any) { v.(*agent.ToolFinished).Content += "\nsomething else" })
	st, err := Diverge(orig, changed, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := st.Divergence; d == nil || d.What != "tool" || d.Seq != orig[ti].Seq {
		t.Fatalf("changed tool output: %+v", d)
	}
	// The comparison goes on: the other 73 results are the same (the
	// later requests, which carry the changed result, are not counted).
	if st.SameTools != 73 || st.Diverged != 1 {
		t.Errorf("%d same tool results, %d differing events; want 73 and 1", st.SameTools, st.Diverged)
	}
	gi := nth(journal.GateDecided, 20)
	st, _ = Diverge(orig, edit(gi, func(v any) { v.(*agent.GateDecided).Effect = "deny" }), nil)
	if d := st.Divergence; d == nil || d.What != "gate" || d.Seq != orig[gi].Seq {
		t.Fatalf("changed gate decision: %+v", d)
	}
	// A volatile part (a duration) is not a divergence.
	vol := edit(ti, func(v any) {
		f := v.(*agent.ToolFinished)
		f.Content = strings.Replace(f.Content+" 1 passed in 0.12s", "0.12s", "0.31s", 1)
	})
	vol2 := append([]journal.Event(nil), vol...)
	v, _ := agent.Decode(&vol2[ti])
	f := v.(*agent.ToolFinished)
	f.Content = strings.Replace(f.Content, "0.31s", "0.07s", 1)
	b, _ := json.Marshal(f)
	vol2[ti].Payload = b
	if st, _ := Diverge(vol, vol2, nil); st.Divergence != nil {
		t.Errorf("a changed duration diverged: %+v", st.Divergence)
	}
}
