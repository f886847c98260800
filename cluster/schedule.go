package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/schedule"
)

// Names of the Temporal Schedules driver (see [Schedules]). Changing one
// breaks schedules in flight.
const (
	// FireWorkflowName is the workflow each Temporal Schedule starts at
	// each fire time; FireActivity records the fire in the journal.
	FireWorkflowName = "keel.schedule.fire"
	FireActivity     = "keel.schedule.fire"
	// SchedulePrefix starts the id of the Temporal Schedule of a Keel
	// schedule (and of its workflows, to which Temporal appends the fire
	// time).
	SchedulePrefix = "keel-schedule-"
	// FireQueue is the task queue of the fire workflow and activity:
	// the servers poll it (keel serve --temporal), whose schedulers
	// create the fires' runs through their service.
	FireQueue = "keel-schedules"
)

// scheduledStartTime is the search attribute Temporal sets on the
// workflows a schedule starts: the fire's nominal time.
var scheduledStartTime = temporal.NewSearchAttributeKeyTime("TemporalScheduledStartTime")

// FireInput is the argument of the fire workflow, fixed in the Temporal
// Schedule's action.
type FireInput struct {
	// Schedule is the Keel schedule's id.
	Schedule string
	// Jitter is the schedule's jitter: the workflow waits the fire's
	// share of it (the same deterministic share Keel's own scheduler
	// uses) before recording it.
	Jitter time.Duration
}

// FireHeartbeat is the heartbeat timeout of [FireActivity]: a fire
// attempt that sends no heartbeat for that long is given up and retried.
// A worker running the attempt heartbeats every sixth of it.
const FireHeartbeat = 30 * time.Second

// FireActivityInput is the argument of [FireActivity].
type FireActivityInput struct {
	Schedule string
	Nominal  time.Time
}

// FireWorkflow is the workflow a Temporal Schedule starts: it reads the
// fire's nominal time, waits its jitter (a durable timer) and runs
// [FireActivity], retried until it succeeds or the catch-up window has
// certainly passed (Keel records a fire found that late as missed
// anyway). It reads no clock of its own and no journal.
func FireWorkflow(ctx workflow.Context, in FireInput) error {
	nominal, err := fireTime(ctx)
	if err != nil {
		return err
	}
	if in.Jitter > 0 {
		if err := workflow.Sleep(ctx, schedule.Jitter(in.Schedule, nominal, in.Jitter)); err != nil {
			return err
		}
	}
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute,
		// An attempt that Temporal counts as started but no worker runs
		// (its task lost between the matching service and a poller under
		// load, or its server killed) is retried after FireHeartbeat
		// without a heartbeat, not after the 5 minutes above.
		HeartbeatTimeout: FireHeartbeat,
		RetryPolicy:      &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute},
	})
	return workflow.ExecuteActivity(ctx, FireActivity, FireActivityInput{Schedule: in.Schedule, Nominal: nominal}).Get(ctx, nil)
}

// fireTime returns the nominal time of a scheduled workflow: the search
// attribute Temporal sets, else the suffix Temporal appends to the
// workflow id.
func fireTime(ctx workflow.Context) (time.Time, error) {
	if t, ok := workflow.GetTypedSearchAttributes(ctx).GetTime(scheduledStartTime); ok && !t.IsZero() {
		return t.UTC(), nil
	}
	id := workflow.GetInfo(ctx).WorkflowExecution.ID
	if i := strings.LastIndex(id, "-"); len(id) >= len(time.RFC3339) {
		for _, cut := range []int{len(id) - len("2006-01-02T15:04:05Z"), i + 1} {
			if cut > 0 && cut < len(id) {
				if t, err := time.Parse(time.RFC3339, id[cut:]); err == nil {
					return t.UTC(), nil
				}
			}
		}
	}
	return time.Time{}, temporal.NewNonRetryableApplicationError("cluster: the workflow "+id+" was not started by a schedule", "keel.schedule", nil)
}

// Fires executes [FireActivity] on a worker: it records the fire (and
// every earlier nominal time without a record) through the journal's
// scheduler, which starts the runs.
type Fires struct {
	Scheduler *schedule.Scheduler
}

// Fire implements [FireActivity]. While another process holds the
// schedule's lease (another fire of it), it waits for a while, then
// leaves the rest to Temporal's retry policy.
func (f *Fires) Fire(ctx context.Context, in FireActivityInput) error {
	if activity.IsActivity(ctx) {
		stop := heartbeat(ctx, FireHeartbeat/6)
		defer stop()
	}
	wait := 20 * time.Millisecond
	for {
		_, err := f.Scheduler.FireAt(ctx, in.Schedule, in.Nominal)
		switch {
		case errors.Is(err, schedule.ErrNotFound) || errors.Is(err, schedule.ErrDeleted):
			return nil // deleted: nothing to do
		case !errors.Is(err, journal.ErrLocked) || wait > 5*time.Second:
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// heartbeat records the activity's heartbeat every interval until stop
// is called: the attempt is alive as long as its worker is.
func heartbeat(ctx context.Context, every time.Duration) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			activity.RecordHeartbeat(ctx)
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-exited }
}

// Register registers the fire workflow and activity on r (a worker of
// [FireQueue]).
func (f *Fires) Register(r worker.Registry) {
	r.RegisterWorkflowWithOptions(FireWorkflow, workflow.RegisterOptions{Name: FireWorkflowName})
	r.RegisterActivityWithOptions(f.Fire, activity.RegisterOptions{Name: FireActivity})
}

// Start polls [FireQueue] through c for the fire workflows and
// activities until stop is called.
func (f *Fires) Start(c client.Client) (stop func(), err error) {
	w := worker.New(c, FireQueue, worker.Options{MaxConcurrentActivityExecutionSize: 4, DeadlockDetectionTimeout: 10 * time.Second})
	f.Register(w)
	if err := w.Start(); err != nil {
		return nil, fmt.Errorf("cluster: poll %s: %w", FireQueue, err)
	}
	return w.Stop, nil
}

// Schedules keeps a Temporal Schedule for each Keel schedule whose
// driver is Temporal: the Temporal Schedule times the fires (its spec is
// the Keel schedule's, every overlap allowed, its catch-up window the
// Keel schedule's), and Keel decides each fire's outcome in the journal
// (overlap, catch-up window, pause after failures), so the records are
// the same as on keel serve's own scheduler.
type Schedules struct {
	c client.Client
}

// NewSchedules returns the driver over c.
func NewSchedules(c client.Client) *Schedules { return &Schedules{c: c} }

// Sync makes Temporal's schedules match the Keel schedules in list:
// creates the missing ones, pauses and resumes, and deletes those of
// schedules deleted (list holds every Keel schedule with driver
// temporal; deleted ones with Deleted set). It is idempotent: servers
// call it after each change and periodically.
func (s *Schedules) Sync(ctx context.Context, list []*schedule.Status) error {
	var errs []error
	for _, st := range list {
		if st.Driver != schedule.DriverTemporal {
			continue
		}
		if err := s.syncOne(ctx, st); err != nil {
			errs = append(errs, fmt.Errorf("cluster: schedule %s: %w", st.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (s *Schedules) syncOne(ctx context.Context, st *schedule.Status) error {
	h := s.c.ScheduleClient().GetHandle(ctx, SchedulePrefix+st.ID)
	desc, err := h.Describe(ctx)
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		if st.Deleted {
			return nil
		}
		_, err := s.c.ScheduleClient().Create(ctx, options(st))
		if errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
			return nil
		}
		return err
	case err != nil:
		return err
	case st.Deleted:
		return h.Delete(ctx)
	case st.Paused && !desc.Schedule.State.Paused:
		return h.Pause(ctx, client.SchedulePauseOptions{Note: "paused in Keel"})
	case !st.Paused && desc.Schedule.State.Paused:
		return h.Unpause(ctx, client.ScheduleUnpauseOptions{Note: "resumed in Keel"})
	}
	return nil
}

// options returns the Temporal Schedule of a Keel schedule.
func options(st *schedule.Status) client.ScheduleOptions {
	spec := client.ScheduleSpec{TimeZoneName: st.Spec.TimeZone, StartAt: st.Spec.Start, EndAt: st.Spec.End}
	if spec.StartAt.IsZero() {
		spec.StartAt = st.Created
	}
	if st.Spec.Cron != "" {
		spec.CronExpressions = []string{st.Spec.Cron}
	} else {
		spec.Intervals = []client.ScheduleIntervalSpec{{Every: st.Spec.Every.D(), Offset: st.Spec.Offset.D()}}
	}
	window := st.Policy.CatchupWindow.D()
	if window <= 0 {
		window = schedule.DefaultCatchupWindow
	}
	return client.ScheduleOptions{
		ID:   SchedulePrefix + st.ID,
		Spec: spec,
		Action: &client.ScheduleWorkflowAction{
			ID:        SchedulePrefix + st.ID,
			Workflow:  FireWorkflowName,
			Args:      []any{FireInput{Schedule: st.ID, Jitter: st.Spec.Jitter.D()}},
			TaskQueue: FireQueue,
		},
		Overlap:       enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL,
		CatchupWindow: window,
		Paused:        st.Paused,
		Note:          "Keel schedule " + st.Name + " (records in the journal stream " + schedule.StreamPrefix + st.ID + ")",
	}
}
