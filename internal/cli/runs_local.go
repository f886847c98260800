package cli

import (
	"context"
	"slices"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// Runs lists runs with their status as folded (agent.Fold), as the
// server does: a run whose approvals were decided but that nobody
// continued yet is still paused, though its newest event is a decision.
// A status filter is applied to the folded status, so it reads every run.
func (l *local) Runs(ctx context.Context, p *journal.ListParams) ([]runRow, error) {
	q := &journal.ListParams{Limit: p.Limit}
	if len(p.Status) > 0 {
		q.Limit = 0
	}
	runs, err := l.store.Runs(ctx, q)
	if err != nil {
		return nil, err
	}
	rt := agent.NewRuntime(l.store, nil)
	var out []runRow
	for _, r := range runs {
		if journal.IsSystem(r.RunID) {
			continue
		}
		row := runRow{}
		if st, _, err := rt.Load(ctx, r.RunID); err == nil {
			r.Status = st.Status
			row.Steps, row.Cost, row.Task = st.Steps, st.Cost, st.Created.Task
		} else {
			row.Err = err.Error()
		}
		if len(p.Status) > 0 && !slices.Contains(p.Status, r.Status) {
			continue
		}
		row.RunSummary, row.Shown = r, liveStatus(ctx, l.store, r)
		out = append(out, row)
		if p.Limit > 0 && len(out) == p.Limit {
			break
		}
	}
	return out, nil
}

func (l *local) Events(ctx context.Context, id string) ([]journal.Event, error) {
	return l.store.Read(ctx, id, 1)
}

func (l *local) VerifyEvents(ctx context.Context, id string, events []journal.Event) error {
	return verifyRun(ctx, l.store, id, events)
}
