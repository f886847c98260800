package cli

import (
	"context"
	"fmt"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
)

func (r *remote) Decide(ctx context.Context, runID, callID string, res *agent.ApprovalResolved) error {
	req := &api.Decide{Reason: res.Reason, Remember: res.Remember, Prefix: res.Prefix}
	decide := r.cl.Approve
	if res.Decision == policy.Deny {
		decide = r.cl.Deny
	}
	_, err := decide(context.WithoutCancel(ctx), runID, callID, req)
	if client.IsCode(err, api.CodeNoApproval) {
		return fmt.Errorf("%w (see %s approvals list --run %s)", err, r.Keel(), runID)
	}
	return err
}

// Continue follows the run on the server: after a decision, from the
// event after it (the server continues the run by itself); otherwise it
// asks the server to resume the run first.
func (r *remote) Continue(ctx context.Context, runID string, c *continuation) error {
	from := c.after + 1
	if c.after == 0 {
		run, err := r.cl.Resume(context.WithoutCancel(ctx), runID, &api.ResumeRun{Message: c.message})
		if err != nil {
			return err
		}
		from = run.Events + 1
	}
	// Stop at an approval as the local form does: --no-wait, --wait, else
	// whether stdin is a terminal.
	return r.a.follow(ctx, r.cl, runID, from, c.f.json, c.f.quiet, !c.f.gate.waiting())
}

func (r *remote) ContinuesLater(runID string) string {
	return fmt.Sprintf("the server continues run %s", runID)
}

func (r *remote) Keel() string { return "keel --server " + r.cl.URL() }
