// Package cluster runs Keel's runs on Temporal (go.temporal.io/sdk): the
// cluster shape, with `keel serve --temporal` handing runs to `keel
// worker` processes that share one PostgreSQL journal.
//
// The journal stays the system of record. A run's workflow is a thin
// driver: each of its activities ([Worker.Step]) performs the run's next
// step — one model call and the gate-and-tools batch it asks for — by
// executing the run from its journal until the next model call
// ([agent.ExecParams.Yield]), so an activity retried after a crash
// continues from what the journal holds and never redoes a recorded
// action (a tool call started but unrecorded is recovered as any
// crashed run's is: read-only tools run again, others get an "outcome
// unknown" result the model sees). Only ids, sequence numbers, hashes and
// statuses pass through Temporal: never prompts, messages or tool output.
// A workflow continues as new every [Driver.MaxSteps] activities, so no
// run meets Temporal's history limits, and it is deterministic by
// construction (no clock, no randomness, no journal reads), so a Keel
// upgrade mid-run replays its history unchanged.
//
// A paused run (waiting for a person's approval) holds no worker: its
// workflow waits for the wake signal ([WakeSignal], which the server
// sends when a decision is recorded) or a durable timer; so does a run
// whose team call waits for children (paused with reason children: a
// child's end wakes it). A run's sandbox
// and workspace are pinned to the worker that holds them: the first
// activity ([Worker.Claim], on the shared task queue [TaskQueue]) returns
// that worker's own task queue, and every later step is scheduled there,
// reusing the sandbox (and the Python kernel) it keeps. A step that has
// not returned after [Driver.PinTimeout] pings its worker on a liveness
// queue with slots of its own: a busy worker answers, and the step waits
// on in its place in the queue. When that worker dies, the step's
// heartbeat times out and its retry finds no poller on the dead worker's
// queue; the next ping goes unanswered for PinTimeout, the step is
// canceled, and the workflow claims the run afresh on the shared queue:
// another worker continues it from the journal, in a new sandbox over the
// same workspace path. That
// is correct when the workspaces are on storage every worker mounts at
// the same path (the documented cluster shape); with worker-local
// workspaces, set PinTimeout long, and the run waits for its worker.
package cluster

import (
	"errors"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/keel-run/keel/journal"
)

// Names shared by the server, the workers and the workflow history.
// Changing one breaks runs in flight.
const (
	// TaskQueue is the shared task queue: workflow tasks and claims.
	TaskQueue = "keel"
	// WorkflowName is the registered name of [Driver.Run].
	WorkflowName = "keel.run"
	// WakeSignal tells a run's workflow to look at the journal again (a
	// decision was recorded, a person resumed the run).
	WakeSignal = "keel.wake"
	// ClaimActivity and StepActivity are the activities' names.
	ClaimActivity = "keel.claim"
	StepActivity  = "keel.step"
	// PingActivity answers on a worker's liveness queue (its own queue
	// plus [AliveSuffix]), which has slots of its own: a step that waits
	// too long for its worker finds out whether that worker is busy
	// (every slot taken) or gone.
	PingActivity = "keel.ping"
	AliveSuffix  = ".alive"
	// pingVersion is the workflow change that pings the worker before
	// moving a run (workflow.GetVersion; histories recorded before it
	// replay the old path).
	pingVersion = "keel.ping-before-move"
	// wakeVersion is the workflow change that treats a wake-up received
	// before a step as answered by that step, and tells a step woken from
	// an approval or authorization pause to look before executing
	// ([StepInput.Woken]).
	wakeVersion = "keel.answered-wakes"
	// pinWaitVersion is the workflow change that waits for a busy
	// pinned worker without giving up the step's place in its queue: a
	// step is no longer timed out after PinTimeout (ScheduleToStart),
	// which put it back at the end of the queue each time, so that on a
	// worker with many more runs than slots some runs waited for minutes
	// (see awaitPinned).
	pinWaitVersion = "keel.pin-wait-in-place"
	// maxHistory is the history length after which a workflow on the
	// pin-wait path continues as new at its next step (each ping of a
	// long step adds a few events).
	maxHistory = 10_000
	// fatalError is the application error type of a step that must not
	// be retried (a corrupt journal).
	fatalError = "keel.fatal"
)

// WorkflowID is the workflow id of run runID: one workflow per run.
func WorkflowID(runID string) string { return "keel-run-" + runID }

// RunInput is the workflow's input and continue-as-new state.
type RunInput struct {
	RunID string `json:"run_id"`
	// Queue is the task queue of the worker holding the run ("" until a
	// worker claims it).
	Queue string `json:"queue,omitempty"`
	// AfterSeq and AfterHash are the newest event the workflow has seen.
	AfterSeq  int64  `json:"after_seq,omitempty"`
	AfterHash string `json:"after_hash,omitempty"`
}

// StepInput is a step activity's input.
type StepInput struct {
	RunID     string `json:"run_id"`
	AfterSeq  int64  `json:"after_seq"`
	AfterHash string `json:"after_hash,omitempty"`
	// Fresh marks the first step of a workflow execution, or the first
	// on a newly claimed worker: it journals run.resumed (a step that
	// continues the previous one does not).
	Fresh bool `json:"fresh,omitempty"`
	// Woken marks a step that a wake signal started for a run waiting
	// for decisions ([StepResult.Waiting]). When the journal holds
	// nothing after AfterSeq, the wake-up was answered already (it was
	// sent for an event an earlier step saw: the run's start, an
	// adoption, a decision recorded while the step that paused the run
	// returned): the step returns the run as it is, still waiting, and
	// journals nothing.
	Woken bool `json:"woken,omitempty"`
	// Recheck marks a step that the wait's timer started for a run
	// waiting for decisions: with nothing journaled after AfterSeq, it
	// executes the run only when a decision's deadline has passed (the
	// run's default decision applies).
	Recheck bool `json:"recheck,omitempty"`
	// Children marks a look at a run paused for its children (reason
	// "children": a team call waits for children that had not ended,
	// and the step gave its worker back). With nothing journaled after
	// AfterSeq, it executes the run only when one of the children not
	// delivered yet has ended (the call then delivers it).
	Children bool `json:"children,omitempty"`
}

// StepResult is a step activity's result: where the run's journal ends
// and what state the run is in.
type StepResult struct {
	LastSeq  int64          `json:"last_seq"`
	LastHash string         `json:"last_hash"`
	Status   journal.Status `json:"status"`
	// Reason is the pause reason of a paused run ("approval",
	// "shutdown", ...).
	Reason string `json:"reason,omitempty"`
	// Waiting reports a paused run with calls waiting for a person's
	// decision (an approval, an authorization).
	Waiting bool `json:"waiting,omitempty"`
}

// reasonChildren is the pause reason of a run whose team call waits for
// children (agent.ReasonChildren): its workflow waits for a wake-up,
// which a child's end sends, or ChildRecheck.
const reasonChildren = "children"

// Driver is the workflow. Its fields must be equal on every worker (they
// shape the workflow's commands).
type Driver struct {
	// MaxSteps is the number of step activities after which a workflow
	// continues as new; default 500 (about 1,500 history events).
	MaxSteps int
	// PinTimeout is how long a step waits for the worker holding the
	// run (ScheduleToStart) before the run is claimed afresh; default 1m.
	PinTimeout time.Duration
	// StepTimeout bounds one step (a model call, or a batch of tool
	// calls); default 2h.
	StepTimeout time.Duration
	// Heartbeat is a step's heartbeat timeout: a worker that dies is
	// noticed after it; default 20s.
	Heartbeat time.Duration
	// Recheck is how long a paused run waits without a wake signal
	// before looking at its journal again; default 24h. A run paused by a
	// worker's shutdown looks again after ShutdownRetry (default 2s).
	Recheck, ShutdownRetry time.Duration
	// ChildRecheck is how long a run paused for its children (see
	// [StepInput].Children) waits without a wake-up before looking
	// again; default 1m. A child's end wakes it at once: the timer only
	// covers a wake-up lost with a worker that died.
	ChildRecheck time.Duration
	// RetryWait is the pause after a failed step before the next try;
	// default 5s.
	RetryWait time.Duration
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Run drives run in.RunID to its end (see the package documentation).
func (d *Driver) Run(ctx workflow.Context, in RunInput) error {
	maxSteps := d.MaxSteps
	if maxSteps <= 0 {
		maxSteps = 500
	}
	log := workflow.GetLogger(ctx)
	wake := workflow.GetSignalChannel(ctx, WakeSignal)
	answered := workflow.GetVersion(ctx, wakeVersion, workflow.DefaultVersion, 1) == 1
	inPlace := workflow.GetVersion(ctx, pinWaitVersion, workflow.DefaultVersion, 1) == 1
	fresh := true
	woken, recheck, children := false, false, false
	for n := 0; ; n++ {
		if n >= maxSteps || (inPlace && n > 0 && workflow.GetInfo(ctx).GetCurrentHistoryLength() > maxHistory) {
			return workflow.NewContinueAsNewError(ctx, WorkflowName, in)
		}
		if in.Queue == "" {
			cctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
				TaskQueue: TaskQueue, StartToCloseTimeout: time.Minute,
				RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second},
			})
			if err := workflow.ExecuteActivity(cctx, ClaimActivity, in.RunID).Get(ctx, &in.Queue); err != nil {
				return err
			}
			fresh = true
		}
		opts := workflow.ActivityOptions{
			TaskQueue:              in.Queue,
			ScheduleToStartTimeout: orDefault(d.PinTimeout, time.Minute),
			StartToCloseTimeout:    orDefault(d.StepTimeout, 2*time.Hour),
			HeartbeatTimeout:       orDefault(d.Heartbeat, 20*time.Second),
			RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second,
				MaximumAttempts: 5, NonRetryableErrorTypes: []string{fatalError}},
		}
		if inPlace {
			opts.ScheduleToStartTimeout = 0 // awaitPinned watches the worker
		}
		sctx := workflow.WithActivityOptions(ctx, opts)
		if answered {
			// The step reads the journal after these wake-ups were
			// sent: it answers them. Only one that arrives while it runs
			// makes the workflow look again once it pauses.
			for wake.ReceiveAsync(nil) {
			}
		}
		var res StepResult
		input := StepInput{RunID: in.RunID, AfterSeq: in.AfterSeq, AfterHash: in.AfterHash, Fresh: fresh, Woken: woken, Recheck: recheck, Children: children}
		var err error
		if inPlace {
			actx, cancelStep := workflow.WithCancel(sctx)
			step := workflow.ExecuteActivity(actx, StepActivity, input)
			gone, werr := d.awaitPinned(ctx, step, in.Queue, &res)
			cancelStep()
			if gone {
				// The step never started there, or its worker died with
				// it (its retry waits on the dead worker's queue): the
				// step is canceled and the run claimed afresh.
				_ = step.Get(ctx, nil)
				log.Warn("the worker holding the run is gone; claiming it afresh", "run_id", in.RunID, "queue", in.Queue)
				in.Queue = ""
				continue
			}
			err = werr
		} else {
			err = workflow.ExecuteActivity(sctx, StepActivity, input).Get(ctx, &res)
		}
		wasFresh, wasWoken, wasRecheck, wasChildren := fresh, woken, recheck, children
		fresh, woken, recheck, children = false, false, false, false
		if err != nil {
			var te *temporal.TimeoutError
			var ae *temporal.ApplicationError
			switch {
			case errors.As(err, &te) && te.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START:
				// The step did not start on the pinned queue in time: its
				// worker is busy (every slot taken) or gone. A worker
				// answers pings on a queue with slots of its own.
				if workflow.GetVersion(ctx, pingVersion, workflow.DefaultVersion, 1) == 1 {
					pctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
						TaskQueue: in.Queue + AliveSuffix, ScheduleToStartTimeout: orDefault(d.PinTimeout, time.Minute),
						StartToCloseTimeout: 30 * time.Second, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
					})
					if workflow.ExecuteActivity(pctx, PingActivity).Get(ctx, nil) == nil {
						// Busy, not gone: wait for it again.
						fresh, woken, recheck, children = wasFresh, wasWoken, wasRecheck, wasChildren
						continue
					}
				}
				log.Warn("the worker holding the run is gone; claiming it afresh", "run_id", in.RunID, "queue", in.Queue)
				in.Queue = ""
				continue
			case errors.As(err, &ae) && ae.Type() == fatalError:
				return err
			}
			log.Warn("step failed; trying again", "run_id", in.RunID, "err", err)
			if err := workflow.Sleep(ctx, orDefault(d.RetryWait, 5*time.Second)); err != nil {
				return err
			}
			in.Queue, fresh = "", true
			continue
		}
		in.AfterSeq, in.AfterHash = res.LastSeq, res.LastHash
		switch {
		case res.Status == journal.StatusRunning:
			continue
		case res.Status.Terminal():
			// Wake-ups that arrived while it ran (the one that started
			// it, a late decision) need no answer now.
			for wake.ReceiveAsync(nil) {
			}
			return nil
		}
		// Paused: wait, holding no worker, for a wake-up or the timer.
		wait := orDefault(d.Recheck, 24*time.Hour)
		if res.Reason == reasonChildren {
			// Waiting for children, holding no worker: a child's end
			// wakes it.
			wait = orDefault(d.ChildRecheck, time.Minute)
		}
		if res.Reason == "shutdown" {
			// The worker is leaving: let another one take the run.
			wait, in.Queue = orDefault(d.ShutdownRetry, 2*time.Second), ""
		}
		tctx, cancel := workflow.WithCancel(ctx)
		timer := workflow.NewTimer(tctx, wait)
		sel := workflow.NewSelector(ctx)
		signaled := false
		sel.AddReceive(wake, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); signaled = true })
		sel.AddFuture(timer, func(workflow.Future) {})
		sel.Select(ctx)
		cancel()
		if !answered {
			for wake.ReceiveAsync(nil) {
				// Wake-ups that queued meanwhile are answered by this look.
			}
		}
		fresh = true
		// A look at a run waiting for decisions first checks that
		// something happened (a wake-up) or that a deadline passed (the
		// timer).
		woken, recheck = answered && res.Waiting && signaled, answered && res.Waiting && !signaled
		children = res.Reason == reasonChildren
	}
}

// awaitPinned waits for step, scheduled on the pinned worker's queue, to
// return its result into res. Every PinTimeout that the step has not
// returned, it pings the worker on its liveness queue (slots of its own):
// a worker that answers is busy (its slots taken by other runs' steps, or
// this step executing), and the step keeps its place in the queue; one
// that does not answer within PinTimeout is gone, and awaitPinned
// reports it (the caller cancels the step). A step that returns while a
// ping is out ends the wait.
func (d *Driver) awaitPinned(ctx workflow.Context, step workflow.Future, queue string, res *StepResult) (gone bool, err error) {
	wait := orDefault(d.PinTimeout, time.Minute)
	pctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: queue + AliveSuffix, ScheduleToStartTimeout: wait,
		StartToCloseTimeout: 30 * time.Second, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	for {
		done := false
		tctx, cancelTimer := workflow.WithCancel(ctx)
		timer := workflow.NewTimer(tctx, wait)
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(step, func(workflow.Future) { done = true })
		sel.AddFuture(timer, func(workflow.Future) {})
		sel.Select(ctx)
		cancelTimer()
		if done {
			return false, step.Get(ctx, res)
		}
		var perr error
		pinged := false
		ping := workflow.ExecuteActivity(pctx, PingActivity)
		sel = workflow.NewSelector(ctx)
		sel.AddFuture(step, func(workflow.Future) { done = true })
		sel.AddFuture(ping, func(f workflow.Future) { pinged, perr = true, f.Get(ctx, nil) })
		sel.Select(ctx)
		switch {
		case done:
			return false, step.Get(ctx, res)
		case pinged && perr != nil:
			return true, nil
		}
		// Busy, not gone: wait again, in place.
	}
}
