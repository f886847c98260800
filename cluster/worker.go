package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
)

// WorkerOptions configure [NewWorker].
type WorkerOptions struct {
	// Wire builds the live parts of a run's execution, as the server's
	// does; required. The Closer it returns, if not nil, is closed when
	// the worker lets the run go.
	Wire agent.WireFunc
	// Principals is the gate's principal check (the identity directory).
	Principals policy.PrincipalCheck
	// Driver is the workflow's configuration; it must be the same on
	// every worker.
	Driver Driver
	// Slots is the number of steps this worker executes at once;
	// default 8.
	Slots int
	// ControlStream, if set, is followed for cancel requests of the runs
	// this worker executes (service.ControlStream).
	ControlStream string
	// CancelType is the event type of a cancel request in ControlStream.
	CancelType journal.Type
	// Team starts and follows the children of the runs this worker
	// executes; nil means a [Team] over the worker's Temporal client
	// (set by [Worker.Run]), with ControlStream and CancelType.
	Team   agent.Launcher
	Logger *slog.Logger
}

// Worker executes runs' steps. Its Claim and Step methods are the
// activities; [Worker.Run] polls Temporal.
type Worker struct {
	rt    *agent.Runtime
	opts  WorkerOptions
	queue string
	log   *slog.Logger

	mu sync.Mutex
	// live holds the wired execution of each run this worker holds
	// (pinned to it): its sandbox stays up between steps.
	live map[string]*liveRun
	// active holds each executing step.
	active map[string]*activeStep
	// client is the Temporal client of Run: a child's end wakes its
	// parent's workflow through it.
	client client.Client
}

// activeStep is a step executing on this worker.
type activeStep struct {
	cancel context.CancelCauseFunc
	// done is closed when the step has returned; failed tells then
	// whether it returned an error, res what it returned otherwise.
	done   chan struct{}
	failed bool
	res    StepResult
}

type liveRun struct {
	wiring *agent.Wiring
	closer io.Closer
	// cp is where the run's previous step here left it: the next step
	// reads only the journal after it. Only the step executing the run
	// uses it.
	cp *agent.Checkpoint
}

// NewWorker returns a worker over rt's journal. Its own task queue is
// "keel-worker-HOST-PID-RANDOM".
func NewWorker(rt *agent.Runtime, opts *WorkerOptions) *Worker {
	w := &Worker{rt: rt, opts: *opts, live: map[string]*liveRun{}, active: map[string]*activeStep{}}
	host, _ := os.Hostname()
	var b [4]byte
	rand.Read(b[:])
	w.queue = fmt.Sprintf("keel-worker-%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	w.log = opts.Logger
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if w.opts.Slots <= 0 {
		w.opts.Slots = 8
	}
	return w
}

// Queue returns the worker's own task queue.
func (w *Worker) Queue() string { return w.queue }

// Register registers the workflow and the claim activity on the shared
// worker and the step activity on the pinned one (both may be the same
// registry, as in tests).
func (w *Worker) Register(shared, pinned worker.Registry) {
	d := w.opts.Driver
	shared.RegisterWorkflowWithOptions(d.Run, workflow.RegisterOptions{Name: WorkflowName})
	shared.RegisterActivityWithOptions(w.Claim, activity.RegisterOptions{Name: ClaimActivity})
	pinned.RegisterActivityWithOptions(w.Step, activity.RegisterOptions{Name: StepActivity})
	pinned.RegisterActivityWithOptions(w.Ping, activity.RegisterOptions{Name: PingActivity})
}

// Ping is the liveness activity, answered on the worker's liveness queue
// ([AliveSuffix]) while its step slots may all be taken.
func (w *Worker) Ping(ctx context.Context) error { return nil }

// Claim is the claim activity: the run is pinned to this worker, whose
// task queue it returns.
func (w *Worker) Claim(ctx context.Context, runID string) (string, error) {
	return w.queue, nil
}

// Step is the step activity: it executes run in.RunID from its journal
// until the model call after the first one (a model call and the
// gate-and-tools batch it asks for; first the batch a previous step
// left, if any), or until the run pauses or ends, and returns where the
// journal ends.
// It is idempotent by sequence number: a retry finds the events an
// earlier attempt appended and goes on from them.
func (w *Worker) Step(ctx context.Context, in StepInput) (StepResult, error) {
	if (in.Woken || in.Recheck) && in.AfterSeq > 0 {
		if res, ok, err := w.unchanged(ctx, &in); err != nil || ok {
			return res, err
		}
	}
	if in.Children && in.AfterSeq > 0 {
		if res, ok, err := w.childrenRunning(ctx, &in); err != nil || ok {
			return res, err
		}
	}
	if in.AfterSeq > 0 {
		// A run that ended after the workflow last saw it (a person
		// canceled it between two steps, or while it waited) is not
		// executed again: executing would resume it. A person's resume
		// is journaled (run.resumed) before the workflow is woken.
		if res, ok, err := w.endedSince(ctx, &in); err != nil || ok {
			return res, err
		}
	}
	attempt := activity.GetInfo(ctx).Attempt
	fresh := in.Fresh || attempt > 1
	// The execution's own context: Temporal canceling the activity (a
	// timeout, the worker stopping) pauses the run; a person's cancel
	// (the control stream) cancels it.
	xctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() { cancel(agent.ErrShutdown) })
	defer stop()
	// Heartbeats from the start: wiring a sandbox on a starved host may
	// take longer than the heartbeat timeout.
	hbDone := make(chan struct{})
	defer close(hbDone)
	go func() {
		t := time.NewTicker(max(orDefault(w.opts.Driver.Heartbeat, 20*time.Second)/4, 100*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-hbDone:
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	step := &activeStep{cancel: cancel, done: make(chan struct{}), failed: true}
	for {
		w.mu.Lock()
		prev := w.active[in.RunID]
		if prev == nil {
			w.active[in.RunID] = step
		}
		w.mu.Unlock()
		if prev == nil {
			break
		}
		// An earlier step of the run (an earlier attempt of this one,
		// whose heartbeat was late on a starved host) still executes
		// here: its worker is not gone. Taking the run over from it would
		// close the sandbox under its command and journal run.resumed;
		// this step waits for it and goes on where it left the journal.
		if err := w.await(ctx, prev); err != nil {
			return StepResult{}, err
		}
		if attempt > 1 && !prev.failed {
			if prev.res.Status != journal.StatusRunning {
				return prev.res, nil // it paused or ended the run
			}
			fresh = false
		}
	}
	defer func() {
		w.mu.Lock()
		if w.active[in.RunID] == step {
			delete(w.active, in.RunID)
		}
		w.mu.Unlock()
		close(step.done)
	}()
	if attempt > 1 && fresh && w.leftHere(ctx, in.RunID) {
		// The earlier attempt ended here and nothing was journaled since
		// (its result came too late for Temporal): this attempt goes on
		// from it.
		fresh = false
	}
	lr, err := w.wired(ctx, in.RunID, fresh)
	if err != nil {
		var ce *journal.CorruptError
		if errors.As(err, &ce) {
			return StepResult{}, temporal.NewNonRetryableApplicationError(err.Error(), fatalError, err)
		}
		return StepResult{}, err
	}
	// The journal must hold what the workflow saw last. When this worker
	// left the run there (the checkpoint of its previous step), the
	// execution below checks it, reading only what came after it.
	from := lr.cp
	lr.cp = nil
	if from != nil && (from.State.LastSeq != in.AfterSeq || from.Hash != in.AfterHash) {
		from = nil
	}
	if from == nil && in.AfterSeq > 0 {
		evs, err := w.rt.Store().Read(ctx, in.RunID, in.AfterSeq)
		if err != nil && !errors.Is(err, journal.ErrNotFound) {
			return StepResult{}, err
		}
		if len(evs) == 0 || (in.AfterHash != "" && evs[0].Hash != in.AfterHash) {
			w.release(in.RunID)
			return StepResult{}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("run %s: the journal does not hold event %d as the workflow saw it", in.RunID, in.AfterSeq), fatalError, err)
		}
	}
	p := agent.ExecParams{Wiring: *lr.wiring, Continue: !fresh, From: from}
	if p.Principals == nil {
		p.Principals = w.opts.Principals
	}
	if p.Team == nil {
		w.mu.Lock()
		p.Team = w.opts.Team
		w.mu.Unlock()
	}
	if _, ok := p.Team.(*Team); ok {
		// A team call waiting for children that run on the cluster
		// pauses the run: its worker slot is free for them, and a
		// child's end wakes the run's workflow (wakeParent).
		p.PauseForChildren = true
	}
	// One step: a model call and the gate-and-tools batch it asks for
	// (or, first, the batch a previous step left). Each activity is
	// several round trips through Temporal's history; a step per
	// activity halves them against one action per activity.
	models := 0
	p.Yield = func(a agent.Action) bool {
		if a.Kind == agent.ActCallModel {
			if models > 0 {
				return true
			}
			models++
		}
		return false
	}
	out, err := w.rt.Execute(xctx, in.RunID, &p)
	if errors.Is(err, agent.ErrRunCompleted) || errors.Is(err, agent.ErrChildEnded) {
		err = nil // it ended before this step: nothing to execute
		out = nil
	}
	if err != nil {
		w.release(in.RunID)
		if errors.Is(err, agent.ErrRunBusy) {
			return StepResult{}, fmt.Errorf("run %s is executed elsewhere now: %w", in.RunID, err)
		}
		return StepResult{}, err
	}
	var cp *agent.Checkpoint
	if out != nil {
		cp = out.Checkpoint
	} else {
		// Completed before this step: nothing was executed.
		st, evs, err := w.rt.Load(ctx, in.RunID)
		if err != nil {
			w.release(in.RunID)
			return StepResult{}, err
		}
		cp = &agent.Checkpoint{State: st, Hash: evs[len(evs)-1].Hash}
	}
	st := cp.State
	res := StepResult{LastSeq: st.LastSeq, LastHash: cp.Hash, Status: st.Status}
	if st.Ended != nil {
		res.Reason = st.Ended.Reason
	}
	res.Waiting = res.Status == journal.StatusPaused && (len(st.Pending()) > 0 || len(st.PendingAuths()) > 0)
	if res.Status.Terminal() && st.Created.Parent != nil {
		w.wakeParent(ctx, in.RunID, st.Created.Parent.Run)
	}
	if res.Status != journal.StatusRunning {
		// Paused or ended: the run holds nothing here while it waits.
		w.release(in.RunID)
	} else {
		lr.cp = cp
	}
	step.failed, step.res = false, res
	return res, nil
}

// unchanged reports whether a look at a run waiting for decisions (see
// [StepInput.Woken] and [StepInput.Recheck]) finds nothing to do: nothing
// journaled since the run paused, and, for the timer's look, no
// decision's deadline passed. Executing would only journal run.resumed
// and run.paused again. Its result is then the run as the workflow saw
// it.
func (w *Worker) unchanged(ctx context.Context, in *StepInput) (StepResult, bool, error) {
	evs, err := w.rt.Store().Read(ctx, in.RunID, in.AfterSeq)
	if err != nil && !errors.Is(err, journal.ErrNotFound) {
		return StepResult{}, false, err
	}
	if len(evs) != 1 || evs[0].Hash != in.AfterHash || journal.StatusOf(evs[0].Type) != journal.StatusPaused {
		return StepResult{}, false, nil
	}
	same := StepResult{LastSeq: in.AfterSeq, LastHash: in.AfterHash, Status: journal.StatusPaused, Waiting: true}
	if in.Woken {
		return same, true, nil
	}
	st, _, err := w.rt.Load(ctx, in.RunID)
	if err != nil || st.LastSeq != in.AfterSeq {
		return StepResult{}, false, err
	}
	if len(st.PendingAuths()) > 0 {
		return StepResult{}, false, nil
	}
	now := time.Now()
	for _, p := range st.Pending() {
		if p.Expires != nil && !p.Expires.After(now) {
			return StepResult{}, false, nil
		}
	}
	if st.Ended != nil {
		same.Reason = st.Ended.Reason
	}
	return same, true, nil
}

// childrenRunning reports whether a look at a run paused for its
// children (see [StepInput].Children) finds nothing to do: nothing
// journaled since the run paused, and none of its children that were not
// delivered yet has ended. Its result is then the run as the workflow
// saw it.
func (w *Worker) childrenRunning(ctx context.Context, in *StepInput) (StepResult, bool, error) {
	evs, err := w.rt.Store().Read(ctx, in.RunID, in.AfterSeq)
	if err != nil && !errors.Is(err, journal.ErrNotFound) {
		return StepResult{}, false, err
	}
	if len(evs) != 1 || evs[0].Hash != in.AfterHash || evs[0].Type != journal.RunPaused {
		return StepResult{}, false, nil
	}
	st, _, err := w.rt.Load(ctx, in.RunID)
	if err != nil || st.LastSeq != in.AfterSeq || st.Ended == nil || st.Ended.Reason != reasonChildren {
		return StepResult{}, false, err
	}
	for _, ch := range st.Children {
		if ch.Delivered != nil {
			continue
		}
		cst, _, err := w.rt.Load(ctx, ch.ID)
		if errors.Is(err, journal.ErrNotFound) {
			return StepResult{}, false, nil // not created yet: the call starts it
		}
		if err != nil {
			return StepResult{}, false, err
		}
		if cst.Status.Terminal() {
			return StepResult{}, false, nil
		}
	}
	return StepResult{LastSeq: in.AfterSeq, LastHash: in.AfterHash, Status: journal.StatusPaused, Reason: reasonChildren}, true, nil
}

// stopChildren stops the children of run id, which ended as status
// while no process executed it (a person canceled it while it waited
// for them, paused): the subtree follows its root, canceled with it, or
// stopped as children whose parent ended.
func (w *Worker) stopChildren(ctx context.Context, id string, status journal.Status) {
	w.mu.Lock()
	team := w.opts.Team
	w.mu.Unlock()
	if team == nil {
		return
	}
	st, _, err := w.rt.Load(ctx, id)
	if err != nil {
		w.log.Error("load an ended run to stop its children", "run_id", id, "err", err)
		return
	}
	cause := agent.ErrParentEnded
	if status == journal.StatusCanceled {
		cause = agent.CanceledByToken("its parent run "+id, "")
	}
	for _, ch := range st.Children {
		if ch.Delivered != nil {
			continue
		}
		if err := team.Stop(ctx, ch.ID, cause); err != nil {
			w.log.Error("stop a child of an ended run", "run_id", id, "child", ch.ID, "err", err)
		}
	}
}

// wakeParent wakes the workflow of run parent, whose child id ended: a
// parent paused for its children looks at them again. A wake-up lost
// (this worker dies now) is made up for by the parent's ChildRecheck.
func (w *Worker) wakeParent(ctx context.Context, id, parent string) {
	w.mu.Lock()
	c := w.client
	w.mu.Unlock()
	if c == nil {
		return
	}
	if err := c.SignalWorkflow(context.WithoutCancel(ctx), WorkflowID(parent), "", WakeSignal, nil); err != nil {
		// Its workflow ended (the parent ended too): nothing waits.
		w.log.Debug("wake the parent of an ended child", "run_id", id, "parent", parent, "err", err)
	}
}

// endedSince reports whether run in.RunID's newest event, after
// in.AfterSeq, ended it; its result is then the run as it ended.
func (w *Worker) endedSince(ctx context.Context, in *StepInput) (StepResult, bool, error) {
	evs, err := w.rt.Store().Read(ctx, in.RunID, in.AfterSeq+1)
	if err != nil && !errors.Is(err, journal.ErrNotFound) {
		return StepResult{}, false, err
	}
	if len(evs) == 0 {
		return StepResult{}, false, nil
	}
	last := evs[len(evs)-1]
	st := journal.StatusOf(last.Type)
	if !st.Terminal() {
		return StepResult{}, false, nil
	}
	w.release(in.RunID)
	w.log.Info("the run ended since its last step; not executing it", "run_id", in.RunID, "status", st)
	w.stopChildren(ctx, in.RunID, st)
	if first, err := w.rt.Store().Read(ctx, in.RunID, 1); err == nil && len(first) > 0 && first[0].Type == journal.RunCreated {
		var c agent.RunCreated
		if json.Unmarshal(first[0].Payload, &c) == nil && c.Parent != nil {
			w.wakeParent(ctx, in.RunID, c.Parent.Run)
		}
	}
	return StepResult{LastSeq: last.Seq, LastHash: last.Hash, Status: st}, true, nil
}

// leftHere reports whether this worker holds run runID and its journal
// ends where this worker's last step left it: no one else executed it
// since.
func (w *Worker) leftHere(ctx context.Context, runID string) bool {
	w.mu.Lock()
	lr := w.live[runID]
	w.mu.Unlock()
	if lr == nil || lr.cp == nil {
		return false
	}
	evs, err := w.rt.Store().Read(ctx, runID, lr.cp.State.LastSeq)
	return err == nil && len(evs) == 1 && evs[0].Hash == lr.cp.Hash
}

// await waits, heartbeating, until the earlier step prev has returned.
func (w *Worker) await(ctx context.Context, prev *activeStep) error {
	t := time.NewTicker(max(orDefault(w.opts.Driver.Heartbeat, 20*time.Second)/4, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-prev.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			activity.RecordHeartbeat(ctx)
		}
	}
}

// wired returns the run's live execution on this worker, wiring it when
// there is none (the first step here, or after a pause). A fresh step
// wires anew: whatever a previous holder left is not trusted.
func (w *Worker) wired(ctx context.Context, runID string, fresh bool) (*liveRun, error) {
	w.mu.Lock()
	lr := w.live[runID]
	w.mu.Unlock()
	if lr != nil && !fresh {
		return lr, nil
	}
	w.release(runID)
	evs, err := w.rt.Store().Read(ctx, runID, 1)
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 || evs[0].Type != journal.RunCreated {
		return nil, &journal.CorruptError{RunID: runID, Seq: 1, Reason: "the run does not start with run.created"}
	}
	var c agent.RunCreated
	if err := json.Unmarshal(evs[0].Payload, &c); err != nil {
		return nil, &journal.CorruptError{RunID: runID, Seq: 1, Reason: err.Error()}
	}
	// The tools are built with the settings the run has now: a resume
	// (run.resumed, journaled by the server) may have replaced those of
	// run.created.
	st, err := agent.Fold(runID, evs)
	if err != nil {
		return nil, err
	}
	if c.Settings != nil || st.Settings != agent.DefaultSettings() {
		set := st.Settings
		c.Settings = &set
	}
	wiring, closer, err := w.opts.Wire(ctx, &c)
	if err != nil {
		return nil, fmt.Errorf("wire run %s: %w", runID, err)
	}
	lr = &liveRun{wiring: wiring, closer: closer}
	w.mu.Lock()
	w.live[runID] = lr
	w.mu.Unlock()
	return lr, nil
}

// release closes the run's live execution on this worker, if any.
func (w *Worker) release(runID string) {
	w.mu.Lock()
	lr := w.live[runID]
	delete(w.live, runID)
	w.mu.Unlock()
	if lr != nil && lr.closer != nil {
		lr.closer.Close()
	}
}

// cancelRun cancels the step executing runID here with cause.
func (w *Worker) cancelRun(runID string, cause error) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if a := w.active[runID]; a != nil {
		a.cancel(cause)
		return true
	}
	return false
}

// Run polls Temporal through c until ctx is done: the shared queue
// (workflows and claims) and this worker's own queue (steps). At the end
// it pauses the steps executing here (each journals run.paused with
// reason shutdown, and its workflow moves the run to another worker) and
// closes the sandboxes it holds.
func (w *Worker) Run(ctx context.Context, c client.Client) error {
	// The workflow never blocks; the SDK's 1 s deadlock detector fails
	// workflow tasks of a CPU-starved host (retried, but slow), so it is
	// given longer.
	shared := worker.New(c, TaskQueue, worker.Options{MaxConcurrentActivityExecutionSize: w.opts.Slots, DeadlockDetectionTimeout: 10 * time.Second})
	pinned := worker.New(c, w.queue, worker.Options{MaxConcurrentActivityExecutionSize: w.opts.Slots, DeadlockDetectionTimeout: 10 * time.Second})
	alive := worker.New(c, w.queue+AliveSuffix, worker.Options{MaxConcurrentActivityExecutionSize: 16, DeadlockDetectionTimeout: 10 * time.Second})
	w.Register(shared, pinned)
	w.mu.Lock()
	w.client = c
	if w.opts.Team == nil {
		// Children of the runs executed here are runs on the cluster.
		w.opts.Team = &Team{Runtime: w.rt, Dispatcher: NewDispatcher(c), ControlStream: w.opts.ControlStream, CancelType: w.opts.CancelType}
	}
	w.mu.Unlock()
	alive.RegisterActivityWithOptions(w.Ping, activity.RegisterOptions{Name: PingActivity})
	if err := alive.Start(); err != nil {
		return fmt.Errorf("cluster: start worker: %w", err)
	}
	defer alive.Stop()
	if err := pinned.Start(); err != nil {
		return fmt.Errorf("cluster: start worker: %w", err)
	}
	if err := shared.Start(); err != nil {
		pinned.Stop()
		return fmt.Errorf("cluster: start worker: %w", err)
	}
	var wg sync.WaitGroup
	if w.opts.ControlStream != "" {
		wg.Add(1)
		go func() { defer wg.Done(); w.followControl(ctx) }()
	}
	<-ctx.Done()
	w.mu.Lock()
	for _, a := range w.active {
		a.cancel(agent.ErrShutdown)
	}
	w.mu.Unlock()
	shared.Stop()
	pinned.Stop()
	wg.Wait()
	w.mu.Lock()
	ids := make([]string, 0, len(w.live))
	for id := range w.live {
		ids = append(ids, id)
	}
	w.mu.Unlock()
	for _, id := range ids {
		w.release(id)
	}
	return nil
}

// cancelRequest is the control stream's cancel payload (as the server
// writes it).
type cancelRequest struct {
	RunID string `json:"run_id"`
	By    string `json:"by,omitempty"`
	Token string `json:"token,omitempty"`
	// Cause is "parent_ended" for a child stopped because its parent
	// ended without waiting for it ([Team.Stop]).
	Cause string `json:"cause,omitempty"`
}

// followControl cancels the runs executing here that a server asks to
// cancel, from the control stream's end at the start until ctx is done.
func (w *Worker) followControl(ctx context.Context) {
	store := w.rt.Store()
	from := int64(1)
	if evs, err := store.Read(ctx, w.opts.ControlStream, 1); err == nil {
		from = int64(len(evs)) + 1
	}
	for ctx.Err() == nil {
		for e, err := range journal.Follow(ctx, store, w.opts.ControlStream, from, time.Second) {
			if err != nil {
				w.log.Error("follow the control stream", "err", err)
				break
			}
			from = e.Seq + 1
			if e.Type != w.opts.CancelType {
				continue
			}
			var req cancelRequest
			if json.Unmarshal(e.Payload, &req) != nil {
				continue
			}
			cause := agent.CanceledByToken(req.By, req.Token)
			if req.Cause == causeParentEnded {
				cause = agent.ErrParentEnded
			}
			if w.cancelRun(req.RunID, cause) {
				w.log.Info("canceling run at a server's request", "run_id", req.RunID, "by", req.By)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// Holding returns the number of runs whose sandbox this worker keeps
// (runs pinned to it between steps).
func (w *Worker) Holding() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.live)
}
