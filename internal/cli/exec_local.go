package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/policy"
)

func (l *local) Decide(ctx context.Context, runID, callID string, res *agent.ApprovalResolved) error {
	rt, flush, err := l.a.newRuntime(ctx, l.store, nil, nil)
	if err != nil {
		return err
	}
	defer flush()
	st, _, err := rt.Load(ctx, runID)
	if err != nil {
		return err
	}
	if err := rt.Resolve(ctx, runID, callID, res); err != nil {
		if errors.Is(err, agent.ErrApprovalExpired) {
			for _, p := range st.Pending() {
				if p.CallID == callID && p.Expires != nil {
					return fmt.Errorf("too late: the deadline of call %s passed at %s, so its default decision (%s) applies; continue the run with keel runs resume %s",
						callID, p.Expires.Local().Format("2006-01-02 15:04:05"), p.Default, runID)
				}
			}
			return fmt.Errorf("too late: %w", err)
		}
		if errors.Is(err, agent.ErrNoApproval) {
			return fmt.Errorf("%w (see keel approvals list --run %s)", err, runID)
		}
		if errors.Is(err, policy.ErrBadPrefix) || errors.Is(err, policy.ErrNotRememberable) {
			return &usageError{err}
		}
		return err
	}
	for _, g := range res.Grants {
		if g.Scope != policy.ScopeAgent {
			continue
		}
		if err := l.directory().Grant(ctx, st.Created.Principal, g); err != nil {
			return fmt.Errorf("the approval is recorded, but the standing approval for agent %s was not stored: %w", st.Created.Principal, err)
		}
	}
	return nil
}

// Continue executes the run in this process: after a decision only if
// nothing came after it (a keel run waiting for the decision continues
// the run itself: agent.ErrRunBusy, or a newer event).
func (l *local) Continue(ctx context.Context, runID string, c *continuation) error {
	if c.after > 0 {
		if later, err := l.store.Read(ctx, runID, c.after+1); err == nil && len(later) > 0 {
			return fmt.Errorf("run %s moved on after the decision: %w", runID, agent.ErrRunBusy)
		}
	}
	c.f.gate.ifLastSeq = c.after
	return l.a.resumeOn(ctx, l.store, runID, c.f, c.message)
}

func (l *local) ContinuesLater(runID string) string {
	return fmt.Sprintf("the run continues when it is resumed (%s runs resume %s) or in the process waiting for it", l.a.keelCmd(), runID)
}

func (l *local) Keel() string { return l.a.keelCmd() }
