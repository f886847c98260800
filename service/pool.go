package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
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
	// ErrElsewhere is returned when a run is executed by another process
	// sharing the journal (a keel run or keel runs resume on the server's
	// machine), which this server cannot stop.
	ErrElsewhere = errors.New("server: run is executing in another process")
	// errCanceling is returned by submit while a cancel of the run is
	// being recorded: the cancel wins.
	errCanceling = fmt.Errorf("%w: a cancel is being recorded", ErrExecuting)
)

// pool executes runs with at most workers at once. A run is in at most one
// of three places: queued (waiting for a worker), active (a worker
// executes it), or neither (idle: paused, ended, or never submitted).
//
// Lock order: pool.mu, then nothing (the journal is never called with mu
// held).
type pool struct {
	rt         *agent.Runtime
	wire       agent.WireFunc
	principals policy.PrincipalCheck
	// sums gives a run's summary and run.created payload without reading
	// the whole journal again.
	sums *summaries
	// executable refuses runs this server must not execute at all (see
	// Service.executable).
	executable func(c *agent.RunCreated) error
	// leftToStarter, if set, says why the server leaves a run it did not
	// start to the process that did (see Service.leftToStarter): such a
	// run is executed only by a person's resume, which checks for
	// itself.
	leftToStarter func(c *agent.RunCreated) error
	logger        *slog.Logger
	base          context.Context // cancelled with agent.ErrShutdown

	mu     sync.Mutex
	cond   *sync.Cond
	queue  []job
	queued map[string]bool
	active map[string]*execution
	errs   map[string]string // last execution error per run
	// watchers are closed when a run's place in the pool changes (queued,
	// executing, idle), so that live summaries show it (see watch).
	watchers map[string]chan struct{}
	closing  bool
	wg       sync.WaitGroup

	stop context.CancelCauseFunc
	// live receives what executions stream before it is journaled (the
	// model's text); nil publishes nothing.
	live *liveHub
	// dispatcher, if set, hands runs to other processes
	// (Options.Dispatcher).
	dispatcher Dispatcher
	// inert marks the pool of a service that executes nothing (no
	// builder, no dispatcher): submitting is a no-op, and the process
	// that asked continues the run itself.
	inert bool
	// team executes the children of the runs this pool executes, in
	// this process (agent.LocalTeam), under their parents' executions.
	team *agent.LocalTeam
	// onDone, if set, is called after each execution (tests and metrics).
	onDone func(runID string, out *agent.Outcome, err error)
}

type job struct {
	runID   string
	message string
	// by and token name the person who asked for the execution and the
	// id of their API token (journaled in run.resumed and the message).
	by, token string
	// resume is a person's request to continue the run whatever its
	// state (a failed or canceled run too). Other jobs (after a decision,
	// a deadline, a restart) only continue a run that has not ended, and
	// only if no event was appended since they looked (so a cancel that
	// lands first wins).
	resume bool
	// change is what a person's resume replaces from now on (limits,
	// settings, context window), journaled in run.resumed.
	change
	// adopt marks a run the server adopted (no process held it).
	adopt bool
}

// change is what a resume replaces in a run from now on (see
// agent.ExecParams): nil or zero fields change nothing.
type change struct {
	limits        *agent.Limits
	settings      *agent.Settings
	contextWindow int
}

// carries reports whether j brings something of a person's that must
// not be lost: a message or a change.
func (j *job) carries() bool {
	return j.message != "" || j.limits != nil || j.settings != nil || j.contextWindow > 0
}

// execution is one run being executed.
type execution struct {
	cancel context.CancelCauseFunc
	// done is closed when the execution has ended.
	done chan struct{}
	// again asks for another execution when this one ends: an approval
	// arrived while the run was still pausing. next, if set, is a
	// person's resume that arrived while the execution was ending: it is
	// queued as it is (a plain submit would not continue a failed run).
	again bool
	next  *job
	// canceling marks a run whose cancel is being recorded without a
	// worker; no worker may take it meanwhile.
	canceling bool
}

func newPool(rt *agent.Runtime, wire agent.WireFunc, principals policy.PrincipalCheck, sums *summaries, executable func(*agent.RunCreated) error,
	workers int, logger *slog.Logger) *pool {
	base, stop := context.WithCancelCause(context.Background())
	p := &pool{rt: rt, wire: wire, principals: principals, sums: sums, executable: executable, logger: logger, base: base, stop: stop,
		queued: map[string]bool{}, active: map[string]*execution{}, errs: map[string]string{}, watchers: map[string]chan struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	if wire != nil {
		p.team = &agent.LocalTeam{Runtime: rt, Wire: wire, Params: func(_ string, cp *agent.ExecParams) {
			if cp.Principals == nil {
				cp.Principals = principals
			}
		}}
	}
	for range workers {
		p.wg.Add(1)
		go p.worker()
	}
	return p
}

// submit queues runID to continue: after a decision, a deadline or a
// restart. A run already queued keeps its place; a run that is executing
// is executed once more when it stops. It returns errCanceling while a
// cancel of the run is being recorded.
func (p *pool) submit(runID string) error { return p.enqueue(job{runID: runID}) }

// adoptRun is submit for a run no process holds (see Service.adopt).
func (p *pool) adoptRun(runID string) error { return p.enqueue(job{runID: runID, adopt: true}) }

// resume queues runID because person who asked to continue it, with
// message (added as a user message first, if not empty) and ch applied.
// A run that is executing cannot take a message or a change
// (ErrExecuting).
func (p *pool) resume(runID, message string, ch change, who *Caller) error {
	j := job{runID: runID, message: message, resume: true, change: ch}
	if who != nil {
		j.by, j.token = who.Name, who.ID
	}
	return p.enqueue(j)
}

// changedLocked wakes the watchers of runID; p.mu is held.
func (p *pool) changedLocked(runID string) {
	if ch := p.watchers[runID]; ch != nil {
		close(ch)
		delete(p.watchers, runID)
	}
}

// watch returns a channel that is closed when runID's place in the pool
// next changes, or nil when the run is neither queued nor executing (an
// idle run changes only when something submits it, which also appends to
// its journal).
func (p *pool) watch(runID string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.queued[runID] && p.active[runID] == nil {
		return nil
	}
	ch := p.watchers[runID]
	if ch == nil {
		ch = make(chan struct{})
		p.watchers[runID] = ch
	}
	return ch
}

func (p *pool) enqueue(j job) error {
	if p.inert {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return ErrShuttingDown
	}
	if x := p.active[j.runID]; x != nil {
		if x.canceling {
			return errCanceling
		}
		if j.carries() {
			return fmt.Errorf("%w: %s", ErrExecuting, j.runID)
		}
		x.again = true
		if j.resume {
			x.next = &j
		}
		return nil
	}
	if p.queued[j.runID] {
		if !j.adopt {
			// A decision or a restart's submit is not an adoption: the
			// run is dispatched as it asks.
			for i := range p.queue {
				if p.queue[i].runID == j.runID {
					p.queue[i].adopt = false
				}
			}
		}
		if !j.resume {
			return nil
		}
		for i := range p.queue {
			if p.queue[i].runID != j.runID {
				continue
			}
			if p.queue[i].carries() && j.carries() {
				// Never merge two people's messages or changes: the
				// second is refused, loudly.
				return fmt.Errorf("%w: %s is already queued to resume with a message or a change", ErrExecuting, j.runID)
			}
			if j.carries() || !p.queue[i].resume {
				p.queue[i] = j
			}
		}
		return nil
	}
	delete(p.errs, j.runID)
	p.queued[j.runID] = true
	p.queue = append(p.queue, j)
	p.changedLocked(j.runID)
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
		p.changedLocked(j.runID)
		p.mu.Unlock()

		out, err := p.safeExecute(ctx, j)
		cancel(nil)

		p.mu.Lock()
		delete(p.active, j.runID)
		if err != nil {
			p.errs[j.runID] = err.Error()
		}
		again, next := x.again && !p.closing, x.next
		close(x.done)
		p.changedLocked(j.runID)
		p.mu.Unlock()
		if p.onDone != nil {
			p.onDone(j.runID, out, err)
		}
		switch {
		case again && next != nil:
			_ = p.enqueue(*next)
		case again:
			_ = p.submit(j.runID)
		}
	}
}

// safeExecute is execute, except that a panic in it (a bug, say a model
// answer no one foresaw) ends that run failed with reason "internal"
// instead of the server: otherwise the run, resumed at every start, would
// crash the server again each time.
func (p *pool) safeExecute(ctx context.Context, j job) (out *agent.Outcome, err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		stack := debug.Stack()
		p.logger.Error("execution panicked; the run ends failed", "run_id", j.runID, "panic", fmt.Sprint(r), "stack", string(stack))
		msg := fmt.Sprintf("Keel failed executing this run (panic: %v); the server went on. Please report it with the server log.", r)
		p.failRun(ctx, j.runID, "internal", msg)
		out, err = nil, fmt.Errorf("server: execute run %s: panic: %v", j.runID, r)
	}()
	return p.execute(ctx, j)
}

// execute wires and executes one run.
func (p *pool) execute(ctx context.Context, j job) (*agent.Outcome, error) {
	log := p.logger.With("run_id", j.runID)
	stopped := func() bool { return ctx.Err() != nil }
	var ifLast int64
	if !j.resume {
		// Continue only a run that has not ended, and only from where it
		// is now: a cancel or another process's event that lands before
		// the execution starts wins (Execute checks IfLastSeq).
		r, err := p.sums.get(ctx, j.runID, 0)
		if err == nil && journal.Status(r.Status).Terminal() {
			return nil, nil
		}
		ifLast = r.Events
	}
	if p.dispatcher != nil {
		if j.carries() {
			return nil, errors.New("this server hands runs to workers (--temporal), which do not yet take a message, limits or settings with a resume")
		}
		dispatch := p.dispatcher.Dispatch
		if j.adopt {
			dispatch = p.dispatcher.Adopt
		}
		if err := dispatch(ctx, j.runID); err != nil {
			log.Error("hand the run to a worker", "err", err)
			return nil, err
		}
		log.Info("handed the run to the workers")
		return nil, nil
	}
	created, err := p.sums.created(ctx, j.runID)
	if err != nil {
		if stopped() {
			return nil, nil // shut down or canceled before it started
		}
		log.Error("load run", "err", err)
		return nil, errors.New("the run's journal cannot be read (see the server log)")
	}
	if p.leftToStarter != nil && !j.resume {
		if err := p.leftToStarter(created); err != nil {
			// Nothing is journaled: the run stays as the process that
			// started it left it, for that process to continue.
			log.Info("not executing run: it is left to the process that started it", "err", err)
			return nil, errors.New(notContinued(err, j.runID))
		}
	}
	if err := p.executable(created); err != nil {
		log.Warn("not executing run", "err", err)
		err = fmt.Errorf("this server does not execute the run: %w", err)
		if errors.Is(err, errUnconfined) {
			// Its workspace no longer passes the confinement check (a
			// directory was swapped for a symlink since it was admitted):
			// that does not fix itself, so the run stops failed with the
			// cause journaled, as for any setup failure.
			p.failSetup(ctx, j.runID, err.Error())
		}
		return nil, err
	}
	if j.settings != nil {
		// The tools are built with the settings the run has from now on.
		created = withSettings(created, j.settings)
	}
	wiring, closer, err := p.wire(ctx, created)
	if err != nil {
		if stopped() {
			return nil, nil
		}
		// A run that cannot be set up would fail the same way at every
		// attempt (and every restart): it stops failed, its reason
		// journaled, and can be resumed once the cause is fixed.
		log.Error("wire run", "err", err)
		p.failSetup(ctx, j.runID, "the server could not set up the run: "+err.Error())
		return nil, fmt.Errorf("the server could not set up the run: %w", err)
	}
	if closer != nil {
		defer closer.Close()
	}
	params := &agent.ExecParams{Wiring: *wiring, Message: j.message, By: j.by, Token: j.token}
	if j.limits != nil {
		params.Limits = j.limits
	}
	if j.settings != nil {
		params.Settings = j.settings
	}
	if j.contextWindow > 0 {
		params.ContextWindow = j.contextWindow
	}
	if p.team != nil {
		params.Team = p.team
	}
	// The server never waits inside an execution: a run that asks
	// pauses and leaves its worker, and a decision queues it again.
	params.IfLastSeq = ifLast
	if params.Principals == nil {
		params.Principals = p.principals
	}
	if p.live != nil {
		params.Trace = agent.ChainTrace(params.Trace, p.live.trace)
		params.OnEvent = p.live.journaled
		defer p.live.end(j.runID)
	}
	log.Info("execute run")
	out, err := p.rt.Execute(ctx, j.runID, params)
	if errors.Is(err, agent.ErrRunCompleted) || errors.Is(err, agent.ErrChildEnded) {
		return nil, nil
	}
	if err != nil {
		if errors.Is(err, agent.ErrRunBusy) {
			// Someone appended while this execution ran (or before it
			// started); the journal refused our append, so nothing is
			// torn. If it was an approval landing while the run paused,
			// execute again; if the run ended (a cancel), there is
			// nothing to do; otherwise another process executes it.
			st, _, lerr := p.rt.Load(context.WithoutCancel(ctx), j.runID)
			switch {
			case lerr == nil && st.Status.Terminal():
				return nil, nil
			case lerr == nil && (st.LastType == journal.ApprovalResolved || st.LastType == journal.AuthResolved):
				log.Info("approval arrived while the run paused; executing again")
				p.mu.Lock()
				if x := p.active[j.runID]; x != nil {
					x.again = true
				}
				p.mu.Unlock()
				return nil, nil
			}
			log.Warn("run is executed elsewhere", "err", err)
			return nil, ErrElsewhere
		}
		log.Error("execute run", "err", err)
		return nil, errors.New("the execution failed (see the server log)")
	}
	log.Info("run stopped", "status", out.Status)
	return out, nil
}

// failSetup ends run runID failed with reason "setup" and message, under
// the run's lease (so a run that another process executes is left to
// it); a failure to record is logged.
func (p *pool) failSetup(ctx context.Context, runID, message string) {
	p.failRun(ctx, runID, "setup", message)
}

// failRun ends run runID failed with reason and message, under its lease,
// whatever ctx's state.
func (p *pool) failRun(ctx context.Context, runID, reason, message string) {
	ctx = context.WithoutCancel(ctx)
	log := p.logger.With("run_id", runID)
	if l, ok := p.rt.Store().(journal.Locker); ok {
		unlock, err := l.Lock(ctx, runID)
		if err != nil {
			log.Warn("not recording the setup failure: the run's lease is held", "err", err)
			return
		}
		defer unlock()
	}
	if _, err := p.rt.Fail(ctx, runID, reason, message); err != nil {
		log.Error("record the failure", "err", err)
	}
}

// cancel stops run runID for person who. An executing run is canceled
// with cause agent.CanceledByToken (its executor journals run.canceled
// naming the person and their token) and waited for; if it stopped on its own meanwhile (it
// paused), or it was queued or idle, record is called with no worker
// allowed to take the run, and called again (up to five times) while it
// returns agent.ErrRunBusy because an event landed between its read and
// its append. It returns ErrExecuting when a cancel is already being
// recorded, and ctx's error if the execution does not stop before ctx is
// done.
func (p *pool) cancel(ctx context.Context, runID string, who *Caller, record func() error) error {
	p.mu.Lock()
	if x := p.active[runID]; x != nil {
		if x.canceling {
			p.mu.Unlock()
			return errCanceling
		}
		x.again, x.next = false, nil
		x.cancel(agent.CanceledByToken(who.Name, who.ID))
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
		return p.cancel(ctx, runID, who, record)
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
	p.changedLocked(runID)
	p.mu.Unlock()
	// No worker takes the run meanwhile, but a decision (or another
	// process) may append between record's read and its append: read
	// again and retry, so the cancel is never lost to an approval that
	// landed a moment earlier.
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = record(); !errors.Is(err, agent.ErrRunBusy) {
			break
		}
	}
	p.mu.Lock()
	close(p.active[runID].done)
	delete(p.active, runID)
	p.changedLocked(runID)
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
