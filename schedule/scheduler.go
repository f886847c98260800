package schedule

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/keel-run/keel/journal"
)

// Options configures a [Scheduler]. The zero value is valid.
type Options struct {
	// Clock is the scheduler's time: nominal times are compared with it
	// and events carry it. nil means time.Now.
	Clock journal.Clock
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Interval is how often [Scheduler.Run] ticks; 0 means 5 seconds.
	Interval time.Duration
	// LateAfter is how long after its due time a fire that starts a run
	// is recorded as caught up rather than fired; 0 means one minute.
	LateAfter time.Duration
	// DispatchTimeout is how long a fire's run is retried after errors
	// that may pass (the database, the executor) before the fire is
	// recorded as failed; 0 means 10 minutes.
	DispatchTimeout time.Duration
	// MaxPerTick bounds the records one tick makes for one schedule
	// (after a long stop, the rest follow at the next ticks); 0 means
	// 10,000.
	MaxPerTick int
	// NewID returns a new schedule id; nil means a ULID.
	NewID func() string
	// Admit, if set, checks a schedule before it is created (its agent,
	// its policy for unattended work, its credentials); its error is
	// returned by [Scheduler.Create].
	Admit func(ctx context.Context, s *Schedule) error
	// OnFire, if set, is called after each record this scheduler makes
	// (metrics). It must return quickly.
	OnFire func(s *Schedule, f *Fire)
}

// Scheduler keeps the schedules of one journal and fires them. Several
// Schedulers (in several processes sharing a database) may run at once:
// each schedule's tick takes the schedule's lease when the store offers
// one ([journal.Locker]), and every record is appended only if its key
// is not recorded yet, so each nominal fire gets one record and one run
// whatever the number of schedulers.
//
// A Scheduler is safe for concurrent use.
type Scheduler struct {
	store  journal.Store
	runner Runner
	opts   Options
	clock  journal.Clock
	logger *slog.Logger
	dir    *journal.Directory

	mu     sync.Mutex
	scheds map[string]*sched
}

// sched is one schedule's stream and its folded state. Lock order: the
// stream's lock, then mu.
type sched struct {
	s  *journal.Stream
	mu sync.Mutex
	st *state
}

// Errors callers branch on.
var (
	ErrNotFound = errors.New("schedule: no such schedule")
	ErrInvalid  = errors.New("schedule: invalid schedule")
	ErrDeleted  = errors.New("schedule: the schedule was deleted")
	// ErrState is wrapped by the refusal of a change the schedule has
	// made already: a pause of a paused schedule, a resume of one that is
	// not paused.
	ErrState    = errors.New("schedule: already in that state")
	errRecorded = errors.New("schedule: fire recorded already")
	errStale    = errors.New("schedule: state changed")
)

// New returns the scheduler of store's schedules, starting runs through
// runner. It reads nothing until used.
func New(store journal.Store, runner Runner, opts *Options) *Scheduler {
	s := &Scheduler{store: store, runner: runner, scheds: map[string]*sched{}}
	if opts != nil {
		s.opts = *opts
	}
	s.clock = s.opts.Clock
	if s.clock == nil {
		s.clock = time.Now
	}
	s.logger = s.opts.Logger
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.opts.Interval <= 0 {
		s.opts.Interval = 5 * time.Second
	}
	if s.opts.LateAfter <= 0 {
		s.opts.LateAfter = time.Minute
	}
	if s.opts.DispatchTimeout <= 0 {
		s.opts.DispatchTimeout = 10 * time.Minute
	}
	if s.opts.MaxPerTick <= 0 {
		s.opts.MaxPerTick = 10000
	}
	s.dir = journal.NewDirectory(store, DirectoryID, s.clock, Created, Deleted)
	return s
}

// get returns the schedule id or name ref, synced.
func (s *Scheduler) get(ctx context.Context, ref string) (*sched, error) {
	s.mu.Lock()
	_, known := s.scheds[ref]
	s.mu.Unlock()
	if !known {
		if err := s.dir.Sync(ctx); err != nil {
			return nil, err
		}
	}
	id, _ := s.dir.Resolve(ref)
	s.mu.Lock()
	sc := s.scheds[id]
	if sc == nil {
		sc = &sched{st: newState()}
		sc.s = journal.NewStream(s.store, StreamPrefix+id, s.clock, func(e *journal.Event) error {
			sc.mu.Lock()
			defer sc.mu.Unlock()
			return sc.st.apply(e)
		})
		s.scheds[id] = sc
	}
	s.mu.Unlock()
	if err := sc.s.Sync(ctx); err != nil {
		return nil, err
	}
	sc.mu.Lock()
	missing := sc.st.times == nil
	sc.mu.Unlock()
	if missing {
		// Forget it: a stream per unknown name would pile up.
		s.mu.Lock()
		if s.scheds[id] == sc {
			delete(s.scheds, id)
		}
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	return sc, nil
}

// Create checks and journals a new schedule. It fills in ID and Created
// (and CreatedBy is kept as given).
func (s *Scheduler) Create(ctx context.Context, def *Schedule) (*Schedule, error) {
	d := *def
	d.Created = s.clock().UTC()
	if s.opts.NewID != nil {
		d.ID = s.opts.NewID()
	} else {
		d.ID = newULID(d.Created)
	}
	if err := Check(&d); err != nil {
		return nil, err
	}
	if s.opts.Admit != nil {
		if err := s.opts.Admit(ctx, &d); err != nil {
			return nil, err
		}
	}
	if err := s.dir.Taken(ctx, d.Name); err != nil {
		return nil, nameErr(err, d.Name)
	}
	// The schedule's own stream first: a directory entry always has one.
	st := journal.NewStream(s.store, StreamPrefix+d.ID, s.clock, func(*journal.Event) error { return nil })
	if _, err := st.Append(ctx, Created, &d, nil); err != nil {
		return nil, err
	}
	if err := s.dir.Add(ctx, d.ID, d.Name, d.CreatedBy); err != nil {
		return nil, nameErr(err, d.Name)
	}
	return &d, nil
}

// nameErr turns a taken name into ErrInvalid.
func nameErr(err error, name string) error {
	if errors.Is(err, journal.ErrNameTaken) {
		return fmt.Errorf("%w: a schedule named %q exists", ErrInvalid, name)
	}
	return err
}

// Check validates a schedule's definition: its name, spec, policy and
// task template.
func Check(d *Schedule) error {
	if err := checkName(d.Name); err != nil {
		return err
	}
	if e := d.Spec.Every.D(); e > 0 && e < MinInterval {
		return fmt.Errorf("%w: the interval %s is shorter than %s (a schedule fires at most once a minute)", ErrInvalid, e, MinInterval)
	}
	tm, err := d.Spec.compile(d.Created)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if tm.next(d.Created).IsZero() {
		if d.Spec.Cron != "" && d.Spec.End.IsZero() {
			return fmt.Errorf("%w: cron expression %q never fires (no such date in the next five years)", ErrInvalid, d.Spec.Cron)
		}
		return fmt.Errorf("%w: the schedule never fires: no nominal time before its end", ErrInvalid)
	}
	o, err := ParseOverlap(string(d.Policy.Overlap))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	d.Policy.Overlap = o
	if w := d.Policy.CatchupWindow.D(); w != 0 && w < MinCatchupWindow {
		return fmt.Errorf("%w: the catch-up window %s is shorter than %s", ErrInvalid, w, MinCatchupWindow)
	}
	if d.Policy.PauseAfterFailures < 0 {
		return fmt.Errorf("%w: pause after failures cannot be negative", ErrInvalid)
	}
	if d.Driver != "" && d.Driver != DriverTemporal {
		return fmt.Errorf("%w: unknown driver %q", ErrInvalid, d.Driver)
	}
	if strings.TrimSpace(d.Task) == "" {
		return fmt.Errorf("%w: a schedule needs a task", ErrInvalid)
	}
	if _, err := render(d, &Fire{Source: SourceSchedule, Nominal: d.Created}, time.Time{}); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// checkName accepts 1 to 100 letters, digits, '-', '_' and '.', not
// starting with "keel" nor looking like a ULID-only id clash.
func checkName(n string) error {
	if n == "" || len(n) > 100 {
		return fmt.Errorf("%w: a schedule needs a name of 1 to 100 characters", ErrInvalid)
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("%w: schedule name %q: use letters, digits, '-', '_' and '.'", ErrInvalid, n)
		}
	}
	return nil
}

// render renders the task template of d for fire f, whose previous
// nominal time is prev.
func render(d *Schedule, f *Fire, prev time.Time) (string, error) {
	t, err := template.New("task").Option("missingkey=error").Parse(d.Task)
	if err != nil {
		return "", fmt.Errorf("task template: %v", err)
	}
	loc := time.UTC
	if d.Spec.TimeZone != "" {
		if l, err := time.LoadLocation(d.Spec.TimeZone); err == nil {
			loc = l
		}
	}
	// Whole seconds: a task reads "since 2026-12-06 17:24:30 +0100 CET",
	// never the nanoseconds of a creation or trigger time.
	data := TaskData{Schedule: d.Name, Time: NewTaskTime(f.Nominal.In(loc)), Source: string(f.Source)}
	if prev.IsZero() {
		// The first fire with a run: "since {{.Previous}}" means since
		// the schedule began, never since year 1.
		prev = d.Spec.Start
		if prev.IsZero() || prev.After(f.Nominal) {
			prev = d.Created
		}
	}
	if !prev.IsZero() {
		data.Previous = NewTaskTime(prev.In(loc))
	}
	var b bytes.Buffer
	if err := t.Execute(&b, &data); err != nil {
		return "", fmt.Errorf("task template: %v", err)
	}
	if strings.TrimSpace(b.String()) == "" {
		return "", errors.New("task template: renders empty")
	}
	return b.String(), nil
}

// Pause stops a schedule's fires until [Scheduler.Resume].
func (s *Scheduler) Pause(ctx context.Context, ref, by, reason string) error {
	sc, err := s.get(ctx, ref)
	if err != nil {
		return err
	}
	_, err = sc.s.Append(ctx, Paused, &changed{By: by, Reason: reason}, sc.check(func(st *state) error {
		if st.paused {
			return fmt.Errorf("%w: schedule %s is paused already (%s by %s)", ErrState, st.def.Name, st.pausedAt.UTC().Format(time.RFC3339), st.pausedBy)
		}
		return nil
	}))
	return err
}

// Resume restarts a paused schedule's fires from now: nominal times
// while it was paused are not fired, nor recorded.
func (s *Scheduler) Resume(ctx context.Context, ref, by string) error {
	sc, err := s.get(ctx, ref)
	if err != nil {
		return err
	}
	_, err = sc.s.Append(ctx, Resumed, &changed{By: by}, sc.check(func(st *state) error {
		if !st.paused {
			return fmt.Errorf("%w: schedule %s is not paused", ErrState, st.def.Name)
		}
		return nil
	}))
	return err
}

// Delete ends a schedule: it fires no more. Its records stay in the
// journal; runs it started go on.
func (s *Scheduler) Delete(ctx context.Context, ref, by string) error {
	sc, err := s.get(ctx, ref)
	if err != nil {
		return err
	}
	sc.mu.Lock()
	id := sc.st.def.ID
	sc.mu.Unlock()
	if _, err := sc.s.Append(ctx, Deleted, &changed{By: by}, sc.check(nil)); err != nil {
		return err
	}
	return s.dir.Remove(ctx, id, by)
}

// check returns an append check that refuses changes to a deleted
// schedule and then runs more (if set) on the up-to-date state.
func (sc *sched) check(more func(st *state) error) func() error {
	return func() error {
		sc.mu.Lock()
		defer sc.mu.Unlock()
		if sc.st.deleted {
			return fmt.Errorf("%w: %s", ErrDeleted, sc.st.def.Name)
		}
		if more != nil {
			return more(sc.st)
		}
		return nil
	}
}

// Trigger fires a schedule now, outside its spec ("trigger now"), under
// its overlap policy unless overlap is set. It returns the fire's record
// once its run was started: failed, with the reason, when the run could
// not be created.
func (s *Scheduler) Trigger(ctx context.Context, ref, by string, overlap Overlap) (*Fire, error) {
	sc, err := s.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	// The overlap policy looks at runs that have not ended: record the
	// ends no scheduler saw (a run a person resumed and finished while
	// no keel scheduler ran).
	if err := s.recordEnds(ctx, sc, false); err != nil {
		return nil, err
	}
	now := s.clock().UTC()
	f := &Fire{Key: "manual:" + newULID(now), Source: SourceManual, Nominal: now, Due: now, By: by}
	rec, err := s.fire(ctx, sc, f, overlap)
	if err != nil || rec == nil || !rec.ran() {
		return rec, err
	}
	// Its run was started (or could not be): the record as it is now,
	// failed with the reason when the run could not be created.
	if cur, err := s.find(ctx, sc, f.Key); err == nil {
		return cur, nil
	}
	return rec, nil
}

// MaxBackfill bounds the fires of one backfill.
const MaxBackfill = 10000

// Backfill fires the schedule at each of its nominal times after from
// and up to to, as if it had run then, under overlap (default
// buffer_all: one after the other). It returns the fires recorded.
func (s *Scheduler) Backfill(ctx context.Context, ref string, from, to time.Time, overlap Overlap, by string) ([]*Fire, error) {
	sc, err := s.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	if overlap == "" {
		overlap = OverlapBufferAll
	}
	if err := s.recordEnds(ctx, sc, false); err != nil {
		return nil, err
	}
	if !to.After(from) {
		return nil, fmt.Errorf("%w: a backfill's end must be after its start", ErrInvalid)
	}
	sc.mu.Lock()
	t := *sc.st.times
	sc.mu.Unlock()
	t.start = time.Time{} // a backfill may reach before the schedule existed
	var ns []time.Time
	for n := t.next(from); !n.IsZero() && !n.After(to); n = t.next(n) {
		if len(ns) == MaxBackfill {
			return nil, fmt.Errorf("%w: the range holds more than %d fires", ErrInvalid, MaxBackfill)
		}
		ns = append(ns, n)
	}
	bid := newULID(s.clock())
	var out []*Fire
	for len(ns) > 0 {
		batch := make([]*Fire, 0, min(len(ns), maxBatch))
		for _, n := range ns[:cap(batch)] {
			batch = append(batch, &Fire{Key: "backfill:" + bid + ":" + scheduledKey(n), Source: SourceBackfill, Nominal: n, Due: n, By: by})
		}
		ns = ns[len(batch):]
		recs, err := s.fireBatch(ctx, sc, batch, overlap)
		if err != nil {
			return out, err
		}
		out = append(out, recs...)
	}
	return out, nil
}

// FireAt records (and starts) the scheduled fires due up to nominal
// time n, for a schedule whose driver is Temporal: the Temporal
// Schedule's workflow calls it at each of its fire times (after the
// fire's jitter), and it records every nominal time of the spec up to n
// that is due and has no record yet, in order, with the same decisions
// as [Scheduler.Tick] (so Temporal's and Keel's reading of the spec never
// disagree about which times exist). It returns the record of n, nil
// when n is not a nominal time with a record (paused, deleted, not due
// yet). Calling it again (a retried activity) records nothing more.
// While another process works on the schedule it returns an error
// wrapping journal.ErrLocked: retry it.
func (s *Scheduler) FireAt(ctx context.Context, ref string, n time.Time) (*Fire, error) {
	sc, err := s.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	n = n.UTC()
	sc.mu.Lock()
	id := sc.st.def.ID
	sc.mu.Unlock()
	if err := s.process(ctx, id, n); err != nil {
		return nil, err
	}
	f, err := s.find(ctx, sc, scheduledKey(n))
	if err != nil {
		return nil, nil
	}
	return f, nil
}
