package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// Team is the cluster's [agent.Launcher] (docs/teams.md, "Where children
// run"): a child of a run that a worker executes is a run of its own on
// the cluster, driven by its own workflow ([WorkflowID] of the child's
// id) on whichever worker claims it, like any run the server hands over.
// The child's run.created (its slice of the budget, its permissions) is
// journaled by the parent before Start, so the tree's budget and ceiling
// are the same as in one process. Start is idempotent: a parent's step
// retried after a worker died finds the child created, and its workflow
// running or the run ended. Wait follows the child's journal (shared by
// every worker), so a parent resumed on another worker waits for the
// same child.
//
// A parent's step that waits for children that have not ended holds no
// worker slot: the worker executes the parent with
// [agent.ExecParams].PauseForChildren, so the run pauses (reason
// children) and its workflow waits for a child's end to wake it
// ([Worker] signals it) or for [Driver].ChildRecheck.
type Team struct {
	// Runtime journals the children; Dispatcher starts their workflows.
	Runtime    *agent.Runtime
	Dispatcher *Dispatcher
	// ControlStream and CancelType are where Stop asks the worker
	// executing a child to stop it (the control stream the workers and
	// servers follow); empty, a child executing elsewhere is left to
	// end on its own.
	ControlStream string
	CancelType    journal.Type
	// Poll is how often Wait re-reads a child's journal; 0 means 200ms.
	Poll time.Duration

	once    sync.Once
	control *journal.Stream
}

var _ agent.Launcher = (*Team)(nil)

// causeParentEnded marks a cancel request that stops a child whose
// parent ended without waiting for it ([agent.ErrParentEnded]).
const causeParentEnded = "parent_ended"

// Start implements [agent.Launcher]: it creates the child run unless it
// exists and hands it to the workers unless it ended. A stop of the
// parent's execution by a person (not a shutdown: the parent moves to
// another worker, its children run on) stops the child with that cause.
func (t *Team) Start(ctx context.Context, id string, c *agent.RunCreated) error {
	rt := t.Runtime
	if _, err := rt.CreateAs(context.WithoutCancel(ctx), id, c); err != nil && !errors.Is(err, agent.ErrRunExists) {
		return err
	}
	st, _, err := rt.Load(context.WithoutCancel(ctx), id)
	if err != nil {
		return err
	}
	if st.Status.Terminal() {
		return nil
	}
	if err := t.Dispatcher.Dispatch(ctx, id); err != nil {
		return err
	}
	context.AfterFunc(ctx, func() {
		if cause := context.Cause(ctx); errors.Is(cause, agent.ErrUserCanceled) {
			_ = t.Stop(context.Background(), id, cause)
		}
	})
	return nil
}

// Wait implements [agent.Launcher]: it follows the child's journal
// until an end event, whichever worker executes it.
func (t *Team) Wait(ctx context.Context, id string) (*agent.State, error) {
	return (&agent.LocalTeam{Runtime: t.Runtime, Poll: t.Poll}).Wait(ctx, id)
}

// Stop implements [agent.Launcher]: a child a worker executes now is
// asked to stop through the control stream; one no process executes
// (between two steps, or waiting for a person) is ended canceled here,
// its own unfinished children first, and its workflow ends at its next
// look.
func (t *Team) Stop(ctx context.Context, id string, cause error) error {
	rt := t.Runtime
	st, _, err := rt.Load(ctx, id)
	if err != nil {
		return err
	}
	if st.Status.Terminal() {
		return nil
	}
	held := false
	if l, ok := rt.Store().(journal.Locker); ok {
		if h, err := l.Holder(ctx, id); err == nil && h != "" {
			held = true
		}
	}
	if !held {
		return (&agent.LocalTeam{Runtime: rt}).Stop(ctx, id, cause)
	}
	if t.ControlStream == "" {
		return nil
	}
	t.once.Do(func() {
		t.control = journal.NewStream(rt.Store(), t.ControlStream, nil, func(*journal.Event) error { return nil })
	})
	req := &cancelRequest{RunID: id, By: "its parent run"}
	if p := st.Created.Parent; p != nil {
		req.By = "its parent run " + p.Run
	}
	if errors.Is(cause, agent.ErrParentEnded) {
		req.Cause = causeParentEnded
	}
	if _, err := t.control.Append(ctx, t.CancelType, req, nil); err != nil {
		return fmt.Errorf("cluster: ask to stop child %s: %w", id, err)
	}
	return nil
}
