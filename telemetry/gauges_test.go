package telemetry

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool"
)

// gaugeRuns makes n runs on store: every third completes, the others
// pause with one or two approvals waiting ("ask" in an argument asks).
func gaugeRuns(t testing.TB, store journal.Store, n int) *agent.Runtime {
	t.Helper()
	ctx := context.Background()
	ws, err := tool.NewWorkspace(t.TempDir(), "/workspace", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	rt := agent.NewRuntime(store, nil)
	reg := tool.NewRegistry()
	tool.Add(reg, &tool.Tool{Name: "echo", Description: "echo text", Effect: tool.ReadOnly},
		func(ctx context.Context, req *tool.Request, in echoArgs) (*tool.Result, error) {
			return tool.Text(in.Text), nil
		})
	gate := func(_ context.Context, call *policy.Call) policy.Decision {
		if strings.Contains(string(call.Arguments), "ask") {
			return policy.Decision{Effect: policy.Ask, Policies: []string{"test.ask"}}
		}
		return policy.Decision{Effect: policy.Allow}
	}
	for i := range n {
		c := &agent.RunCreated{Task: "t", Model: "openai:gpt-4o", Principal: "bot"}
		for _, s := range reg.Specs() {
			c.Tools = append(c.Tools, agent.ToolInfo{ToolSpec: s, Effect: "read-only"})
		}
		id, err := rt.Create(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		var turns []modeltest.Turn
		switch i % 3 {
		case 0:
			turns = []modeltest.Turn{modeltest.Calls("", modeltest.Call("c1", "echo", map[string]any{"text": "hi"})), modeltest.Text("done")}
		case 1:
			turns = []modeltest.Turn{modeltest.Calls("", modeltest.Call("c1", "echo", map[string]any{"text": "hi"})),
				modeltest.Calls("", modeltest.Call("c2", "echo", map[string]any{"text": "ask 1"}))}
		default:
			turns = []modeltest.Turn{modeltest.Calls("", modeltest.Call("c1", "echo", map[string]any{"text": "ask a"}), modeltest.Call("c2", "echo", map[string]any{"text": "ask b"}))}
		}
		if _, err := rt.Execute(ctx, id, &agent.ExecParams{Wiring: agent.Wiring{Model: modeltest.NewScripted(turns, nil), Tools: reg, Env: &tool.Env{Workspace: ws}, Policy: gate}}); err != nil {
			t.Fatal(err)
		}
	}
	return rt
}

// oldSnapshot is what /metrics computed at each scrape before the gauges
// were incremental: the index and every unfinished run's whole journal.
func oldSnapshot(ctx context.Context, t testing.TB, store journal.Store) Snapshot {
	s := Snapshot{ByStatus: map[string]int{}}
	runs, err := store.Runs(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if !journal.IsSystem(r.RunID) {
			s.ByStatus[string(r.Status)]++
		}
	}
	pending, err := agent.NewRuntime(store, nil).Approvals(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	waiting := map[string]bool{}
	for _, p := range pending {
		waiting[p.RunID] = true
		s.Approvals = append(s.Approvals, p.Time)
	}
	s.Waiting = len(waiting)
	return s
}

func sameSnapshot(t *testing.T, when string, got, want Snapshot) {
	t.Helper()
	slices.SortFunc(got.Approvals, time.Time.Compare)
	slices.SortFunc(want.Approvals, time.Time.Compare)
	if fmt.Sprint(got.ByStatus) != fmt.Sprint(want.ByStatus) || got.Waiting != want.Waiting || !slices.EqualFunc(got.Approvals, want.Approvals, time.Time.Equal) {
		t.Errorf("%s: gauges %+v, the runs' folded state says %+v", when, got, want)
	}
}

// The incremental gauges equal the folded state of every run, as runs
// pause, are decided and end.
func TestRunGaugesFollowTheJournal(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	rt := gaugeRuns(t, store, 9)
	g := NewRunGauges(store)
	s, err := g.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sameSnapshot(t, "first scrape", s, oldSnapshot(ctx, t, store))
	if s.Waiting != 6 || len(s.Approvals) != 9 {
		t.Fatalf("waiting %d runs, %d approvals; want 6 and 9", s.Waiting, len(s.Approvals))
	}
	pending, _ := rt.Approvals(ctx, nil)
	// Decide some: a run with two approvals keeps waiting after one.
	for _, p := range pending[:4] {
		if err := rt.Resolve(ctx, p.RunID, p.CallID, &agent.ApprovalResolved{Decision: policy.Allow, By: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rt.Cancel(ctx, pending[5].RunID, "test"); err != nil {
		t.Fatal(err)
	}
	s, _ = g.Snapshot(ctx)
	sameSnapshot(t, "after decisions and a cancel", s, oldSnapshot(ctx, t, store))
	s, _ = g.Snapshot(ctx)
	sameSnapshot(t, "unchanged", s, oldSnapshot(ctx, t, store))
}

// BenchmarkScrape compares the run gauges of one /metrics scrape on a
// SQLite journal of many runs (a third ended, the others waiting for
// approvals): "reload" folds every unfinished run's journal at each
// scrape (before), "incremental" reads the index and only new events.
//
//	go test -run '^$' -bench Scrape -benchtime 20x ./telemetry/
func BenchmarkScrape(b *testing.B) {
	for _, n := range []int{300, 3000} {
		store, err := sqlite.Open(filepath.Join(b.TempDir(), "j.db"), nil)
		if err != nil {
			b.Fatal(err)
		}
		gaugeRuns(b, store, n)
		ctx := context.Background()
		b.Run(fmt.Sprintf("runs=%d/reload", n), func(b *testing.B) {
			for b.Loop() {
				oldSnapshot(ctx, b, store)
			}
		})
		b.Run(fmt.Sprintf("runs=%d/incremental", n), func(b *testing.B) {
			g := NewRunGauges(store)
			if _, err := g.Snapshot(ctx); err != nil { // the first scrape reads them once
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := g.Snapshot(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		store.Close()
	}
}
