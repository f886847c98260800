package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
)

// Approval errors.
var (
	// ErrNoApproval is returned when a call has no pending approval.
	ErrNoApproval = errors.New("agent: no pending approval for this call")
)

// PendingApproval is an approval a run waits for.
type PendingApproval struct {
	RunID string `json:"run_id"`
	ApprovalRequested
	// Seq is the sequence number of the approval.requested event.
	Seq int64 `json:"seq"`
}

// Pending returns the approvals s waits for, in call order.
func (s *State) Pending() []PendingApproval {
	t := s.LastTurn()
	if t == nil {
		return nil
	}
	var out []PendingApproval
	for _, c := range t.Calls {
		if c.Approval != nil && c.Resolved == nil && c.Finished == nil {
			out = append(out, PendingApproval{RunID: s.RunID, ApprovalRequested: *c.Approval})
		}
	}
	return out
}

// Resolve records a person's decision on a pending approval of run as an
// approval.resolved event. It does not execute the run: whoever executes
// it next ([Runtime.Execute]) acts on the decision. d.Decision must be
// policy.Allow or policy.Deny. It returns [ErrNoApproval] if callID has no
// pending approval, and retries once if the run's journal moved on
// between reading and appending.
func (rt *Runtime) Resolve(ctx context.Context, runID, callID string, d *ApprovalResolved) error {
	if d.Decision != policy.Allow && d.Decision != policy.Deny {
		return fmt.Errorf("agent: resolve approval: decision %q, want allow or deny", d.Decision)
	}
	for attempt := 0; ; attempt++ {
		st, _, err := rt.Load(ctx, runID)
		if err != nil {
			return fmt.Errorf("agent: resolve approval: %w", err)
		}
		c := st.call(callID)
		if c == nil || c.Approval == nil || c.Resolved != nil || c.Finished != nil {
			return fmt.Errorf("agent: run %s call %s: %w", runID, callID, ErrNoApproval)
		}
		p := *d
		p.CallID = callID
		_, err = rt.store.Append(ctx, runID, st.LastSeq, journal.Draft{Type: journal.ApprovalResolved, Time: rt.clock(), Payload: marshal(&p)})
		if errors.Is(err, journal.ErrConflict) && attempt == 0 {
			continue
		}
		if err != nil {
			return fmt.Errorf("agent: resolve approval: %w", err)
		}
		return nil
	}
}
