package schedule

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/testclock"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/journal/postgres"
	"github.com/keel-run/keel/journal/sqlite"
)

var monday = time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)

func create(t *testing.T, s *Scheduler, d Schedule) *Schedule {
	t.Helper()
	if d.Task == "" {
		d.Task = "check the build at {{.Time.Format \"15:04\"}}"
	}
	got, err := s.Create(t.Context(), &d)
	if err != nil {
		t.Fatalf("Create(%s): %v", d.Name, err)
	}
	return got
}

func tick(t *testing.T, s *Scheduler) {
	t.Helper()
	if err := s.Tick(t.Context()); err != nil {
		t.Fatalf("Tick: %v", err)
	}
}

func counts(t *testing.T, s *Scheduler, name string) map[Outcome]int {
	t.Helper()
	st, err := s.Get(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return st.Counts
}

func every(d time.Duration) Spec { return Spec{Every: agent.Duration(d)} }

// TestOverlapPolicies runs a schedule every minute whose runs last 150
// seconds, ticking every 30 seconds, for 10 minutes, under each policy.
func TestOverlapPolicies(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		overlap Overlap
		want    map[Outcome]int
		runs    int
		cancels int
	}{
		// Runs start at 1, 4, 7, 10 (each lasts 2.5 minutes).
		{OverlapSkip, map[Outcome]int{OutcomeFired: 4, OutcomeSkipped: 6}, 4, 0},
		// Every fire after the first waits in line one at a time; the
		// rest are skipped while one waits.
		{OverlapBufferOne, map[Outcome]int{OutcomeFired: 4, OutcomeBuffered: 1, OutcomeSkipped: 5}, 4, 0},
		{OverlapBufferAll, map[Outcome]int{OutcomeFired: 4, OutcomeBuffered: 6}, 4, 0},
		// Each fire cancels the run and starts at the next tick, once
		// the cancel ended (the last one still waits).
		{OverlapCancelOther, map[Outcome]int{OutcomeFired: 9, OutcomeBuffered: 1}, 9, 9},
		{OverlapTerminateOther, map[Outcome]int{OutcomeFired: 10}, 10, 9},
		{OverlapAllowAll, map[Outcome]int{OutcomeFired: 10}, 10, 0},
	} {
		t.Run(string(tt.overlap), func(t *testing.T) {
			t.Parallel()
			clk := testclock.New(monday)
			r := newFakeRunner(clk, 150*time.Second)
			s := New(mem.New(), r, &Options{Clock: clk.Now})
			create(t, s, Schedule{Name: "s", Spec: every(time.Minute), Policy: Policy{Overlap: tt.overlap}})
			for clk.Now().Before(monday.Add(10*time.Minute + time.Second)) {
				tick(t, s)
				clk.Add(30 * time.Second)
			}
			if diff := cmp.Diff(tt.want, counts(t, s, "s")); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
			if got := len(r.created()); got != tt.runs {
				t.Errorf("%d runs, want %d", got, tt.runs)
			}
			if len(r.canceled) != tt.cancels {
				t.Errorf("%d cancels, want %d", len(r.canceled), tt.cancels)
			}
		})
	}
}

// TestCatchUpOncePerPolicy stops the scheduler for 3 hours: after it,
// each policy catches up as Temporal's would (once for skip, twice for
// buffer_one, every fire for buffer_all and allow_all), and the fires
// beyond the catch-up window are missed.
func TestCatchUpOncePerPolicy(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		overlap Overlap
		window  time.Duration
		want    map[Outcome]int
	}{
		{OverlapSkip, 0, map[Outcome]int{OutcomeFired: 1, OutcomeCaughtUp: 1, OutcomeSkipped: 179}},
		{OverlapSkip, time.Hour, map[Outcome]int{OutcomeFired: 1, OutcomeMissed: 120, OutcomeCaughtUp: 1, OutcomeSkipped: 59}},
		{OverlapBufferOne, time.Hour, map[Outcome]int{OutcomeFired: 1, OutcomeMissed: 120, OutcomeCaughtUp: 1, OutcomeBuffered: 1, OutcomeSkipped: 58}},
		{OverlapAllowAll, time.Hour, map[Outcome]int{OutcomeFired: 2, OutcomeMissed: 120, OutcomeCaughtUp: 59}},
	} {
		t.Run(fmt.Sprintf("%s/%s", tt.overlap, tt.window), func(t *testing.T) {
			t.Parallel()
			clk := testclock.New(monday)
			r := newFakeRunner(clk, 10*time.Minute)
			store := mem.New()
			s := New(store, r, &Options{Clock: clk.Now})
			create(t, s, Schedule{Name: "s", Spec: every(time.Minute), Policy: Policy{Overlap: tt.overlap, CatchupWindow: agent.Duration(tt.window)}})
			clk.Add(time.Minute)
			tick(t, s) // fires 00:01
			// Stopped from 00:01 to 03:01:30; a new process ticks.
			clk.Set(monday.Add(3*time.Hour + 90*time.Second))
			s = New(store, r, &Options{Clock: clk.Now})
			tick(t, s)
			if diff := cmp.Diff(tt.want, counts(t, s, "s")); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
		})
	}
}

// week is the acceptance scenario: schedules every minute across a
// simulated week, with a 3-hour stop, the clock set back 45 minutes and
// later forward 2 hours, and one scheduler per store (several stores on
// one database are several servers) ticking at the same times.
func week(t *testing.T, stores []journal.Store, step time.Duration) {
	clk := testclock.New(monday)
	r := newFakeRunner(clk, 30*time.Second)
	opts := &Options{Clock: clk.Now, LateAfter: step + time.Minute}
	var scheds []*Scheduler
	restart := func() {
		scheds = scheds[:0]
		for _, st := range stores {
			scheds = append(scheds, New(st, r, opts))
		}
	}
	restart()
	wide := create(t, scheds[0], Schedule{Name: "wide", Spec: Spec{Cron: "* * * * *", TimeZone: "Europe/Paris"}})
	narrow := create(t, scheds[0], Schedule{Name: "narrow", Spec: every(time.Minute), Policy: Policy{CatchupWindow: agent.Duration(time.Hour)}})
	jittered := create(t, scheds[0], Schedule{Name: "jittered", Spec: Spec{Every: agent.Duration(time.Minute), Jitter: agent.Duration(20 * time.Second)}, Policy: Policy{Overlap: OverlapBufferOne}})

	end := monday.Add(7 * 24 * time.Hour)
	stopFrom, stopTo := monday.Add(34*time.Hour), monday.Add(37*time.Hour)
	backAt, forwardAt := monday.Add(84*time.Hour), monday.Add(104*time.Hour)
	var stopped, back, forward bool
	maxSeen := clk.Now()
	for clk.Now().Before(end) {
		now := clk.Now()
		switch {
		case !stopped && !now.Before(stopFrom):
			stopped = true
			clk.Set(stopTo)
			restart() // new processes: nothing in memory
		case !back && !now.Before(backAt):
			back = true
			clk.Set(now.Add(-45 * time.Minute))
		case !forward && !now.Before(forwardAt):
			forward = true
			clk.Set(now.Add(2 * time.Hour))
		}
		var wg sync.WaitGroup
		errs := make([]error, len(scheds))
		for i, s := range scheds {
			wg.Go(func() { errs[i] = s.Tick(t.Context()) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if clk.Now().After(maxSeen) {
			maxSeen = clk.Now()
		}
		clk.Add(step)
	}
	clk.Set(maxSeen)
	for _, s := range scheds {
		tick(t, s)
	}

	// A new scheduler reads every record back from the journal.
	check := New(stores[0], r, opts)
	runs := map[string]string{}
	for _, d := range []*Schedule{wide, narrow, jittered} {
		fires, err := check.Fires(t.Context(), d.Name, nil)
		if err != nil {
			t.Fatal(err)
		}
		tm, err := d.Spec.compile(d.Created)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for n := tm.next(d.Created); !n.IsZero() && !n.Add(jitter(d.ID, n, d.Spec.Jitter.D())).After(maxSeen); n = tm.next(n) {
			want = append(want, scheduledKey(n))
		}
		var got []string
		byOutcome := map[Outcome]int{}
		for _, f := range fires {
			got = append(got, f.Key)
			byOutcome[f.Outcome]++
			if f.ran() {
				if other, dup := runs[f.RunID]; dup {
					t.Errorf("run %s of %s %s is also the run of %s", f.RunID, d.Name, f.Key, other)
				}
				runs[f.RunID] = d.Name + " " + f.Key
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: records (-want +got):\n%s", d.Name, diff)
		}
		t.Logf("%s: %d nominal fires, %d records: %v", d.Name, len(want), len(got), byOutcome)
		// Two catch-ups: after the stop and after the jump forward,
		// each once by skip; by buffer_one up to twice (one runs, one
		// waits, unless a fire from before the stop was waiting).
		up := byOutcome[OutcomeCaughtUp]
		if d.Policy.Overlap == OverlapBufferOne && (up < 2 || up > 4) || d.Policy.Overlap != OverlapBufferOne && up != 2 {
			t.Errorf("%s: %d caught up, want 2 (skip) or 2 to 4 (buffer_one)", d.Name, up)
		}
		if d == narrow {
			// Beyond the 1-hour window: 2 hours of the stop and 1 of
			// the jump.
			if m := byOutcome[OutcomeMissed]; m < 175 || m > 182+2*int(step/time.Minute) {
				t.Errorf("narrow: %d missed, want about 180", m)
			}
		} else if byOutcome[OutcomeMissed] != 0 {
			t.Errorf("%s: %d missed, want 0", d.Name, byOutcome[OutcomeMissed])
		}
	}
	created := r.created()
	if len(created) != len(runs) {
		t.Errorf("the runner created %d runs for %d fires with a run", len(created), len(runs))
	}
	for _, id := range created {
		if _, ok := runs[id]; !ok {
			t.Errorf("run %s was created for no record", id)
		}
	}
	t.Logf("%d runs, 0 duplicates (%d duplicate starts refused by run id)", len(created), r.exists)
}

func TestWeekMem(t *testing.T) {
	t.Parallel()
	m := mem.New()
	week(t, []journal.Store{m, m}, 41*time.Second)
}

func TestWeekSQLite(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a simulated week on SQLite")
	}
	path := filepath.Join(t.TempDir(), "keel.db")
	var stores []journal.Store
	for range 2 {
		s, err := sqlite.Open(path, &sqlite.Options{Sync: sqlite.SyncNormal})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	week(t, stores, 14*time.Minute+30*time.Second)
}

func TestWeekPostgres(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a simulated week on PostgreSQL")
	}
	dsn := testenv.Postgres(t)
	var stores []journal.Store
	for range 2 {
		s, err := postgres.Open(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	week(t, stores, 14*time.Minute+30*time.Second)
}
