package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// Decide records the decision through the service, as every front end
// does; it says what to do next in the command line's words.
func (l *local) Decide(ctx context.Context, runID, callID string, res *agent.ApprovalResolved) error {
	svc := l.Service()
	_, err := svc.Decide(ctx, l.Caller(), &service.Decision{RunID: runID, CallID: callID, Effect: res.Decision,
		Decide: api.Decide{Reason: res.Reason, Remember: res.Remember, Prefix: res.Prefix}})
	switch {
	case errors.Is(err, agent.ErrApprovalExpired):
		if st, _, lerr := svc.Runtime().Load(ctx, runID); lerr == nil {
			for _, p := range st.Pending() {
				if p.CallID == callID && p.Expires != nil {
					return fmt.Errorf("too late: the deadline of call %s passed at %s, so its default decision (%s) applies; continue the run with keel runs resume %s",
						callID, p.Expires.Local().Format("2006-01-02 15:04:05"), p.Default, runID)
				}
			}
		}
		return fmt.Errorf("too late: %w; continue the run with keel runs resume %s", err, runID)
	}
	return err
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
	err := l.a.resumeOn(ctx, l.store, runID, c.f, c.message)
	var missing *assemble.MissingSecretError
	if c.after > 0 && errors.As(err, &missing) {
		// A person decided from a shell without the run's secret: the
		// decision is recorded; the run goes on where the secret is.
		fmt.Fprintf(l.a.stderr, "keel: the decision is recorded, but run %s holds the secret %s, which this shell does not have: it continues where %s is set (%s runs resume %s) or in the process waiting for it\n",
			runID, missing.Name, missing.Name, l.a.keelCmd(), runID)
		return &exitError{3}
	}
	return err
}

func (l *local) ContinuesLater(runID string) string {
	return fmt.Sprintf("the run continues when it is resumed (%s runs resume %s) or in the process waiting for it", l.a.keelCmd(), runID)
}

func (l *local) Keel() string { return l.a.keelCmd() }
