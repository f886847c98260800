package cluster

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/testclock"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/journal/postgres"
	"github.com/keel-run/keel/schedule"
)

// simRunner is a fake executor whose runs last 30 s on the clock.
type simRunner struct {
	clock *testclock.Clock
	mu    sync.Mutex
	runs  map[string]time.Time
}

func (r *simRunner) Start(ctx context.Context, p *schedule.StartParams) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.runs[p.RunID]; ok {
		return schedule.ErrRunExists
	}
	r.runs[p.RunID] = r.clock.Now()
	return nil
}

func (r *simRunner) Status(ctx context.Context, id string) (journal.Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.runs[id]
	switch {
	case !ok:
		return "", journal.ErrNotFound
	case r.clock.Now().Sub(at) < 30*time.Second:
		return journal.StatusRunning, nil
	}
	return journal.StatusCompleted, nil
}

func (r *simRunner) Cancel(ctx context.Context, id, reason string) error { return nil }

// TestTemporalSchedules runs the schedule acceptance scenario on
// Temporal Schedules: two Keel schedules driven by Temporal, every 10
// minutes across a simulated day (a week with KEEL_SCHEDULE_LONG=1;
// every minute is out of reach: the dev server's scheduler starts
// backfilled workflows at well under one a second per schedule), two workers
// on one PostgreSQL journal, the workers stopped for 3 hours, the clock
// set back 45 minutes and later forward 2 hours. Temporal delivers the
// simulated fire times by backfill (an hour at a time, with the clock set
// to the end of that hour), as it delivers the fires it kept while the
// workers were away.
func TestTemporalSchedules(t *testing.T) {
	if testing.Short() {
		t.Skip("Temporal dev server")
	}
	addr := testenv.Temporal(t)
	dsn := testenv.Postgres(t)
	days, every, wait := 1, 10*time.Minute, 3*time.Minute
	if os.Getenv("KEEL_SCHEDULE_LONG") != "" {
		days, wait = 7, 15*time.Minute
	}
	start := time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC)
	end := start.Add(time.Duration(days) * 24 * time.Hour)
	clk := testclock.New(start)
	r := &simRunner{clock: clk, runs: map[string]time.Time{}}
	c, err := Dial(t.Context(), addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var scheds []*schedule.Scheduler
	for i := range 2 {
		st, err := postgres.Open(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		s := schedule.New(st, r, &schedule.Options{Clock: clk.Now, LateAfter: 31 * time.Minute})
		scheds = append(scheds, s)
		w := worker.New(c, FireQueue, worker.Options{Identity: fmt.Sprintf("server-%d", i)})
		(&Fires{Scheduler: s}).Register(w)
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
	}
	specEnd := end.Add(time.Hour)
	var defs []*schedule.Schedule
	for _, d := range []schedule.Schedule{
		{Name: "wide", Spec: schedule.Spec{Cron: fmt.Sprintf("*/%d * * * *", int(every/time.Minute)), TimeZone: "Europe/Paris", End: specEnd}},
		{Name: "narrow", Spec: schedule.Spec{Every: agent.Duration(every), End: specEnd}, Policy: schedule.Policy{CatchupWindow: agent.Duration(time.Hour)}},
	} {
		d.Task, d.Driver = "check", schedule.DriverTemporal
		def, err := scheds[0].Create(t.Context(), &d)
		if err != nil {
			t.Fatal(err)
		}
		defs = append(defs, def)
	}
	list, err := scheds[0].List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	drv := NewSchedules(c)
	if err := drv.Sync(t.Context(), list); err != nil {
		t.Fatal(err)
	}
	if err := drv.Sync(t.Context(), list); err != nil { // idempotent
		t.Fatalf("second Sync: %v", err)
	}

	// deliver has Temporal start the fires of [from, to) and waits until
	// the journal has a record of every nominal time due by the clock.
	deliver := func(from, to time.Time) {
		t.Helper()
		for _, d := range defs {
			h := c.ScheduleClient().GetHandle(t.Context(), SchedulePrefix+d.ID)
			// Temporal may include the end of a range: end it before to.
			err := h.Backfill(t.Context(), client.ScheduleBackfillOptions{Backfill: []client.ScheduleBackfill{{Start: from, End: to.Add(-time.Second), Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL}}})
			if err != nil {
				t.Fatal(err)
			}
		}
		// The newest nominal time before to that is due by the clock.
		want := to.Add(-time.Nanosecond)
		if clk.Now().Before(want) {
			want = clk.Now()
		}
		want = want.Truncate(every)
		// Temporal works in real time, and slowly on a loaded machine: it
		// fails only when no record came for wait, not when the whole
		// delivery takes longer.
		deadline := time.Now().Add(wait)
		for _, d := range defs {
			var seen time.Time
			for {
				st, err := scheds[1].Get(t.Context(), d.Name)
				if err != nil {
					t.Fatal(err)
				}
				if st.Last != nil && !st.Last.Nominal.Before(want) {
					break
				}
				if st.Last != nil && st.Last.Nominal.After(seen) {
					seen, deadline = st.Last.Nominal, time.Now().Add(wait)
				}
				if time.Now().After(deadline) {
					// Where the fire activity waits (a stall that no retry
					// shows): every goroutine, for the next diagnosis.
					buf := make([]byte, 4<<20)
					t.Logf("goroutines at the stall:\n%s", buf[:runtime.Stack(buf, true)])
					from := start
					if st.Last != nil {
						from = st.Last.Nominal
					}
					for n := from.Add(every); !n.After(want); n = n.Add(every) {
						t.Logf("Temporal's fire of %s at %s: %s", d.Name, n.Format(time.RFC3339), describeFire(c, SchedulePrefix+d.ID+"-"+n.Format(time.RFC3339)))
					}
					t.Fatalf("%s: the records stop at %+v, want %s (no new record for %s)", d.Name, st.Last, want, wait)
				}
				time.Sleep(50 * time.Millisecond) // Temporal works in real time
			}
		}
	}
	// Simulated time advances half an hour at a time: Temporal delivers
	// the fires of that half hour, found 30 s after its end. The workers
	// stop for 3 hours (Temporal keeps the fires and delivers them when
	// they are back); the clock goes back 45 minutes (the same times are
	// delivered again: nothing is recorded twice) and later forward 2
	// hours.
	const step = 30 * time.Minute
	stopFrom, stopTo := start.Add(10*time.Hour), start.Add(13*time.Hour)
	backAt, forwardAt := start.Add(16*time.Hour), start.Add(20*time.Hour)
	var stopped, back, forward bool
	// gaps are the ranges of fires found late: [from, to) found at.
	type gap struct{ from, to, found time.Time }
	var gaps []gap
	t0 := time.Now()
	for sim := start; sim.Before(end); {
		from := sim
		switch {
		case !stopped && !sim.Before(stopFrom):
			stopped, sim = true, stopTo
		case !back && !sim.Before(backAt):
			back, sim = true, sim.Add(-45*time.Minute)
			from = sim
		case !forward && !sim.Before(forwardAt):
			forward, sim = true, sim.Add(2*time.Hour)
		}
		if !from.Equal(sim) {
			gaps = append(gaps, gap{from, sim.Add(step), sim.Add(step + 30*time.Second)})
		}
		clk.Set(sim.Add(step + 30*time.Second))
		deliver(from, sim.Add(step))
		for _, s := range scheds {
			if err := s.Tick(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		sim = sim.Add(step)
	}
	took := time.Since(t0)

	runs := map[string]bool{}
	for _, d := range defs {
		fires, err := scheds[0].Fires(t.Context(), d.Name, nil)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		byOutcome := map[schedule.Outcome]int{}
		for _, f := range fires {
			seen[f.Key]++
			byOutcome[f.Outcome]++
			if f.Outcome == schedule.OutcomeFired || f.Outcome == schedule.OutcomeCaughtUp {
				if runs[f.RunID] {
					t.Errorf("run %s twice", f.RunID)
				}
				runs[f.RunID] = true
			}
		}
		n := 0
		for m := start.Add(every); !m.After(clk.Now()) && !m.After(specEnd); m = m.Add(every) {
			n++
			if seen[m.Format(time.RFC3339Nano)] != 1 {
				t.Errorf("%s: %s has %d records", d.Name, m.Format(time.RFC3339), seen[m.Format(time.RFC3339Nano)])
			}
		}
		t.Logf("%s: %d nominal fires, %d records: %v", d.Name, n, len(fires), byOutcome)
		if byOutcome[schedule.OutcomeCaughtUp] != 2 {
			t.Errorf("%s: %d caught up, want 2", d.Name, byOutcome[schedule.OutcomeCaughtUp])
		}
		// Beyond the 1-hour window: the fires of the stop and of the jump
		// found more than an hour late.
		want := 0
		if d.Name == "narrow" {
			for _, g := range gaps {
				n := g.from.Truncate(every)
				if n.Before(g.from) {
					n = n.Add(every)
				}
				for ; n.Before(g.to); n = n.Add(every) {
					if g.found.Sub(n) > time.Hour {
						want++
					}
				}
			}
		}
		if m := byOutcome[schedule.OutcomeMissed]; m != want {
			t.Errorf("%s: %d missed, want %d", d.Name, m, want)
		}
	}
	r.mu.Lock()
	created := len(r.runs)
	r.mu.Unlock()
	if created != len(runs) {
		t.Errorf("%d runs created for %d fires with a run", created, len(runs))
	}
	t.Logf("%d simulated days through Temporal in %s: %d runs, 0 duplicates", days, took.Round(time.Second), created)
}

// describeFire says what Temporal knows of a fire's workflow: its status,
// its pending activities and its history's event types.
func describeFire(c client.Client, id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b strings.Builder
	desc, err := c.DescribeWorkflow(ctx, id, "")
	if err != nil {
		return err.Error()
	}
	d := desc.RawResponse
	fmt.Fprintf(&b, "status %s", d.WorkflowExecutionInfo.GetStatus())
	for _, a := range d.PendingActivities {
		fmt.Fprintf(&b, "; pending activity %s state %s attempt %d scheduled %s started %s last failure %v worker %s",
			a.GetActivityId(), a.GetState(), a.GetAttempt(), a.GetScheduledTime().AsTime().Format(time.RFC3339Nano), a.GetLastStartedTime().AsTime().Format(time.RFC3339Nano), a.GetLastFailure(), a.GetLastWorkerIdentity())
	}
	it := c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	b.WriteString("; history:")
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			fmt.Fprintf(&b, " (%v)", err)
			break
		}
		fmt.Fprintf(&b, " %s@%s", e.GetEventType(), e.GetEventTime().AsTime().Format("15:04:05.000"))
	}
	return b.String()
}

// TestFireAttemptLost: a fire attempt that Temporal counts as started
// but no worker runs (its task lost between Temporal's matching service
// and a poller on a loaded machine, or its server killed mid-fire) is
// retried once it sends no heartbeat, on another worker, and the fire is
// recorded; it waited for the attempt's 5-minute start-to-close timeout,
// longer than TestTemporalSchedules waits for a record under load.
func TestFireAttemptLost(t *testing.T) {
	if testing.Short() {
		t.Skip("Temporal dev server")
	}
	addr := testenv.Temporal(t)
	c, err := Dial(t.Context(), addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC)
	clk := testclock.New(start)
	s := schedule.New(mem.New(), &simRunner{clock: clk, runs: map[string]time.Time{}}, &schedule.Options{Clock: clk.Now})
	def, err := s.Create(t.Context(), &schedule.Schedule{Name: "lost", Task: "check", Driver: schedule.DriverTemporal,
		Spec: schedule.Spec{Every: agent.Duration(10 * time.Minute)}})
	if err != nil {
		t.Fatal(err)
	}
	nominal := start.Add(10 * time.Minute)
	clk.Set(nominal.Add(30 * time.Second))
	queue := fmt.Sprintf("%s-lost-%d", FireQueue, time.Now().UnixNano())

	// The first worker takes the attempt and never runs it: no result,
	// no heartbeat, its only activity slot held.
	taken, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	lost := worker.New(c, queue, worker.Options{Identity: "lost", MaxConcurrentActivityExecutionSize: 1})
	lost.RegisterWorkflowWithOptions(FireWorkflow, workflow.RegisterOptions{Name: FireWorkflowName})
	lost.RegisterActivityWithOptions(func(ctx context.Context, in FireActivityInput) error {
		once.Do(func() { close(taken) })
		<-release
		return fmt.Errorf("the lost attempt")
	}, activity.RegisterOptions{Name: FireActivity})
	if err := lost.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lost.Stop)
	t.Cleanup(func() { close(release) })
	id := SchedulePrefix + def.ID + "-" + nominal.Format(time.RFC3339)
	run, err := c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{ID: id, TaskQueue: queue}, FireWorkflowName, FireInput{Schedule: def.ID})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-taken:
	case <-time.After(2 * time.Minute):
		t.Fatal("no worker took the fire attempt")
	}
	// A real worker, polling once the first attempt is taken.
	w := worker.New(c, queue, worker.Options{Identity: "server"})
	(&Fires{Scheduler: s}).Register(w)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)

	// Within the attempt's start-to-close timeout (5 minutes), or the
	// retry after it would pass too.
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	if err := run.Get(ctx, nil); err != nil {
		t.Fatalf("the fire workflow: %v\nTemporal: %s", err, describeFire(c, id))
	}
	fires, err := s.Fires(t.Context(), "lost", nil)
	if err != nil || len(fires) != 1 || !fires[0].Nominal.Equal(nominal) {
		t.Fatalf("fires = %+v, %v", fires, err)
	}
	// The retry came from the missing heartbeat.
	it := c.GetWorkflowHistory(t.Context(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var why string
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := e.GetActivityTaskStartedEventAttributes(); a != nil {
			why = fmt.Sprintf("attempt %d after %v", a.GetAttempt(), a.GetLastFailure().GetTimeoutFailureInfo().GetTimeoutType())
		}
	}
	if why != "attempt 2 after "+enumspb.TIMEOUT_TYPE_HEARTBEAT.String() {
		t.Errorf("the fire that recorded: %s, want attempt 2 after a heartbeat timeout", why)
	}
}
