package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

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
func (h *Handler) approvals(ctx context.Context) ([]api.Approval, error) {
	runs, err := h.runs(ctx, []journal.Status{journal.StatusRunning, journal.StatusPaused}, 0)
	if err != nil {
		return nil, err
	}
	out := []api.Approval{}
	now := h.opts.Clock()
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

func (h *Handler) listApprovals(w http.ResponseWriter, r *http.Request, _ *caller) error {
	list, err := h.approvals(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.ApprovalList{Approvals: list})
	return nil
}

func (h *Handler) approve(w http.ResponseWriter, r *http.Request, who *caller) error {
	return h.decideHTTP(w, r, who, policy.Allow)
}

func (h *Handler) deny(w http.ResponseWriter, r *http.Request, who *caller) error {
	return h.decideHTTP(w, r, who, policy.Deny)
}

func (h *Handler) decideHTTP(w http.ResponseWriter, r *http.Request, who *caller, d policy.Effect) error {
	var req api.Decide
	if err := decode(r, &req, true); err != nil {
		return err
	}
	run, err := h.decide(r.Context(), r.PathValue("id"), r.PathValue("call"), d, &req, who)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, run)
	return nil
}

// decide records a person's decision on a pending approval (the journal's
// approval.resolved names them) and, once the run waits for no other
// approval, submits it for execution.
func (h *Handler) decide(ctx context.Context, runID, callID string, d policy.Effect, req *api.Decide, who *caller) (api.Run, error) {
	before, err := h.run(ctx, runID, 0)
	if err != nil {
		return api.Run{}, err
	}
	switch req.Remember {
	case "", policy.ScopeRun, policy.ScopeAgent:
	default:
		return api.Run{}, badRequest("remember %q: want run or agent", req.Remember)
	}
	if req.Remember == policy.ScopeAgent && before.Agent == identity.DemoAgent {
		// Every token may start demo runs: a standing approval of the
		// demo's agent would skip the approval of everyone's demo.
		return api.Run{}, badRequest("remember agent: %s is the shared agent of every demo run, so its approvals cannot be remembered for the agent (remember run applies to this run only)", identity.DemoAgent)
	}
	if len(req.Prefix) > 0 && req.Remember == "" {
		return api.Run{}, badRequest("prefix needs remember run or agent")
	}
	res := &agent.ApprovalResolved{Decision: d, By: who.Name, Token: who.ID, Reason: req.Reason, Remember: req.Remember, Prefix: req.Prefix}
	err = h.rt.Resolve(ctx, runID, callID, res)
	if errors.Is(err, policy.ErrBadPrefix) || errors.Is(err, policy.ErrNotRememberable) {
		return api.Run{}, badRequest("%v", err)
	}
	if err != nil {
		return api.Run{}, err
	}
	rerr := h.record(ctx, who, action{Action: "approval." + string(d), RunID: runID, CallID: callID, Detail: req.Reason,
		Remember: req.Remember, Prefix: req.Prefix})
	run, err := h.run(ctx, runID, 0)
	if err != nil {
		return run, err
	}
	// A remembered approval for the agent applies to its other runs too:
	// store it with the agent.
	for _, g := range res.Grants {
		if g.Scope != policy.ScopeAgent {
			continue
		}
		if err := h.opts.Directory.Grant(ctx, run.Agent, g); err != nil {
			return run, fmt.Errorf("server: the approval is recorded, but the standing approval for agent %s was not stored: %w", run.Agent, err)
		}
	}
	// Execute the run once it waits for nothing else. If another process
	// executes it (a `keel run` waiting for the decision), the journal
	// lets only one of the two continue; the other stops with
	// agent.ErrRunBusy and nothing is torn.
	if len(run.Pending) == 0 {
		if created, err := h.sums.created(ctx, runID); err == nil {
			err := h.foreign(created)
			if xerr := h.executable(created); err == nil && xerr != nil && !errors.Is(xerr, errUnconfined) {
				err = xerr // without the server's sandbox
			}
			if err != nil {
				// The decision is journaled; the process that started the
				// run continues it.
				h.logger.Info("not executing run", "run_id", runID, "err", err)
				return run, rerr
			}
		}
		switch err := h.pool.submit(runID); {
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
