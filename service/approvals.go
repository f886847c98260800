package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
)

// approvals returns every pending approval of every run that has not
// ended, oldest request first. Pending approvals come from each run's
// folded state (requested, neither decided nor given a result), so a run
// whose newest event decided one of its two approvals still shows the
// other.
func (s *Service) approvals(ctx context.Context) ([]api.Approval, error) {
	runs, err := s.runs(ctx, []journal.Status{journal.StatusRunning, journal.StatusPaused}, 0)
	if err != nil {
		return nil, err
	}
	out := []api.Approval{}
	now := s.opts.Clock()
	for _, r := range runs {
		for _, ap := range r.Pending {
			// As agent.Runtime.Approvals says it.
			ap.Expired = ap.Expires != nil && !now.Before(*ap.Expires)
			out = append(out, ap)
		}
	}
	slices.SortStableFunc(out, func(a, b api.Approval) int { return a.Requested.Compare(b.Requested) })
	return out, nil
}

// decide records a person's decision on a pending approval (the journal's
// approval.resolved names them) and, once the run waits for no other
// approval, submits it for execution.
func (s *Service) decide(ctx context.Context, runID, callID string, d policy.Effect, req *api.Decide, who *Caller) (api.Run, error) {
	// One order on every front end (report 15, Q4): the request's own
	// form, then the run, then the call it waits for, then what the
	// request may do to this run. (Whether the caller may decide at all,
	// a token's scope, is the door's check, before any of these.)
	if err := CheckDecision(d, req); err != nil {
		return api.Run{}, err
	}
	before, err := s.run(ctx, runID, 0)
	if err != nil {
		return api.Run{}, err
	}
	if callID, err = ResolveCall(runID, callID, before.Pending); err != nil {
		return api.Run{}, err
	}
	if req.Remember == policy.ScopeAgent && before.Agent == identity.DemoAgent {
		// Every token may start demo runs: a standing approval of the
		// demo's agent would skip the approval of everyone's demo.
		return api.Run{}, badRequest("remember agent: %s is the shared agent of every demo run, so its approvals cannot be remembered for the agent (remember run applies to this run only)", identity.DemoAgent)
	}
	res := &agent.ApprovalResolved{Decision: d, By: who.Name, Token: who.ID, Reason: req.Reason, Remember: req.Remember, Prefix: req.Prefix}
	err = s.rt.Resolve(ctx, runID, callID, res)
	if errors.Is(err, policy.ErrBadPrefix) {
		return api.Run{}, badRequest("call %s of run %s: %s", callID, runID, plain(err, policy.ErrBadPrefix))
	}
	if errors.Is(err, policy.ErrNotRememberable) {
		return api.Run{}, badRequest("call %s of run %s: %s", callID, runID, plain(err, policy.ErrNotRememberable))
	}
	if err != nil {
		return api.Run{}, err
	}
	rerr := s.record(ctx, who, action{Action: "approval." + string(d), RunID: runID, CallID: callID, Detail: req.Reason,
		Remember: req.Remember, Prefix: req.Prefix})
	run, err := s.run(ctx, runID, 0)
	if err != nil {
		return run, err
	}
	// A remembered approval for the agent applies to its other runs too:
	// store it with the agent.
	for _, g := range res.Grants {
		if g.Scope != policy.ScopeAgent {
			continue
		}
		if err := s.opts.Directory.Grant(ctx, run.Agent, g); err != nil {
			return run, fmt.Errorf("the approval is recorded, but the standing approval for agent %s was not stored: %w", run.Agent, err)
		}
	}
	// Execute the run once it waits for nothing else. If another process
	// executes it (a `keel run` waiting for the decision), the journal
	// lets only one of the two continue; the other stops with
	// agent.ErrRunBusy and nothing is torn.
	if len(run.Pending) == 0 && s.executes() {
		if created, err := s.sums.created(ctx, runID); err == nil {
			if err := s.leftToStarter(created); err != nil {
				// The decision is journaled; the process that started the
				// run continues it.
				s.logger.Info("not executing run", "run_id", runID, "err", err)
				run.Elsewhere = notContinued(err, runID)
				return run, rerr
			}
		}
		switch err := s.pool.submit(runID); {
		case errors.Is(err, errCanceling):
			// A cancel is being recorded: it wins, and the decision
			// stays in the journal.
		case err != nil:
			return run, err
		default:
			run.Queued = !run.Executing
		}
	}
	return run, rerr
}

// leftToStarter says why this server leaves run c to the process that
// started it (nil: it executes the run itself), after a decision, a
// restart, an adoption or an approval's deadline: a run of another
// policy or without the server's sandbox, or a run started outside the
// API whose workspace the server may not use. Only a run the server
// admitted and whose workspace fails the check since is the server's
// own to end (the pool fails it with reason setup).
func (s *Service) leftToStarter(c *agent.RunCreated) error {
	err := s.foreign(c)
	if xerr := s.executable(c); err == nil && xerr != nil {
		switch {
		case !errors.Is(xerr, errUnconfined):
			err = xerr // without the server's sandbox
		case !admitted(c):
			err = fmt.Errorf("%w; %w", xerr, errNotAdmitted)
		}
	}
	return err
}

// leaves reports whether this server leaves run id, which it would
// otherwise execute, to the process that started it (leftToStarter),
// and logs why once per run. Nothing is journaled: the run stays as
// that process left it (interrupted, or waiting for a person), for it
// to continue (keel runs resume), which also applies an approval
// deadline that passed meanwhile.
func (s *Service) leaves(ctx context.Context, id string) bool {
	c, err := s.sums.created(ctx, id)
	if err != nil {
		return false // the execution reports it
	}
	if err := s.leftToStarter(c); err != nil {
		if _, logged := s.leftAlone.LoadOrStore(id, true); !logged {
			s.logger.Info("not executing run: it is left to the process that started it", "run_id", id, "err", err)
		}
		return true
	}
	return false
}

// Elsewhere says, for a run paused with no call waiting, why this server
// does not continue run id after a decision and where it goes on ("":
// the server continues it, or the run cannot be read).
func (s *Service) Elsewhere(ctx context.Context, id string) string {
	if !s.executes() {
		return "this server executes no runs: the run continues where it was started (keel runs resume " + id + " on the server's machine)"
	}
	c, err := s.sums.created(ctx, id)
	if err != nil {
		return ""
	}
	if err := s.leftToStarter(c); err != nil {
		return notContinued(err, id)
	}
	return ""
}

// notContinued is the one wording of leftToStarter's answer for run id,
// on every front end (a decision's answer, a refused resume, the web
// UI's run page).
func notContinued(err error, id string) string {
	return "this server does not continue this run: " + strings.ReplaceAll(err.Error(), "RUN", id)
}

// CheckDecision is the check of a decision's own form, the first of
// [Service.Decide]'s, before the run is looked at: a decision is allow
// or deny, a denial has a reason ([NoReason]), remember is run or agent,
// and a prefix comes with remember. A front end that must look at the
// run itself before it asks the service (to name the one waiting call
// when none is given) checks this first, so that every front end
// refuses the same bad request with the same words.
func CheckDecision(d policy.Effect, req *api.Decide) error {
	switch d {
	case policy.Allow, policy.Deny:
	default:
		return badRequest("decision %q: want approve or deny", d)
	}
	if d == policy.Deny && strings.TrimSpace(req.Reason) == "" {
		return NoReason()
	}
	switch req.Remember {
	case "", policy.ScopeRun, policy.ScopeAgent:
	default:
		return badRequest("remember %q: want run or agent", req.Remember)
	}
	if len(req.Prefix) > 0 && req.Remember == "" {
		return badRequest("prefix needs remember run or agent")
	}
	if d == policy.Deny && req.Remember != "" {
		// A remembered approval is a grant; there is no remembered
		// denial (the policy's forbid rules are those).
		return badRequest("remember %s is for approvals: a denial is not remembered (to refuse such calls from now on, add a forbid rule to the policy)", req.Remember)
	}
	return nil
}

// Decision is a person's decision on a call a run waits for.
type Decision struct {
	// RunID is the run's id; CallID names the call as [ResolveCall]
	// takes it (its id, a unique prefix of it, or "" for the one call
	// the run waits for).
	RunID, CallID string
	// Effect is policy.Allow or policy.Deny.
	Effect policy.Effect
	// Reason, Remember and Prefix are as the API's (a denial's reason
	// is shown to the model, and a denial needs one: [NoReason]; remember run|agent allows matching calls
	// from now on, only the exact command or the stated word prefix).
	api.Decide
}

// Approvals returns every pending approval of every run that has not
// ended, oldest request first, with Expired set.
func (s *Service) Approvals(ctx context.Context, who *Caller) ([]api.Approval, error) {
	list, err := s.approvals(ctx)
	if err != nil {
		return nil, err
	}
	return list, s.hideApprovals(ctx, who, list)
}

// Decide records who's decision on a pending approval (the journal's
// approval.resolved names them; a remembered approval for the agent is
// stored with the agent, for its other runs) and, once the run waits for
// no other approval, queues it to continue (when this service executes
// runs; else the process that waits for the decision continues it, or
// a resume). The one place an approval is applied: the API, the web UI,
// Keel's MCP tools and the command line all decide here.
func (s *Service) Decide(ctx context.Context, who *Caller, d *Decision) (api.Run, error) {
	return s.decide(ctx, d.RunID, d.CallID, d.Effect, &d.Decide, who)
}
