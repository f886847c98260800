package cli

import (
	"context"

	"github.com/keel-run/keel/agent"
)

func (l *local) Approvals(ctx context.Context, runID string) ([]agent.PendingApproval, error) {
	list, err := agent.NewRuntime(l.store, nil).Approvals(ctx, &agent.ApprovalsParams{RunID: runID})
	for i := range list {
		// State is the runtime's own check of a stale approval (a file's
		// digest), not part of what a person approves; the API does not
		// carry it either.
		list[i].State = ""
	}
	return list, err
}
