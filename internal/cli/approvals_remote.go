package cli

import (
	"context"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/tui"
)

func (r *remote) Approvals(ctx context.Context, runID string) ([]agent.PendingApproval, error) {
	list, err := r.Client.Approvals(ctx)
	if err != nil {
		return nil, err
	}
	var pending []agent.PendingApproval
	for _, ap := range list {
		if runID == "" || ap.RunID == runID {
			pending = append(pending, tui.PendingOf(ap))
		}
	}
	return pending, nil
}
