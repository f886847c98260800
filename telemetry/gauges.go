package telemetry

import (
	"context"
	"sync"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// RunGauges keeps the journal-wide run gauges of /metrics (runs by
// status, runs waiting for an approval, the approvals and their age)
// incrementally: a [RunGauges.Snapshot] lists the journal's index of runs
// and reads only the events appended since the last one, and only of runs
// that have not ended. Every process on a journal reports the same
// values, whoever appended the events. Safe for concurrent use.
type RunGauges struct {
	store journal.Store

	mu   sync.Mutex
	runs map[string]*gaugeRun // runs that have not ended
}

type gaugeRun struct {
	lastSeq int64
	// pending holds the request times of the approvals the run's newest
	// turn waits for, by call id (what agent.State.Pending returns).
	pending map[string]time.Time
}

// NewRunGauges returns gauges read from store.
func NewRunGauges(store journal.Store) *RunGauges {
	return &RunGauges{store: store, runs: map[string]*gaugeRun{}}
}

// Snapshot returns the gauges now (Active is left 0: it is the process's
// own). A run whose events cannot be read or decoded counts by its status
// but its approvals are skipped (audit it with package audit).
func (g *RunGauges) Snapshot(ctx context.Context) (Snapshot, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := Snapshot{ByStatus: map[string]int{}}
	runs, err := g.store.Runs(ctx, nil)
	if err != nil {
		return s, err
	}
	live := make(map[string]bool, len(g.runs))
	for i := range runs {
		r := &runs[i]
		if journal.IsSystem(r.RunID) {
			continue
		}
		s.ByStatus[string(r.Status)]++
		if r.Status.Terminal() {
			continue
		}
		live[r.RunID] = true
		gr := g.runs[r.RunID]
		if gr == nil {
			gr = &gaugeRun{pending: map[string]time.Time{}}
			g.runs[r.RunID] = gr
		}
		if r.LastSeq > gr.lastSeq && !g.catchUp(ctx, r.RunID, gr) {
			delete(g.runs, r.RunID) // read again from the start next time
			continue
		}
		if len(gr.pending) > 0 {
			s.Waiting++
			for _, t := range gr.pending {
				s.Approvals = append(s.Approvals, t)
			}
		}
	}
	for id := range g.runs {
		if !live[id] {
			delete(g.runs, id) // ended (or gone)
		}
	}
	return s, nil
}

// catchUp folds run's events after gr.lastSeq into its pending approvals.
func (g *RunGauges) catchUp(ctx context.Context, runID string, gr *gaugeRun) bool {
	evs, err := g.store.Read(ctx, runID, gr.lastSeq+1)
	if err != nil {
		return false
	}
	for i := range evs {
		e := &evs[i]
		if e.Seq != gr.lastSeq+1 {
			return false
		}
		gr.lastSeq = e.Seq
		switch e.Type {
		case journal.ModelResponded, journal.ApprovalRequested, journal.ApprovalResolved, journal.ToolFinished:
		default:
			continue
		}
		p, err := agent.Decode(e)
		if err != nil {
			return false
		}
		switch p := p.(type) {
		case *agent.ModelResponded:
			clear(gr.pending) // a new turn: only its calls can wait
		case *agent.ApprovalRequested:
			gr.pending[p.CallID] = e.Time
		case *agent.ApprovalResolved:
			delete(gr.pending, p.CallID)
		case *agent.ToolFinished:
			delete(gr.pending, p.CallID)
		}
	}
	return true
}
