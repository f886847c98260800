package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

func (r *remote) Decide(ctx context.Context, runID, callID string, res *agent.ApprovalResolved) error {
	req := &api.Decide{Reason: res.Reason, Remember: res.Remember, Prefix: res.Prefix}
	decide := r.Client.Approve
	if res.Decision == policy.Deny {
		decide = r.Client.Deny
	}
	run, err := decide(context.WithoutCancel(ctx), runID, callID, req)
	r.elsewhere = run.Elsewhere
	return err
}

// Continue follows the run on the server: after a decision, from the
// event after it (the server continues the run by itself); otherwise it
// asks the server to resume the run first.
func (r *remote) Continue(ctx context.Context, runID string, c *continuation) error {
	fp := &tui.FollowParams{From: c.after + 1, JSON: c.f.json, Quiet: c.f.quiet, NoWait: !c.f.gate.waiting(), Message: c.message}
	if c.after == 0 {
		req, err := resumeRequest(c.f, c.message)
		if err != nil {
			return err
		}
		// The events to print start after those there are now: the
		// server may have begun the execution before it answers.
		before, err := r.Client.Run(ctx, runID)
		if err != nil {
			return err
		}
		run, err := r.Client.Resume(context.WithoutCancel(ctx), runID, req)
		if err != nil {
			return err
		}
		fp.From = before.Events + 1
		// The run waits for a person and nothing executes it: the
		// resume attached to the wait (service.ResumePlan), or what it
		// brought is journaled already.
		fp.Waiting = run.Status == string(journal.StatusPaused) && len(run.Pending) > 0 && !run.Queued && !run.Executing
	} else if r.elsewhere != "" {
		// The server recorded the decision but does not execute the run
		// (service: leftToStarter), in the words of every front end.
		fmt.Fprintf(r.a.stderr, "keel: the decision is recorded, but %s\n", r.elsewhere)
		return &exitError{3}
	}
	// Stop at an approval as the local form does: --no-wait, --wait, else
	// whether stdin is a terminal.
	return r.a.follow(ctx, r.Client, runID, fp)
}

func (r *remote) ContinuesLater(runID string) string {
	return fmt.Sprintf("the server continues run %s", runID)
}

func (r *remote) Keel() string { return "keel --server " + r.Client.URL() }

// resumeRequest is the API form of the flags of keel runs resume: the
// message, and the limits and settings given on the command line (the
// server applies them to the run's own and journals the change).
func resumeRequest(f *runFlags, message string) (*api.ResumeRun, error) {
	req := &api.ResumeRun{Message: message, Limits: f.resumeLimits()}
	if f.ctx.window < 0 || f.ctx.window > 0 && f.ctx.window < 512 {
		return nil, usagef("--context-window %d: want 0 (keep) or at least 512 tokens", f.ctx.window)
	}
	req.ContextWindow = f.ctx.window
	if f.changed == nil {
		return req, service.CheckResume(req)
	}
	var s api.Settings
	set := false
	dur := func(name string, v time.Duration, to *string) {
		if f.changed(name) {
			*to, set = v.String(), true
		}
	}
	num := func(name string, v int, to **int) {
		if f.changed(name) {
			*to, set = &v, true
		}
	}
	dur("command-timeout", f.commandTimeout, &s.CommandTimeout)
	dur("command-idle-timeout", f.commandIdle, &s.CommandIdleTimeout)
	dur("model-idle-timeout", f.idleTimeout, &s.ModelIdleTimeout)
	num("concurrency", f.concurrency, &s.Concurrency)
	num("max-result-chars", f.maxResultChars, &s.MaxResultChars)
	num("max-output-tokens", f.maxOutputTokens, &s.MaxOutputTokens)
	num("model-stall-retries", f.stallRetries, &s.ModelStallRetries)
	num("model-retries", f.retries, &s.ModelRetries)
	if set {
		req.Settings = &s
	}
	// Checked here, before the run is looked at (locally or on the
	// server), as the service checks it first.
	return req, service.CheckResume(req)
}
