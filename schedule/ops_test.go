package schedule

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/testclock"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
)

func newTest(t *testing.T, dur time.Duration) (*Scheduler, *fakeRunner, *testclock.Clock, journal.Store) {
	clk := testclock.New(monday)
	r := newFakeRunner(clk, dur)
	store := mem.New()
	return New(store, r, &Options{Clock: clk.Now}), r, clk, store
}

func TestPauseAfterFailures(t *testing.T) {
	t.Parallel()
	s, r, clk, _ := newTest(t, 10*time.Second)
	r.failing = true
	create(t, s, Schedule{Name: "flaky", Spec: every(time.Minute), Policy: Policy{PauseAfterFailures: 3}})
	for range 10 {
		clk.Add(time.Minute)
		tick(t, s)
	}
	st, err := s.Get(t.Context(), "flaky")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Paused || st.PausedBy != Principal || !strings.Contains(st.PausedReason, "3 consecutive") {
		t.Fatalf("after 3 failed runs: paused %v by %q (%q)", st.Paused, st.PausedBy, st.PausedReason)
	}
	if n := len(r.created()); n != 3 {
		t.Errorf("%d runs, want 3 (none while paused)", n)
	}
	// Resuming starts from now: the paused minutes get no record.
	r.failing = false
	if err := s.Resume(t.Context(), "flaky", "ada"); err != nil {
		t.Fatal(err)
	}
	clk.Add(2*time.Minute + time.Second)
	tick(t, s)
	fires, err := s.Fires(t.Context(), "flaky", nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(fires); n != 5 {
		t.Errorf("%d records, want 5 (3 before the pause, 2 after)", n)
	}
	if err := s.Pause(t.Context(), "flaky", "ada", "holiday"); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(t.Context(), "flaky", "ada", "again"); !errors.Is(err, ErrState) {
		t.Errorf("second pause: %v, want ErrState", err)
	}
}

// TestDispatchRetried: the record is made and the run's creation fails
// (as if the process died between the two): the next tick creates it,
// once; a failure that cannot pass records the fire as failed.
func TestDispatchRetried(t *testing.T) {
	t.Parallel()
	s, r, clk, store := newTest(t, 10*time.Second)
	create(t, s, Schedule{Name: "s", Spec: every(time.Minute)})
	r.startErr = errors.New("database is restarting")
	clk.Add(time.Minute)
	tick(t, s)
	if n := len(r.created()); n != 0 {
		t.Fatalf("%d runs while the runner fails", n)
	}
	r.startErr = nil
	// Another process (a restart) picks it up.
	s2 := New(store, r, &Options{Clock: clk.Now})
	clk.Add(5 * time.Second)
	tick(t, s2)
	tick(t, s)
	if n := len(r.created()); n != 1 {
		t.Fatalf("%d runs after the retry, want 1", n)
	}
	r.startErr = fmt.Errorf("%w: agent ci-bot is revoked", ErrPermanent)
	clk.Add(time.Minute)
	tick(t, s)
	fires, err := s.Fires(t.Context(), "s", &FiresParams{Outcome: OutcomeFailed})
	if err != nil {
		t.Fatal(err)
	}
	if len(fires) != 1 || fires[0].Reason != "agent ci-bot is revoked" {
		t.Fatalf("failed fires = %+v", fires)
	}
	// A transient error that lasts past the dispatch timeout fails too.
	r.startErr = errors.New("still down")
	clk.Add(time.Minute)
	tick(t, s)
	clk.Add(11 * time.Minute)
	tick(t, s)
	fires, _ = s.Fires(t.Context(), "s", &FiresParams{Outcome: OutcomeFailed})
	if len(fires) < 2 || !strings.Contains(fires[1].Reason, "not created within") {
		t.Errorf("failed fires after the timeout = %+v", fires)
	}
}

func TestTriggerAndBackfill(t *testing.T) {
	t.Parallel()
	s, r, clk, _ := newTest(t, time.Hour)
	create(t, s, Schedule{Name: "nightly", Spec: Spec{Cron: "0 2 * * *", TimeZone: "Europe/Berlin"}, Task: "night of {{.Time.Format \"2006-01-02\"}} ({{.Source}})"})
	clk.Add(time.Hour)
	f, err := s.Trigger(t.Context(), "nightly", "ada", "")
	if err != nil {
		t.Fatal(err)
	}
	if f.Outcome != OutcomeFired || f.By != "ada" || f.Source != SourceManual {
		t.Fatalf("trigger = %+v", f)
	}
	// A second trigger while the first runs is skipped by the policy,
	// unless it says otherwise.
	if f, _ := s.Trigger(t.Context(), "nightly", "ada", ""); f.Outcome != OutcomeSkipped {
		t.Errorf("second trigger = %s, want skipped", f.Outcome)
	}
	if f, _ := s.Trigger(t.Context(), "nightly", "ada", OverlapAllowAll); f.Outcome != OutcomeFired {
		t.Errorf("trigger allow_all = %s, want fired", f.Outcome)
	}
	fires, err := s.Backfill(t.Context(), "nightly", monday.Add(-3*24*time.Hour), monday, "", "ada")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fires {
		got = append(got, f.Nominal.Format(time.RFC3339)+" "+string(f.Outcome))
	}
	want := []string{"2026-12-04T01:00:00Z buffered", "2026-12-05T01:00:00Z buffered", "2026-12-06T01:00:00Z buffered"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("backfill (-want +got):\n%s", diff)
	}
	// They start one after the other as runs end.
	for range 4 {
		clk.Add(61 * time.Minute)
		tick(t, s)
	}
	var tasks []string
	for _, id := range r.created() {
		tasks = append(tasks, r.runs[id].p.Task)
	}
	want = []string{"night of 2026-12-07 (manual)", "night of 2026-12-07 (manual)", "night of 2026-12-04 (backfill)", "night of 2026-12-05 (backfill)", "night of 2026-12-06 (backfill)"}
	if diff := cmp.Diff(want, tasks); diff != "" {
		t.Errorf("tasks (-want +got):\n%s", diff)
	}
}

func TestFireAtOnce(t *testing.T) {
	t.Parallel()
	s, r, clk, _ := newTest(t, time.Second)
	create(t, s, Schedule{Name: "t", Spec: every(time.Hour), Driver: DriverTemporal})
	clk.Add(time.Hour + 3*time.Second)
	n := monday.Add(time.Hour)
	a, err := s.FireAt(t.Context(), "t", n)
	if err != nil || a.Outcome != OutcomeFired {
		t.Fatalf("FireAt = %+v, %v", a, err)
	}
	b, err := s.FireAt(t.Context(), "t", n) // a retried activity
	if err != nil || b.RunID != a.RunID {
		t.Fatalf("FireAt again = %+v, %v", b, err)
	}
	if f, err := s.FireAt(t.Context(), "t", n.Add(time.Minute)); f != nil || err != nil {
		t.Errorf("FireAt of no nominal time = %+v, %v", f, err)
	}
	// A Temporal fire records every nominal time up to its own that has
	// no record yet (here 02:00, which Temporal did not deliver: it
	// catches up, and 03:00 is skipped while its run goes on).
	clk.Add(2 * time.Hour)
	c, err := s.FireAt(t.Context(), "t", n.Add(2*time.Hour))
	if err != nil || c == nil || c.Outcome != OutcomeSkipped {
		t.Fatalf("FireAt 03:00 = %+v, %v", c, err)
	}
	if diff := cmp.Diff(map[Outcome]int{OutcomeFired: 1, OutcomeCaughtUp: 1, OutcomeSkipped: 1}, counts(t, s, "t")); diff != "" {
		t.Errorf("records after FireAt 03:00 (-want +got):\n%s", diff)
	}
	// Tick leaves due fires to Temporal, and records as missed only
	// what Temporal can no longer deliver.
	clk.Add(2 * time.Hour)
	tick(t, s)
	if c := counts(t, s, "t"); c[OutcomeMissed] != 0 {
		t.Errorf("Tick recorded %v within the window", c)
	}
	if len(r.created()) != 2 {
		t.Errorf("%d runs, want 2", len(r.created()))
	}
}

func TestCreateRefused(t *testing.T) {
	t.Parallel()
	s, _, _, _ := newTest(t, time.Second)
	create(t, s, Schedule{Name: "taken", Spec: every(time.Hour)})
	for _, tt := range []struct {
		name string
		def  Schedule
	}{
		{"name taken", Schedule{Name: "taken", Spec: every(time.Hour), Task: "x"}},
		{"bad name", Schedule{Name: "a b", Spec: every(time.Hour), Task: "x"}},
		{"no task", Schedule{Name: "n", Spec: every(time.Hour)}},
		{"bad template", Schedule{Name: "n", Spec: every(time.Hour), Task: "{{.Nope}}"}},
		{"bad overlap", Schedule{Name: "n", Spec: every(time.Hour), Task: "x", Policy: Policy{Overlap: "sometimes"}}},
		{"interval under a minute", Schedule{Name: "n", Spec: every(time.Second), Task: "x"}},
		{"short window", Schedule{Name: "n", Spec: every(time.Hour), Task: "x", Policy: Policy{CatchupWindow: agent.Duration(time.Second)}}},
		{"bad spec", Schedule{Name: "n", Task: "x"}},
		{"cron that never fires", Schedule{Name: "n", Spec: Spec{Cron: "0 3 31 2 *"}, Task: "x"}},
		{"ends before its first fire", Schedule{Name: "n", Spec: Spec{Every: agent.Duration(24 * time.Hour), End: monday.Add(time.Minute)}, Task: "x"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.Create(t.Context(), &tt.def); !errors.Is(err, ErrInvalid) {
				t.Errorf("Create = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestDeleteStops(t *testing.T) {
	t.Parallel()
	s, r, clk, _ := newTest(t, time.Second)
	create(t, s, Schedule{Name: "d", Spec: every(time.Minute)})
	clk.Add(time.Minute)
	tick(t, s)
	if err := s.Delete(t.Context(), "d", "ada"); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Hour)
	tick(t, s)
	if len(r.created()) != 1 {
		t.Errorf("%d runs, want 1", len(r.created()))
	}
	list, err := s.List(t.Context())
	if err != nil || len(list) != 0 {
		t.Errorf("List = %v, %v", list, err)
	}
	// The name is free again.
	create(t, s, Schedule{Name: "d", Spec: every(time.Minute)})
}

func TestUnknownSchedule(t *testing.T) {
	t.Parallel()
	s, _, _, _ := newTest(t, time.Second)
	for range 3 {
		if _, err := s.Get(t.Context(), "nope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get(nope) = %v", err)
		}
	}
	if err := s.Pause(t.Context(), "nope", "ada", ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("Pause(nope) = %v", err)
	}
	if n := len(s.scheds); n != 0 {
		t.Errorf("%d schedules kept in memory for unknown names", n)
	}
}

// TestFirstPrevious: a task "since {{.Previous}}" names the schedule's
// start on the first fire, never year 1, and the previous fire after.
func TestFirstPrevious(t *testing.T) {
	t.Parallel()
	s, r, clk, _ := newTest(t, time.Second)
	create(t, s, Schedule{Name: "p", Spec: every(time.Hour), Task: "since {{.Previous.Format \"2006-01-02 15:04\"}}"})
	for range 2 {
		clk.Add(time.Hour)
		tick(t, s)
	}
	var tasks []string
	for _, id := range r.created() {
		tasks = append(tasks, r.task(id))
	}
	want := []string{"since " + monday.Format("2006-01-02 15:04"), "since " + monday.Truncate(time.Hour).Add(time.Hour).Format("2006-01-02 15:04")}
	if diff := cmp.Diff(want, tasks); diff != "" {
		t.Errorf("tasks (-want +got):\n%s", diff)
	}
}

// TestTaskTimesWholeSeconds: {{.Time}} and {{.Previous}} print whole
// seconds, although a schedule's creation and a trigger happen at any
// nanosecond.
func TestTaskTimesWholeSeconds(t *testing.T) {
	t.Parallel()
	s, r, clk, _ := newTest(t, time.Second)
	clk.Add(990470982 * time.Nanosecond)
	create(t, s, Schedule{Name: "p", Spec: every(time.Hour), Task: "since {{.Previous}} at {{.Time}}", Policy: Policy{Overlap: OverlapAllowAll}})
	clk.Add(time.Minute + 123456789*time.Nanosecond)
	if _, err := s.Trigger(t.Context(), "p", "ada", ""); err != nil {
		t.Fatal(err)
	}
	created := r.created()
	if len(created) != 1 {
		t.Fatalf("%d runs, want 1", len(created))
	}
	task := r.task(created[0])
	want := fmt.Sprintf("since %s at %s", monday.Add(990470982*time.Nanosecond).Truncate(time.Second), clk.Now().Truncate(time.Second))
	if task != want {
		t.Errorf("task %q, want %q", task, want)
	}
}

// TestTaskTemplatePlain: the task template's data prints as words with
// every verb, never as Go syntax (fresh-user trial 3: `{{printf "%#v" .}}`
// gave `&schedule.TaskData{Schedule:..., Time:time.Date(...)}`); the
// times keep the methods a task uses.
func TestTaskTemplatePlain(t *testing.T) {
	t.Parallel()
	d := &Schedule{Name: "p", Spec: every(time.Hour), Created: monday}
	f := &Fire{Nominal: monday.Add(time.Hour), Source: SourceSchedule}
	for _, tt := range []struct{ task, want string }{
		{`{{printf "%#v" .}}`, "schedule p, time 2026-12-07 01:00:00 +0000 UTC, previous 2026-12-07 00:00:00 +0000 UTC, source schedule"},
		{`{{printf "%+v" .}}`, "schedule p, time 2026-12-07 01:00:00 +0000 UTC, previous 2026-12-07 00:00:00 +0000 UTC, source schedule"},
		{`{{printf "%#v" .Time}}`, "2026-12-07 01:00:00 +0000 UTC"},
		{`{{.Time.Format "2006-01-02 15:04"}} {{(.Previous.AddDate 0 0 -7).Format "Jan 2"}} {{.Time.Weekday}} {{.Time.Month}}`, "2026-12-07 01:00 Nov 30 Monday December"},
	} {
		d.Task = tt.task
		got, err := render(d, f, time.Time{})
		if err != nil || got != tt.want {
			t.Errorf("%s: %q, %v; want %q", tt.task, got, err, tt.want)
		}
	}
}

// A manual fire sees the ends of runs no scheduler recorded (a run a
// person resumed and finished while no keel scheduler ran): it is not
// skipped as overlapping a run that ended.
func TestTriggerAfterUnrecordedEnd(t *testing.T) {
	t.Parallel()
	s, _, clk, _ := newTest(t, time.Hour)
	create(t, s, Schedule{Name: "nightly", Spec: Spec{Cron: "0 2 * * *", TimeZone: "Europe/Berlin"}, Task: "tidy"})
	if f, err := s.Trigger(t.Context(), "nightly", "ada", ""); err != nil || f.Outcome != OutcomeFired {
		t.Fatalf("trigger = %+v %v", f, err)
	}
	clk.Add(2 * time.Hour) // the run has completed; no tick since
	if f, err := s.Trigger(t.Context(), "nightly", "ada", ""); err != nil || f.Outcome != OutcomeFired {
		t.Errorf("trigger after the run ended = %+v %v, want fired", f, err)
	}
}
