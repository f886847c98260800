package foreground

import (
	"context"
	"fmt"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
)

// childWait is what an execution does when a child agent it executes
// waits for a person's approval (with a terminal, unless --no-wait):
// the question is asked at the terminal, naming the child; without an
// answer there, the child waits for a decision from any process, as a
// lead would.
func (x *Execution) childWait(ctx context.Context, store journal.Store, pending []agent.PendingApproval, inline bool) {
	if len(pending) == 0 {
		return
	}
	st, _, err := agent.NewRuntime(store, nil).Load(context.WithoutCancel(ctx), pending[0].RunID)
	if err != nil {
		fmt.Fprintf(x.Stderr, "keel: child run %s waits for approval: %v\n", pending[0].RunID, err)
		return
	}
	fmt.Fprintf(x.Stderr, "\nkeel: child agent %s (run %s) asks:\n", st.Created.Principal, st.RunID)
	if inline && x.Prompt.DecideInline(ctx, &tui.Asking{Created: st.Created, By: x.Person, Decide: x.Decide, Keel: x.Keel}, pending) {
		return
	}
	if ctx.Err() != nil {
		return
	}
	tui.Waiting(x.Stderr, pending, "")
}

// childrenWaits prints, for a lead paused because children of its tree
// wait for a person, what each waits for and how to go on.
func (x *Execution) childrenWaits(ctx context.Context, store journal.Store, lead string, st *agent.State) {
	var paused []*agent.State
	var walk func(st *agent.State, depth int)
	walk = func(st *agent.State, depth int) {
		for _, c := range st.Children {
			if c.Delivered != nil || depth > agent.MaxTreeRuns {
				continue
			}
			cs, _, err := agent.NewRuntime(store, nil).Load(ctx, c.ID)
			if err != nil || cs.Status != journal.StatusPaused {
				continue
			}
			if cs.Ended != nil && cs.Ended.Reason == agent.ReasonChildren && len(cs.Pending()) == 0 {
				walk(cs, depth+1) // it waits for its own children: name them
				continue
			}
			paused = append(paused, cs)
		}
	}
	walk(st, 0)
	if len(paused) > 0 {
		tui.ChildWaits(x.Stderr, x.Keel, lead, paused, false)
	}
}

// leadHint tells the person who continued a child agent's run on its
// own (keel approve continues the run it decided on) that the child's
// result goes to its lead, which goes on when resumed.
func (x *Execution) leadHint(created *agent.RunCreated, status journal.Status) {
	p := created.Parent
	if p == nil || status == journal.StatusPaused {
		return
	}
	fmt.Fprintf(x.Stderr, "keel: this run is a child agent of run %s; continue the team with: %s runs resume %s\n", p.Run, x.Keel, p.Root)
}
