package cli

import (
	"context"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/journal"
)

func (r *remote) Runs(ctx context.Context, p *journal.ListParams) ([]runRow, error) {
	q := &client.RunsParams{Limit: p.Limit}
	for _, s := range p.Status {
		q.Status = append(q.Status, string(s))
	}
	runs, err := r.Client.Runs(ctx, q)
	if err != nil {
		return nil, err
	}
	out := make([]runRow, 0, len(runs))
	for _, x := range runs {
		s := journal.RunSummary{RunID: x.ID, Created: x.Created, Updated: x.Updated, LastSeq: x.Events, LastType: journal.Type(x.LastType), Status: journal.Status(x.Status)}
		row := runRow{RunSummary: s, Shown: x.Status, Steps: x.Steps, Cost: x.Cost, Task: x.Task}
		if x.Task == "" && x.Error != "" {
			row.Err = x.Error
		}
		out = append(out, row)
	}
	return out, nil
}

// Events reads run id's stored events from the server.
func (r *remote) Events(ctx context.Context, id string) ([]journal.Event, error) {
	var out []journal.Event
	for e, err := range r.Client.Events(ctx, id, &client.EventsParams{NoFollow: true}) {
		if err != nil {
			return out, err
		}
		out = append(out, e)
	}
	return out, nil
}

// VerifyEvents checks the hash chain (the server checks its index).
func (r *remote) VerifyEvents(_ context.Context, id string, events []journal.Event) error {
	return journal.Verify(id, events)
}
