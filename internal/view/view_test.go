package view_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/view"
	"github.com/keel-run/keel/journal"
)

// The reader's own table has an entry for every event type, and Check
// fails a table that lacks one or has one agent does not know.
func TestCheck(t *testing.T) {
	if err := view.Check(view.Rows()); err != nil {
		t.Error(err)
	}
	table := map[journal.Type]bool{}
	for _, ty := range agent.Types() {
		table[ty] = true
	}
	if err := view.Check(table); err != nil {
		t.Errorf("Check of a full table: %v", err)
	}
	delete(table, journal.ToolFinished)
	table["tool.exploded"] = true
	err := view.Check(table)
	if err == nil || !strings.Contains(err.Error(), "no entry for tool.finished") || !strings.Contains(err.Error(), "tool.exploded") {
		t.Errorf("Check of a table without tool.finished, with tool.exploded = %v", err)
	}
}

// Over every recorded journal, the rows' steps, tokens and cost end where
// the run's fold does, and every call a tool.finished closes has the
// summary of the model's call.
func TestReaderAgreesWithFold(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "testdata", "journals", "*.jsonl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded journals: %v", err)
	}
	for _, f := range files {
		if strings.HasPrefix(filepath.Base(f), "bad-") {
			continue
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			fh, err := os.Open(f)
			if err != nil {
				t.Fatal(err)
			}
			defer fh.Close()
			evs, _, err := journal.ReadJSONL(fh)
			if err != nil {
				t.Fatal(err)
			}
			byRun := map[string][]journal.Event{}
			for _, e := range evs {
				byRun[e.RunID] = append(byRun[e.RunID], e)
			}
			for id, evs := range byRun {
				if strings.HasPrefix(id, "_keel.") {
					continue // a system stream, no run
				}
				st, err := agent.Fold(id, evs)
				if err != nil {
					t.Fatal(err)
				}
				r := view.NewReader(true)
				var last *view.Row
				for i := range evs {
					last = r.Read(&evs[i])
					if last.Err != nil {
						t.Fatalf("event %d: %v", evs[i].Seq, last.Err)
					}
					if evs[i].Type == journal.ToolFinished && last.Call == "" {
						if x := last.Payload.(*agent.ToolFinished); !x.Synthetic {
							t.Errorf("event %d: tool.finished of %s has no call summary", evs[i].Seq, x.CallID)
						}
					}
				}
				if last.Step != st.Steps || last.Tokens != st.Usage.Total() || last.Cost != st.Cost {
					t.Errorf("run %s: rows end at step %d, %d tokens, $%f; the fold at %d, %d, $%f", id, last.Step, last.Tokens, last.Cost, st.Steps, st.Usage.Total(), st.Cost)
				}
			}
		})
	}
}
