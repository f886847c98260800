package cli

import (
	"context"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
)

func (r *remote) Approvals(ctx context.Context, runID string) ([]agent.PendingApproval, error) {
	list, err := r.cl.Approvals(ctx)
	if err != nil {
		return nil, err
	}
	var pending []agent.PendingApproval
	for _, ap := range list {
		if runID == "" || ap.RunID == runID {
			pending = append(pending, pendingOf(ap))
		}
	}
	return pending, nil
}

// pendingOf converts the API's approval to the runtime's.
func pendingOf(ap api.Approval) agent.PendingApproval {
	return agent.PendingApproval{RunID: ap.RunID, Seq: ap.Seq, Time: ap.Requested, Principal: ap.Agent, OnBehalfOf: ap.OnBehalfOf, Task: ap.Task,
		Expired: ap.Expired,
		ApprovalRequested: agent.ApprovalRequested{CallID: ap.CallID, Tool: ap.Tool, Arguments: ap.Arguments, Reason: ap.Reason,
			Action: ap.Action, Parts: ap.Parts, Expires: ap.Expires, Default: policy.Effect(ap.Default)}}
}
