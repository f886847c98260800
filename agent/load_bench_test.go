package agent_test

import (
	"os"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// BenchmarkVerifyFold measures what a resume spends on the journal
// itself once it is read: checking the hash chain and folding it, on
// the longest recorded journal (317 events of one run: a 74-turn
// replay with approvals, a compaction and a crash). It is the part a
// fold checkpoint would save.
func BenchmarkVerifyFold(b *testing.B) {
	f, err := os.Open("../testdata/journals/v0.1-replay-approvals-compaction-crash.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	all, _, err := journal.ReadJSONL(f)
	if err != nil {
		b.Fatal(err)
	}
	id := all[0].RunID
	var evs []journal.Event
	for _, e := range all {
		if e.RunID == id {
			evs = append(evs, e)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := journal.Verify(id, evs); err != nil {
			b.Fatal(err)
		}
		if _, err := agent.Fold(id, evs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(evs)), "events")
}
