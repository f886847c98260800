package tui

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/visible"
)

// asker asks the person at this terminal about the calls a run followed
// on a team server waits for, with the prompt of a local run
// ([Prompt.DecideInline]) over the server's decisions, while anyone else
// may decide them: [Follow] tells it each decision the run journals, and
// a question whose call someone else decided goes away, saying who.
type asker struct {
	srv Server
	fp  *FollowParams
	id  string
	ctx context.Context
	// created is the run's creation, as Follow folded it.
	created *agent.RunCreated

	mu sync.Mutex
	// cur is the question on the screen, nil when none.
	cur *question
	// sent are the calls whose answer was given here (being sent, or
	// sent): their decision is this terminal's.
	sent map[string]bool
	// noInput: the input ended; calls are then only listed with how to
	// decide them (as without a terminal), once each.
	noInput bool
	listed  map[string]bool
	// stopped: Follow returns; nothing more is asked.
	stopped bool
	// wg counts the questions' goroutines.
	wg sync.WaitGroup
}

// question is one question on the screen: its calls, how to take it
// away, and when it has gone.
type question struct {
	calls  map[string]bool
	cancel context.CancelFunc
	ended  chan struct{}
}

func newAsker(ctx context.Context, srv Server, fp *FollowParams, id string) *asker {
	return &asker{srv: srv, fp: fp, id: id, ctx: ctx, sent: map[string]bool{}, listed: map[string]bool{}}
}

// requested is called for each approval.requested of the run: the calls
// it waits for and nobody answered here are asked, unless a question is
// on the screen (its end asks the next).
func (a *asker) requested(created *agent.RunCreated) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.created = created
	if a.cur != nil {
		return
	}
	a.askLocked()
}

// askLocked puts the calls the run waits for, not answered here, to the
// person (a.mu held).
func (a *asker) askLocked() {
	if a.stopped || a.ctx.Err() != nil {
		return
	}
	run, err := a.srv.Run(context.WithoutCancel(a.ctx), a.id)
	if err != nil {
		fmt.Fprintf(a.fp.Stderr, "keel: %v\n", err)
		return
	}
	var pending []agent.PendingApproval
	for _, ap := range run.Pending {
		if !a.sent[ap.CallID] {
			pending = append(pending, PendingOf(ap))
		}
	}
	if a.noInput {
		var fresh []agent.PendingApproval
		for _, p := range pending {
			if !a.listed[p.CallID] {
				a.listed[p.CallID] = true
				fresh = append(fresh, p)
			}
		}
		if len(fresh) > 0 {
			Waiting(a.fp.Stderr, fresh, a.fp.URL)
		}
		return
	}
	if len(pending) == 0 {
		return
	}
	qctx, cancel := context.WithCancel(a.ctx)
	q := &question{calls: map[string]bool{}, cancel: cancel, ended: make(chan struct{})}
	for _, p := range pending {
		q.calls[p.CallID] = true
	}
	a.cur = q
	asking := &Asking{Created: a.created, Decide: a.decide, Keel: "keel --server " + a.fp.URL,
		Diff: func(ctx context.Context, p agent.PendingApproval) string {
			pe, err := a.srv.ProposedEdit(context.WithoutCancel(ctx), p.RunID, p.CallID)
			if err != nil {
				return "  (no diff: " + visible.String(err.Error()) + ")\n"
			}
			return ProposedDiff(pe)
		}}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer cancel()
		ok := a.fp.Prompt.DecideInline(qctx, asking, pending)
		a.mu.Lock()
		defer a.mu.Unlock()
		a.cur = nil
		close(q.ended)
		switch {
		case ok:
			// Calls requested meanwhile are asked now.
			a.askLocked()
		case qctx.Err() != nil:
			// Ctrl-C, or someone else decided (resolved asks again).
		default:
			// The input ended: the run waits for a decision from
			// elsewhere, as without a terminal.
			a.noInput = true
			var left []agent.PendingApproval
			for _, p := range pending {
				if !a.sent[p.CallID] {
					a.listed[p.CallID] = true
					left = append(left, p)
				}
			}
			Waiting(a.fp.Stderr, left, a.fp.URL)
		}
	}()
}

// decide records an answer given here through the server; when the call
// no longer waits (someone else decided it first), the error wraps
// ErrDecided.
func (a *asker) decide(ctx context.Context, runID, callID string, res *agent.ApprovalResolved) error {
	a.mu.Lock()
	a.sent[callID] = true
	a.mu.Unlock()
	bg := context.WithoutCancel(ctx)
	err := a.srv.Decide(bg, runID, callID, res)
	if err == nil {
		return nil
	}
	if run, rerr := a.srv.Run(bg, runID); rerr == nil && !slices.ContainsFunc(run.Pending, func(ap api.Approval) bool { return ap.CallID == callID }) {
		return fmt.Errorf("%w (%v)", ErrDecided, err)
	}
	a.mu.Lock()
	delete(a.sent, callID)
	a.mu.Unlock()
	return err
}

// resolved is called for each approval.resolved of the run: a decision
// made elsewhere on a call of the question on the screen takes the
// question away, says who decided, and asks the calls still waiting.
func (a *asker) resolved(e *journal.Event) {
	var x agent.ApprovalResolved
	if json.Unmarshal(e.Payload, &x) != nil {
		return
	}
	a.mu.Lock()
	q := a.cur
	if a.sent[x.CallID] || q == nil || !q.calls[x.CallID] {
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	q.cancel()
	<-q.ended
	verb := "approved"
	if x.Decision == policy.Deny {
		verb = "denied"
	}
	by := x.By
	if by == "" {
		by = "someone else"
	}
	why := ""
	if x.Reason != "" {
		why = " (" + visible.String(firstLine(x.Reason)) + ")"
	}
	fmt.Fprintf(Esc(a.fp.Stderr), "keel: call %s was %s by %s elsewhere%s; the question is withdrawn\n", visible.String(x.CallID), verb, visible.String(by), why)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cur == nil {
		a.askLocked()
	}
}

// stop takes the question on the screen away and waits for it to go.
func (a *asker) stop() {
	a.mu.Lock()
	a.stopped = true
	if q := a.cur; q != nil {
		q.cancel()
	}
	a.mu.Unlock()
	a.wg.Wait()
}
