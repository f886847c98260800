package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/keel-run/keel/journal"
)

// LocalTeam is a [Launcher] that executes children in this process, each
// with live parts from Wire: keel run, and the team server's pool. A
// child it starts runs until it ends (or its parent's execution is
// stopped, which stops it with the same cause); a child that a crash
// left unfinished is executed again by the next Start of it, which the
// parent's resumed spawn or wait makes.
type LocalTeam struct {
	// Runtime journals and executes the children; required.
	Runtime *Runtime
	// Wire builds each child execution's live parts; required. The
	// team sets itself as the children's Team.
	Wire WireFunc
	// Params, if set, completes each child's ExecParams (principal
	// checks, telemetry) before it executes.
	Params func(id string, p *ExecParams)
	// Poll is how often Wait re-reads a child's journal; 0 means 200ms.
	Poll time.Duration
	// ReturnPaused makes Wait return a child that paused and that no
	// execution drives (it waits for a person: an approval, an input, a
	// credential) instead of waiting for its end. keel run sets it: a
	// child paused there goes on only once a person decided and the
	// tree is resumed, so its parent pauses too ([ExecParams] of a team
	// call: the call stays open).
	ReturnPaused bool

	mu      sync.Mutex
	running map[string]*execution
	wg      sync.WaitGroup
}

// execution is a child this team executes.
type execution struct {
	done chan struct{}
	stop context.CancelCauseFunc
}

var _ Launcher = (*LocalTeam)(nil)

// Start implements [Launcher].
func (t *LocalTeam) Start(ctx context.Context, id string, c *RunCreated) error {
	rt := t.Runtime
	if _, err := rt.CreateAs(context.WithoutCancel(ctx), id, c); err != nil && !errors.Is(err, ErrRunExists) {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.running[id]; ok {
		return nil
	}
	st, _, err := rt.Load(context.WithoutCancel(ctx), id)
	if err != nil {
		return err
	}
	if st.Status.Terminal() {
		return nil
	}
	if l, ok := rt.Store().(journal.Locker); ok {
		if h, err := l.Holder(ctx, id); err == nil && h != "" {
			return nil // another process executes it
		}
	}
	if t.running == nil {
		t.running = map[string]*execution{}
	}
	done := make(chan struct{})
	// The child outlives the call that started it, but not its parent's
	// execution: a stop of that (a cancel, a shutdown, a time limit)
	// stops the child with the same cause. A context merely released
	// after the parent's execution returned (a server's worker does,
	// when the parent paused for a person) carries no cause, and leaves
	// the child working.
	cctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	t.running[id] = &execution{done: done, stop: cancel}
	stop := context.AfterFunc(ctx, func() {
		if cause := context.Cause(ctx); cause != context.Canceled {
			cancel(cause)
		}
	})
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer func() {
			stop()
			cancel(nil)
			t.mu.Lock()
			delete(t.running, id)
			t.mu.Unlock()
			close(done)
		}()
		t.execute(cctx, id, st.Created)
	}()
	return nil
}

// execute runs child id until it ends or pauses; a child that cannot be
// set up fails with the reason journaled, so that its parent is given
// that as its result.
func (t *LocalTeam) execute(ctx context.Context, id string, c *RunCreated) {
	rt := t.Runtime
	w, closer, err := t.Wire(ctx, c)
	if err != nil {
		_, _ = rt.Fail(context.WithoutCancel(ctx), id, ReasonSetup, "the child could not be set up: "+err.Error())
		return
	}
	if closer != nil {
		defer closer.Close()
	}
	w.Team = t
	p := &ExecParams{Wiring: *w}
	if t.Params != nil {
		t.Params(id, p)
	}
	if _, err := rt.Execute(ctx, id, p); err != nil && !errors.Is(err, ErrRunBusy) && !errors.Is(err, ErrRunCompleted) && !errors.Is(err, ErrChildEnded) {
		rt.logger.Error("child execution", "run_id", id, "err", err)
		_, _ = rt.Fail(context.WithoutCancel(ctx), id, ReasonSetup, "the child's execution failed: "+err.Error())
	}
}

// Wait implements [Launcher]: it follows the child's journal until an
// end event (any process may execute the child); with ReturnPaused, also
// until the child is paused and no execution drives it.
func (t *LocalTeam) Wait(ctx context.Context, id string) (*State, error) {
	poll := t.Poll
	if poll <= 0 {
		poll = waitPoll
	}
	if !t.ReturnPaused {
		for e, err := range journal.Follow(ctx, t.Runtime.Store(), id, 1, poll) {
			if err != nil {
				return nil, err
			}
			if journal.StatusOf(e.Type).Terminal() {
				break
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return t.load(ctx, id)
	}
	from := int64(1)
	for {
		t.mu.Lock()
		e := t.running[id]
		t.mu.Unlock()
		var done <-chan struct{}
		if e != nil {
			done = e.done
		} else {
			st, err := t.load(ctx, id)
			if err != nil {
				return nil, err
			}
			if st.Status.Terminal() || st.Status == journal.StatusPaused && !t.held(ctx, id) {
				return st, nil
			}
		}
		// Follow the journal until the child ends, or its execution
		// here returns, or (driven elsewhere, or by nobody) it pauses;
		// then look again.
		fctx, cancel := context.WithCancel(ctx)
		if done != nil {
			go func() {
				select {
				case <-done:
					cancel()
				case <-fctx.Done():
				}
			}()
		}
		var ferr error
		for ev, err := range journal.Follow(fctx, t.Runtime.Store(), id, from, poll) {
			if err != nil {
				ferr = err
				break
			}
			from = ev.Seq + 1
			s := journal.StatusOf(ev.Type)
			if s.Terminal() || done == nil && s == journal.StatusPaused {
				break
			}
		}
		stopped := fctx.Err() != nil
		cancel()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if ferr != nil && !stopped {
			return nil, ferr
		}
		if done == nil {
			// Ended or paused: the look above returns it, unless another
			// process drives it (then follow on).
			if st, err := t.load(ctx, id); err != nil || st.Status.Terminal() {
				return st, err
			}
		}
	}
}

// executes reports whether this team executes child id now.
func (t *LocalTeam) executes(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.running[id] != nil
}

// load folds child id's journal.
func (t *LocalTeam) load(ctx context.Context, id string) (*State, error) {
	st, _, err := t.Runtime.Load(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("agent: wait for child %s: %w", id, err)
	}
	return st, nil
}

// held reports whether another process executes run id (holds its
// lease).
func (t *LocalTeam) held(ctx context.Context, id string) bool {
	if l, ok := t.Runtime.Store().(journal.Locker); ok {
		if h, err := l.Holder(ctx, id); err == nil && h != "" {
			return true
		}
	}
	return false
}

// Stop implements [Launcher]: a child this team executes is stopped
// with cause; one that no process executes and that has not ended (left
// by a crash) is ended canceled here, its own unfinished children first.
// A child another process executes is left to it.
func (t *LocalTeam) Stop(ctx context.Context, id string, cause error) error {
	t.mu.Lock()
	e := t.running[id]
	t.mu.Unlock()
	if e != nil {
		e.stop(cause)
		return nil
	}
	rt := t.Runtime
	st, _, err := rt.Load(ctx, id)
	if err != nil {
		return err
	}
	if st.Status.Terminal() {
		return nil
	}
	if l, ok := rt.Store().(journal.Locker); ok {
		if h, err := l.Holder(ctx, id); err == nil && h != "" {
			return nil // another process executes it
		}
	}
	for _, c := range st.Children {
		if c.Delivered == nil {
			if err := t.Stop(ctx, c.ID, cause); err != nil {
				return err
			}
		}
	}
	reason, msg := ReasonUser, "canceled: "+cause.Error()
	if errors.Is(cause, ErrParentEnded) {
		reason, msg = ReasonParentEnded, "its parent ended without waiting for its result"
	}
	if _, err := rt.end(ctx, id, journal.RunCanceled, &RunEnded{Reason: reason, Message: msg}); err != nil && !errors.Is(err, ErrRunCompleted) {
		return err
	}
	return nil
}

// Close waits for the children this team executes to end their
// executions (stop their parents' contexts first to make them stop).
func (t *LocalTeam) Close() error {
	t.wg.Wait()
	return nil
}
