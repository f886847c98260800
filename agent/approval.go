package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
)

// Approval errors.
var (
	// ErrNoApproval is returned when a call has no pending approval.
	ErrNoApproval = errors.New("agent: no pending approval for this call")
	// ErrApprovalExpired is wrapped by [Runtime.Resolve]'s error when the
	// approval's deadline has passed: the default decision applies
	// instead (Resolve journals it), whatever the late decision was.
	ErrApprovalExpired = errors.New("agent: the approval's deadline has passed")
)

// ByTimeout is the ApprovalResolved.By of a decision the runtime applied
// because nobody decided before the approval's deadline.
const ByTimeout = "keel.timeout"

// ApprovalSettings are a run's approval rules, fixed in run.created.
type ApprovalSettings struct {
	// Timeout is how long an approval may wait; 0 means as long as it
	// takes (days, if need be).
	Timeout Duration `json:"timeout,omitempty"`
	// Default is the decision applied when Timeout passes: policy.Deny
	// (also when empty) or policy.Allow.
	Default policy.Effect `json:"default,omitempty"`
}

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// DefaultDecision returns s.Default, or policy.Deny when it is not
// policy.Allow.
func (s *ApprovalSettings) DefaultDecision() policy.Effect {
	if s != nil && s.Default == policy.Allow {
		return policy.Allow
	}
	return policy.Deny
}

// PendingApproval is an approval a run waits for.
type PendingApproval struct {
	RunID string `json:"run_id"`
	ApprovalRequested
	// Seq and Time are those of the approval.requested event.
	Seq  int64     `json:"seq"`
	Time time.Time `json:"time"`
	// Principal and OnBehalfOf are the run's (see [RunCreated]).
	Principal  string `json:"principal,omitempty"`
	OnBehalfOf string `json:"on_behalf_of,omitempty"`
	// Task is the run's task, for context.
	Task string `json:"task,omitempty"`
	// Expired is set by [Runtime.Approvals] when the deadline has passed:
	// the default decision applies when the run next executes (or at
	// once, when someone tries to decide).
	Expired bool `json:"expired,omitempty"`
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
			out = append(out, PendingApproval{RunID: s.RunID, ApprovalRequested: *c.Approval, Seq: c.approvalSeq, Time: c.approvalTime,
				Principal: s.Created.Principal, OnBehalfOf: s.Created.OnBehalfOf, Task: s.Created.Task})
		}
	}
	return out
}

// ApprovalsParams filters [Runtime.Approvals]; nil means every pending
// approval of every run.
type ApprovalsParams struct {
	// RunID, when set, keeps only that run's approvals.
	RunID string
	// Principal, when set, keeps only runs of that agent and of its
	// child agents ("PRINCIPAL/NAME").
	Principal string
}

// Approvals returns the approvals every run of the journal that has not
// ended waits for (or those p selects), oldest request first. A run whose
// newest event is one of several decisions still waits for the others,
// so runs are chosen by their folded state, not by their newest event's
// type. Runs that fail to load (corrupt) are skipped; audit them with
// package audit.
func (rt *Runtime) Approvals(ctx context.Context, p *ApprovalsParams) ([]PendingApproval, error) {
	if p == nil {
		p = &ApprovalsParams{}
	}
	var ids []string
	if p.RunID != "" {
		ids = []string{p.RunID}
	} else {
		runs, err := rt.store.Runs(ctx, &journal.ListParams{Status: []journal.Status{journal.StatusRunning, journal.StatusPaused}})
		if err != nil {
			return nil, fmt.Errorf("agent: list approvals: %w", err)
		}
		for _, r := range runs {
			ids = append(ids, r.RunID)
		}
	}
	var out []PendingApproval
	for _, id := range ids {
		st, _, err := rt.Load(ctx, id)
		if err != nil {
			if p.RunID != "" {
				return nil, fmt.Errorf("agent: list approvals: %w", err)
			}
			continue
		}
		if pr := st.Created.Principal; p.Principal != "" && pr != p.Principal && !strings.HasPrefix(pr, p.Principal+"/") {
			continue
		}
		now := rt.clock()
		for _, pa := range st.Pending() {
			pa.Expired = pa.Expires != nil && !now.Before(*pa.Expires)
			out = append(out, pa)
		}
	}
	slices.SortStableFunc(out, func(a, b PendingApproval) int { return a.Time.Compare(b.Time) })
	return out, nil
}

// Resolve records a person's decision on a pending approval of run as an
// approval.resolved event. It does not execute the run: whoever executes
// it next ([Runtime.Execute]) acts on the decision, and an execution that
// waits (ExecParams.Wait) picks it up from the journal. d.Decision must be
// policy.Allow or policy.Deny.
//
// d.Remember ("run" or "agent", allow only) remembers the approval as
// narrow [policy.Grant]s: the exact text of each part that asked, or, when
// d.Prefix is set, that word prefix, which must fit every asking part.
// Resolve fills d.Grants with the grants it journaled; run-scoped grants
// apply to the run's later calls, and for "agent" the caller also stores
// them with the principal (identity.Directory.Grant) so that they apply
// to the agent's other runs.
//
// A decision that comes after the approval's deadline is refused: Resolve
// journals the default decision instead (by [ByTimeout], as an execution
// would) and returns an error wrapping [ErrApprovalExpired].
//
// It returns [ErrNoApproval] if callID has no pending approval, an error
// wrapping policy.ErrBadPrefix or policy.ErrNotRememberable for a grant
// that cannot be made, and retries once if the run's journal moved on
// between reading and appending.
func (rt *Runtime) Resolve(ctx context.Context, runID, callID string, d *ApprovalResolved) error {
	if d.Decision != policy.Allow && d.Decision != policy.Deny {
		return fmt.Errorf("agent: resolve approval: decision %q, want allow or deny", d.Decision)
	}
	switch {
	case d.Remember == "" && len(d.Prefix) > 0:
		return errors.New("agent: resolve approval: a prefix needs remember (run or agent)")
	case d.Remember != "" && d.Decision != policy.Allow:
		return errors.New("agent: resolve approval: only an approval can be remembered")
	case d.Remember != "" && d.Remember != policy.ScopeRun && d.Remember != policy.ScopeAgent:
		return fmt.Errorf("agent: resolve approval: remember %q, want run or agent", d.Remember)
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
		if now := rt.clock(); c.Approval.Expires != nil && !now.Before(*c.Approval.Expires) {
			dec := c.Approval.Default
			if dec != policy.Allow {
				dec = policy.Deny
			}
			exp := c.Approval.Expires.Format(time.RFC3339)
			timeout := &ApprovalResolved{CallID: callID, Decision: dec, By: ByTimeout,
				Reason: fmt.Sprintf("no decision before the deadline %s; default: %s", exp, dec)}
			_, err := rt.append(ctx, runID, st.LastSeq, journal.Draft{Type: journal.ApprovalResolved, Time: now, Payload: marshal(timeout)})
			if errors.Is(err, journal.ErrConflict) && attempt == 0 {
				continue
			}
			if err != nil {
				return fmt.Errorf("agent: resolve approval: %w", err)
			}
			// Without a second "agent:": the sentinel's words follow.
			return fmt.Errorf("run %s call %s: %w (%s): the default decision, %s, was applied", runID, callID, ErrApprovalExpired, exp, dec)
		}
		p := *d
		p.CallID = callID
		p.Grants = nil
		if p.Remember != "" {
			grants, err := policy.GrantsFor(runID+"/"+callID, p.Remember, c.Name, &c.Decision.Decision, p.Prefix)
			if err != nil {
				return fmt.Errorf("agent: resolve approval of run %s call %s: %w", runID, callID, err)
			}
			for i := range grants {
				grants[i].By, grants[i].Run, grants[i].Call = p.By, runID, callID
			}
			p.Grants = grants
		}
		_, err = rt.append(ctx, runID, st.LastSeq, journal.Draft{Type: journal.ApprovalResolved, Time: rt.clock(), Payload: marshal(&p)})
		if errors.Is(err, journal.ErrConflict) && attempt == 0 {
			continue
		}
		if err != nil {
			return fmt.Errorf("agent: resolve approval: %w", err)
		}
		d.CallID, d.Grants = callID, p.Grants
		return nil
	}
}

// expire resolves the waiting calls whose deadline has passed with their
// default decision. It returns whether it resolved any.
func (x *executor) expire(ctx context.Context, ids []string) (bool, error) {
	now := x.rt.clock()
	var types []journal.Type
	var payloads []any
	for _, id := range ids {
		c := x.st.call(id)
		if c == nil || c.Approval == nil || c.Approval.Expires == nil || now.Before(*c.Approval.Expires) {
			continue
		}
		dec := c.Approval.Default
		if dec != policy.Allow {
			dec = policy.Deny
		}
		types = append(types, journal.ApprovalResolved)
		payloads = append(payloads, &ApprovalResolved{CallID: id, Decision: dec, By: ByTimeout,
			Reason: fmt.Sprintf("no decision before the deadline %s; default: %s", c.Approval.Expires.Format(time.RFC3339), dec)})
	}
	if len(types) == 0 {
		return false, nil
	}
	return true, x.appendMany(ctx, types, payloads)
}

// wait handles calls that wait for a person: it applies expired
// deadlines, pauses the run, and, when ExecParams.Wait is set, follows
// the journal until every waiting call is decided (by any process), the
// next deadline passes, or ctx ends. It returns true when the execution
// should return its outcome (the run stays paused), false when the loop
// should continue.
func (x *executor) wait(ctx context.Context, ids []string) (bool, error) {
	if done, err := x.expire(ctx, ids); err != nil || done {
		return false, err
	}
	if x.st.Status != journal.StatusPaused || x.st.LastType == journal.RunResumed {
		reason, msg := ReasonApproval, fmt.Sprintf("waiting for approval of %s", strings.Join(ids, ", "))
		if auths := x.st.PendingAuths(); len(auths) > 0 && len(x.st.Pending()) == 0 {
			reason, msg = ReasonAuth, fmt.Sprintf("waiting for authorization: %s (%s)", auths[0].Error(), auths[0].Hint)
		}
		if err := x.append(ctx, journal.RunPaused, &RunEnded{Reason: reason, Message: msg}); err != nil {
			return false, err
		}
	}
	if errors.Is(context.Cause(ctx), ErrInterrupted) {
		return false, nil // the loop records the interruption
	}
	if !x.p.Wait || ctx.Err() != nil {
		return true, nil
	}
	if x.p.OnWait != nil {
		x.p.OnWait(x.st.Pending())
	}
	var deadline *time.Time
	for _, id := range ids {
		if c := x.st.call(id); c != nil && c.Approval != nil && c.Approval.Expires != nil {
			if deadline == nil || c.Approval.Expires.Before(*deadline) {
				deadline = c.Approval.Expires
			}
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var expired atomic.Bool
	if deadline != nil {
		t := time.AfterFunc(deadline.Sub(x.rt.clock()), func() { expired.Store(true); cancel() })
		defer t.Stop()
	}
	from := x.st.LastSeq + 1
	for e, err := range journal.Follow(wctx, x.rt.store, x.runID, from, 0) {
		if err != nil {
			return false, fmt.Errorf("agent: run %s: wait for approval: %w", x.runID, err)
		}
		x.mu.Lock()
		err := x.st.Apply(&e)
		if err == nil {
			x.head = e.Hash
		}
		x.mu.Unlock()
		if err != nil {
			return false, fmt.Errorf("agent: run %s: fold: %w", x.runID, err)
		}
		if x.p.OnEvent != nil {
			x.p.OnEvent(e)
		}
		if e.Type != journal.ApprovalResolved && e.Type != journal.AuthResolved {
			// Another process is executing the run.
			return false, fmt.Errorf("agent: run %s: %w (it continued after the approval)", x.runID, ErrRunBusy)
		}
		if len(x.st.Pending()) == 0 && len(x.st.PendingAuths()) == 0 {
			// Every call is decided: this execution continues the run.
			return false, x.append(ctx, journal.RunResumed, &RunResumed{Model: x.p.ModelName})
		}
	}
	if expired.Load() && ctx.Err() == nil {
		return false, nil // the next wait applies the deadline
	}
	if errors.Is(context.Cause(ctx), ErrInterrupted) {
		// A person interrupted the turn at the question: the loop gives
		// the waiting calls their results and records it.
		return false, nil
	}
	return true, nil // ctx ended: the run stays paused
}
