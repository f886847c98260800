package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
)

// Pool errors.
var (
	// ErrExecuting is returned when an action needs a run that is not
	// executing (resume, a second cancel while one is recorded).
	ErrExecuting = errors.New("server: run is executing")
	// ErrShuttingDown is returned for work submitted after Shutdown began.
	ErrShuttingDown = errors.New("server: shutting down")
)

// WireFunc builds the live parts of one execution of the run that c
// describes: model client, tools, sandbox and policy. The returned
// Closer, if not nil, is closed when the execution ends.
type WireFunc func(ctx context.Context, c *agent.RunCreated) (*agent.ExecParams, io.Closer, error)

// pool executes runs with at most workers at once. A run is in at most one
// of three places: queued (waiting for a worker), active (a worker
// executes it), or neither (idle: paused, ended, or never submitted).
//
// Lock order: pool.mu, then nothing (the journal is never called with mu
// held).
type pool struct {
	rt         *agent.Runtime
	wire       WireFunc
	principals policy.PrincipalCheck
	// created returns a run's run.created payload (from the summaries,
	// without reading the whole journal again).
	created func(ctx context.Context, runID string) (*agent.RunCreated, error)
	logger  *slog.Logger
	base    context.Context // cancelled with agent.ErrShutdown

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []job
	queued  map[string]bool
	active  map[string]*execution
	errs    map[string]string // last execution error per run
	closing bool
	wg      sync.WaitGroup

	stop context.CancelCauseFunc
	// onDone, if set, is called after each execution (tests and metrics).
	onDone func(runID string, out *agent.Outcome, err error)
}

type job struct {
	runID   string
	message string
}

// execution is one run being executed.
type execution struct {
	cancel context.CancelCauseFunc
	// done is closed when the execution has ended.
	done chan struct{}
	// again asks for another execution when this one ends: an approval
	// arrived while the run was still pausing.
	again bool
	// canceling marks a run whose cancel is being recorded without a
	// worker; no worker may take it meanwhile.
	canceling bool
}

func newPool(rt *agent.Runtime, wire WireFunc, principals policy.PrincipalCheck, created func(context.Context, string) (*agent.RunCreated, error),
	workers int, logger *slog.Logger) *pool {
	base, stop := context.WithCancelCause(context.Background())
	p := &pool{rt: rt, wire: wire, principals: principals, created: created, logger: logger, base: base, stop: stop,
		queued: map[string]bool{}, active: map[string]*execution{}, errs: map[string]string{}}
	p.cond = sync.NewCond(&p.mu)
	for range workers {
		p.wg.Add(1)
		go p.worker()
	}
	return p
}

// submit queues runID for execution with message (added as a user message
// first, if not empty). A run already queued keeps its place; a run that
// is executing is executed once more when it stops, unless message is set
// (then ErrExecuting: a message cannot be added to a running turn).
func (p *pool) submit(runID, message string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return ErrShuttingDown
	}
	if x := p.active[runID]; x != nil {
		if message != "" || x.canceling {
			return fmt.Errorf("%w: %s", ErrExecuting, runID)
		}
		x.again = true
		return nil
	}
	if p.queued[runID] {
		return nil
	}
	delete(p.errs, runID)
	p.queued[runID] = true
	p.queue = append(p.queue, job{runID: runID, message: message})
	p.cond.Signal()
	return nil
}

// state reports whether runID is queued or executing, and its last
// execution error.
func (p *pool) state(runID string) (queued, executing bool, lastErr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	x := p.active[runID]
	return p.queued[runID], x != nil && !x.canceling, p.errs[runID]
}

// counts returns the number of queued and executing runs.
func (p *pool) counts() (queued, executing int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue), len(p.active)
}

func (p *pool) worker() {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		for len(p.queue) == 0 && !p.closing {
			p.cond.Wait()
		}
		if p.closing {
			p.mu.Unlock()
			return
		}
		j := p.queue[0]
		p.queue = p.queue[1:]
		delete(p.queued, j.runID)
		ctx, cancel := context.WithCancelCause(p.base)
		x := &execution{cancel: cancel, done: make(chan struct{})}
		p.active[j.runID] = x
		p.mu.Unlock()

		out, err := p.execute(ctx, j)
		cancel(nil)

		p.mu.Lock()
		delete(p.active, j.runID)
		if err != nil {
			p.errs[j.runID] = err.Error()
		}
		again := x.again && !p.closing
		close(x.done)
		p.mu.Unlock()
		if p.onDone != nil {
			p.onDone(j.runID, out, err)
		}
		if again {
			_ = p.submit(j.runID, "")
		}
	}
}

// execute wires and executes one run.
func (p *pool) execute(ctx context.Context, j job) (*agent.Outcome, error) {
	log := p.logger.With("run_id", j.runID)
	created, err := p.created(ctx, j.runID)
	if err != nil {
		if errors.Is(context.Cause(ctx), agent.ErrShutdown) {
			return nil, nil // shut down before it started: Start resumes it
		}
		log.Error("load run", "err", err)
		return nil, err
	}
	params, closer, err := p.wire(ctx, created)
	if err != nil {
		log.Error("wire run", "err", err)
		return nil, fmt.Errorf("server: prepare run %s: %w", j.runID, err)
	}
	if closer != nil {
		defer closer.Close()
	}
	params.Message = j.message
	// The server never waits inside an execution: a run that asks
	// pauses and leaves its worker, and a decision queues it again.
	params.Wait, params.OnWait, params.IfLastSeq = false, nil, 0
	if params.Principals == nil {
		params.Principals = p.principals
	}
	log.Info("execute run")
	out, err := p.rt.Execute(ctx, j.runID, params)
	if errors.Is(err, agent.ErrRunCompleted) {
		return nil, nil
	}
	if err != nil {
		if errors.Is(err, agent.ErrRunBusy) {
			// Someone appended while this execution ran; the journal
			// refused our append, so nothing is torn. If it was an
			// approval landing while the run paused, execute again;
			// otherwise another process executes the run.
			if st, _, lerr := p.rt.Load(context.WithoutCancel(ctx), j.runID); lerr == nil && st.LastType == journal.ApprovalResolved {
				log.Info("approval arrived while the run paused; executing again")
				p.mu.Lock()
				if x := p.active[j.runID]; x != nil {
					x.again = true
				}
				p.mu.Unlock()
				return nil, nil
			}
			log.Warn("run is executed elsewhere", "err", err)
			return nil, err
		}
		log.Error("execute run", "err", err)
		return nil, err
	}
	log.Info("run stopped", "status", out.Status)
	return out, nil
}

// cancel stops run runID. An executing run is canceled with cause
// agent.ErrUserCanceled (its executor journals run.canceled) and waited
// for; if it stopped on its own meanwhile (it paused), or it was queued
// or idle, record is called with no worker allowed to take the run. It
// returns ErrExecuting when a cancel is already being recorded, and
// ctx's error if the execution does not stop before ctx is done.
func (p *pool) cancel(ctx context.Context, runID string, record func() error) error {
	p.mu.Lock()
	if x := p.active[runID]; x != nil {
		if x.canceling {
			p.mu.Unlock()
			return fmt.Errorf("%w: a cancel is being recorded", ErrExecuting)
		}
		x.again = false
		x.cancel(agent.ErrUserCanceled)
		p.mu.Unlock()
		select {
		case <-x.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		p.mu.Lock()
	}
	if p.active[runID] != nil {
		// Someone resumed it in between: cancel that execution instead.
		p.mu.Unlock()
		return p.cancel(ctx, runID, record)
	}
	if p.queued[runID] {
		delete(p.queued, runID)
		for i, j := range p.queue {
			if j.runID == runID {
				p.queue = append(p.queue[:i], p.queue[i+1:]...)
				break
			}
		}
	}
	p.active[runID] = &execution{canceling: true, cancel: func(error) {}, done: make(chan struct{})}
	p.mu.Unlock()
	err := record()
	p.mu.Lock()
	close(p.active[runID].done)
	delete(p.active, runID)
	p.mu.Unlock()
	return err
}

// shutdown stops taking work, cancels every execution with cause
// agent.ErrShutdown (each executor journals run.paused) and waits for the
// workers until ctx is done.
func (p *pool) shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.closing = true
	p.cond.Broadcast()
	p.mu.Unlock()
	p.stop(agent.ErrShutdown)
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("server: shutdown: executions still running: %w", context.Cause(ctx))
	}
}
