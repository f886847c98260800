package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/keel-run/keel/journal"
)

// Cancel ends a run that no one is executing (paused, failed, or
// interrupted) as canceled, without a model or sandbox: every call of its
// open turn gets a synthetic result first, as when an execution is
// canceled, so no call is left without one. by names who canceled it (a
// person), recorded in the run.canceled message; "" means "user".
//
// It returns [ErrRunCompleted] for a completed run, nil for a run already
// canceled, and an error wrapping [ErrRunBusy] if another process appended
// to the run meanwhile. To cancel a run that is executing, cancel the
// context of its [Runtime.Execute] with cause [ErrUserCanceled] instead.
func (rt *Runtime) Cancel(ctx context.Context, runID, by string) (*State, error) {
	return rt.CancelByToken(ctx, runID, by, "")
}

// CancelByToken is [Runtime.Cancel] that also records, in the
// run.canceled event's By and Token fields, the person and the id of the
// API token they canceled with (the team server).
func (rt *Runtime) CancelByToken(ctx context.Context, runID, by, token string) (*State, error) {
	who := by
	if who == "" {
		who = "user"
	}
	return rt.end(ctx, runID, journal.RunCanceled, &RunEnded{Reason: ReasonUser, Message: "canceled by " + who, By: by, Token: token})
}

// Fail ends a run that no one is executing as failed, with reason and
// message in its run.failed event, without a model or sandbox: every call
// of its open turn gets a synthetic result first. The team server uses it
// for a run it cannot execute at all (its model, sandbox or workspace
// cannot be set up), so that the run stops with its reason journaled
// instead of waiting forever; the run can be resumed once the cause is
// fixed. It returns [ErrRunCompleted] for a completed run, nil for a run
// already failed or canceled, and an error wrapping [ErrRunBusy] if
// another process appended to the run meanwhile.
func (rt *Runtime) Fail(ctx context.Context, runID, reason, message string) (*State, error) {
	return rt.end(ctx, runID, journal.RunFailed, &RunEnded{Reason: reason, Message: message})
}

// end appends the results of the open turn's unfinished calls and then an
// end event of type typ.
func (rt *Runtime) end(ctx context.Context, runID string, typ journal.Type, ended *RunEnded) (*State, error) {
	msg := ended.Message
	st, _, err := rt.Load(ctx, runID)
	if err != nil {
		return nil, fmt.Errorf("agent: end run %s: %w", runID, err)
	}
	switch {
	case st.Status == journal.StatusCompleted:
		return st, fmt.Errorf("agent: end run %s: %w", runID, ErrRunCompleted)
	case st.Status == journal.StatusCanceled, st.Status == journal.StatusFailed && typ == journal.RunFailed:
		return st, nil
	}
	x := &executor{rt: rt, p: &ExecParams{}, st: st, runID: runID}
	if err := x.closeOpenCalls(ctx, msg); err != nil {
		return nil, err
	}
	if typ == journal.RunCanceled {
		if err := x.cancelChildren(ctx, msg); err != nil {
			return nil, err
		}
	}
	if err := x.append(ctx, typ, ended); err != nil {
		return nil, err
	}
	return x.st, nil
}

// cancelChildren ends the children of a run canceled while no process
// executes it (keel runs cancel of a paused lead): each child not
// delivered yet that no process executes is canceled too (its own
// children first), and its result is journaled in the run as
// child.delivered given to no call (Unwaited), so that the run counts
// what the child spent instead of its whole slice. A child another
// process executes is left to it (its parent's cancel reaches it from
// there, or through the cluster's control stream).
func (x *executor) cancelChildren(ctx context.Context, why string) error {
	var ids []string
	for _, c := range x.st.Children {
		if c.Delivered == nil {
			ids = append(ids, c.ID)
		}
	}
	for _, id := range ids {
		st, _, err := x.rt.Load(ctx, id)
		switch {
		case errors.Is(err, journal.ErrNotFound):
			// Reserved, never created (a crash between the two): nothing
			// ran, nothing was spent.
			st = &State{RunID: id, Status: journal.StatusCanceled, Ended: &RunEnded{Reason: ReasonUser, Message: "its parent was canceled before it started"}}
		case err != nil:
			return fmt.Errorf("agent: cancel child %s: %w", id, err)
		case !st.Status.Terminal():
			var unlock func()
			if l, ok := x.rt.store.(journal.Locker); ok {
				if unlock, err = l.Lock(ctx, id); errors.Is(err, journal.ErrLocked) {
					continue // another process executes it
				} else if err != nil {
					return err
				}
			}
			st, err = x.rt.end(ctx, id, journal.RunCanceled, &RunEnded{Reason: ReasonUser, Message: fmt.Sprintf("its parent run %s was canceled (%s)", x.runID, why)})
			if unlock != nil {
				unlock()
			}
			if errors.Is(err, ErrRunCompleted) {
				err = nil // it completed meanwhile: deliver that
			}
			if err != nil {
				return fmt.Errorf("agent: cancel child %s: %w", id, err)
			}
		}
		d := childResult("", id, st)
		d.Unwaited = true
		if err := x.append(ctx, journal.ChildDelivered, d); err != nil {
			return err
		}
	}
	return nil
}
