package cli

import (
	"context"

	"github.com/keel-run/keel/agent"
)

func (l *local) Approvals(ctx context.Context, runID string) ([]agent.PendingApproval, error) {
	return agent.NewRuntime(l.store, nil).Approvals(ctx, &agent.ApprovalsParams{RunID: runID})
}
