package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// Principal is the "by" of what the scheduler does on its own (pausing
// after failures, canceling for an overlap policy).
const Principal = "keel.scheduler"

var errPaused = errors.New("schedule: paused")

func newULID(t time.Time) string {
	return strings.ToLower(ulid.MustNew(ulid.Timestamp(t), ulid.DefaultEntropy()).String())
}

// view is what a decision reads of a schedule's state: the open and
// buffered fires, updated by each decision of a batch.
type view struct {
	open    int
	running []string // open runs not being canceled
	buffer  int
}

func (st *state) view() *view {
	v := &view{open: len(st.open), buffer: len(st.buffer)}
	for _, o := range st.holding() {
		v.running = append(v.running, o.RunID)
	}
	return v
}

// decide returns the record of fire f decided at now on v, and updates v.
func (s *Scheduler) decide(def *Schedule, v *view, f *Fire, now time.Time, overlap Overlap) *Fire {
	r := *f
	r.RunID = RunID(def.ID, f.Key, f.Nominal)
	late := now.Sub(f.Due)
	if late < 0 {
		late = 0
	}
	r.Late = agent.Duration(late)
	if f.Source == SourceSchedule && late > def.Policy.window() {
		r.Outcome, r.RunID = OutcomeMissed, ""
		r.Reason = fmt.Sprintf("found %s after its due time, beyond the catch-up window of %s", late.Round(time.Second), def.Policy.window())
		return &r
	}
	fired := OutcomeFired
	if f.Source == SourceSchedule && late > s.opts.LateAfter {
		fired = OutcomeCaughtUp
	}
	busy := v.open > 0 || v.buffer > 0
	switch {
	case !busy || overlap == OverlapAllowAll:
		r.Outcome = fired
	case overlap == OverlapBufferOne && v.buffer == 0, overlap == OverlapBufferAll:
		r.Outcome = OutcomeBuffered
	case overlap == OverlapBufferOne:
		r.Outcome, r.RunID, r.Reason = OutcomeSkipped, "", "a fire is buffered already (buffer_one)"
	case overlap == OverlapCancelOther:
		r.Outcome, r.Canceled = OutcomeBuffered, v.running
	case overlap == OverlapTerminateOther:
		r.Outcome, r.Canceled = fired, v.running
	default:
		r.Outcome, r.RunID = OutcomeSkipped, ""
		if len(v.running) > 0 {
			r.Reason = "run " + strings.Join(v.running, ", ") + " has not ended (skip)"
		} else {
			r.Reason = "earlier fires wait to start (skip)"
		}
	}
	if len(r.Canceled) > 0 {
		v.running = nil
	}
	switch r.Outcome {
	case OutcomeFired, OutcomeCaughtUp:
		v.open++
		v.running = append(v.running, r.RunID)
	case OutcomeBuffered:
		v.buffer++
	}
	return &r
}

// fire records one fire (see fireBatch); errRecorded when its key has a
// record already.
func (s *Scheduler) fire(ctx context.Context, sc *sched, f *Fire, overlap Overlap) (*Fire, error) {
	recs, err := s.fireBatch(ctx, sc, []*Fire{f}, overlap)
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		sc.mu.Lock()
		recorded := sc.st.recorded(f)
		sc.mu.Unlock()
		if recorded {
			return nil, errRecorded
		}
		return nil, nil // paused
	}
	return recs[0], nil
}

// maxBatch bounds the records of one append.
const maxBatch = 500

// fireBatch decides and records fires in one append (leaving out those
// recorded already), then cancels and starts what the records say. It
// returns the records it made; none when the schedule is paused and the
// fires are scheduled ones.
func (s *Scheduler) fireBatch(ctx context.Context, sc *sched, fires []*Fire, overlap Overlap) ([]*Fire, error) {
	for range 100 {
		now := s.clock().UTC()
		sc.mu.Lock()
		st := sc.st
		if st.deleted {
			sc.mu.Unlock()
			return nil, ErrDeleted
		}
		ov := overlap
		if ov == "" {
			ov = st.def.Policy.Overlap
		}
		def, seq, v := st.def, st.seq, st.view()
		var recs []*Fire
		var items []journal.Item
		for _, f := range fires {
			if st.recorded(f) {
				continue
			}
			r := s.decide(&def, v, f, now, ov)
			recs = append(recs, r)
			items = append(items, journal.Item{Type: Fired, Value: r})
		}
		sc.mu.Unlock()
		if len(items) == 0 {
			return nil, nil
		}
		_, err := sc.s.AppendMany(ctx, items, sc.check(func(st *state) error {
			switch {
			case st.seq != seq:
				return errStale
			case fires[0].Source == SourceSchedule && st.paused:
				return errPaused
			}
			return nil
		}))
		switch {
		case errors.Is(err, errStale):
			continue
		case errors.Is(err, errPaused):
			return nil, nil
		case err != nil:
			return nil, err
		}
		for _, rec := range recs {
			rec.At = now
			s.observe(&def, rec)
			for _, id := range rec.Canceled {
				if err := s.runner.Cancel(ctx, id, fmt.Sprintf("schedule %s fired again (%s)", def.Name, ov)); err != nil {
					s.logger.Warn("schedule: cancel for overlap", "schedule", def.Name, "run_id", id, "err", err)
				}
			}
			if rec.ran() {
				s.dispatch(ctx, sc, rec)
			}
		}
		return recs, nil
	}
	return nil, fmt.Errorf("schedule: schedule %s keeps changing", sc.s.ID())
}

func (s *Scheduler) observe(def *Schedule, f *Fire) {
	if s.opts.OnFire != nil {
		s.opts.OnFire(def, f)
	}
}

// dispatch starts f's run. A permanent error records the fire as
// failed; another is left for the next tick to retry.
func (s *Scheduler) dispatch(ctx context.Context, sc *sched, f *Fire) {
	sc.mu.Lock()
	def := sc.st.def
	prev := sc.st.previous(f)
	sc.mu.Unlock()
	task, err := render(&def, f, prev)
	if err == nil {
		err = s.runner.Start(ctx, &StartParams{RunID: f.RunID, Agent: def.Agent, OnBehalfOf: def.OnBehalfOf, Task: task, Run: def.Run,
			Labels: map[string]string{LabelSchedule: def.Name, LabelFire: f.Key}, Notify: def.Notify, Owner: def.Owner})
		if err == nil || errors.Is(err, ErrRunExists) {
			return
		}
	} else {
		err = fmt.Errorf("%w: %v", ErrPermanent, err)
	}
	if !errors.Is(err, ErrPermanent) {
		s.logger.Warn("schedule: start run (will retry)", "schedule", def.Name, "run_id", f.RunID, "err", err)
		return
	}
	s.failDispatch(ctx, sc, f, err)
}

// failDispatch records that f's run could not be created.
func (s *Scheduler) failDispatch(ctx context.Context, sc *sched, f *Fire, cause error) {
	reason := strings.TrimPrefix(cause.Error(), ErrPermanent.Error()+": ")
	_, err := sc.s.Append(ctx, DispatchFailed, &dispatchFailed{Key: f.Key, Reason: reason}, sc.check(func(st *state) error {
		if o := st.byKey[f.Key]; o == nil || o.RunID != f.RunID || !o.ran() {
			return errStale
		}
		return nil
	}))
	if err != nil && !errors.Is(err, errStale) {
		s.logger.Warn("schedule: record dispatch failure", "run_id", f.RunID, "err", err)
	}
}

// previous returns the nominal time of the newest fire with a run
// before f (for the task template), or zero.
func (st *state) previous(f *Fire) time.Time {
	if st.lastRun.Before(f.Nominal) {
		return st.lastRun
	}
	var p time.Time
	for _, r := range st.recent {
		if r.ran() && r.Nominal.Before(f.Nominal) && r.Nominal.After(p) {
			p = r.Nominal
		}
	}
	return p
}

// Tick does what is due at the scheduler's clock for every schedule:
// records the ends of runs, pauses schedules after failures, starts
// buffered fires, and records (and starts) every due nominal time. Run
// calls it periodically; tests call it at the times they choose.
func (s *Scheduler) Tick(ctx context.Context) error {
	ids, err := s.dir.IDs(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if err := s.tickOne(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("schedule %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// Run ticks every [Options.Interval] until ctx ends, logging errors.
func (s *Scheduler) Run(ctx context.Context) {
	t := time.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		if err := s.Tick(ctx); err != nil && ctx.Err() == nil {
			s.logger.Warn("schedule: tick", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Scheduler) tickOne(ctx context.Context, id string) error {
	err := s.process(ctx, id, time.Time{})
	if errors.Is(err, journal.ErrLocked) {
		return nil // another scheduler ticks it now
	}
	return err
}

// process does what is due for one schedule under its lease: records the
// ends of runs, pauses after failures, starts buffered fires, and
// records the due nominal times (up to upTo, when set). It returns an
// error wrapping journal.ErrLocked when another process holds the lease.
func (s *Scheduler) process(ctx context.Context, id string, upTo time.Time) error {
	if l, ok := s.store.(journal.Locker); ok {
		unlock, err := l.Lock(ctx, StreamPrefix+id)
		if err != nil {
			return err
		}
		defer unlock()
	}
	sc, err := s.get(ctx, id)
	if err != nil {
		return err
	}
	sc.mu.Lock()
	deleted := sc.st.deleted
	sc.mu.Unlock()
	if deleted {
		return nil
	}
	if err := s.reconcile(ctx, sc); err != nil {
		return err
	}
	if err := s.pauseOnFailures(ctx, sc); err != nil {
		return err
	}
	if err := s.startBuffered(ctx, sc); err != nil {
		return err
	}
	return s.generate(ctx, sc, upTo)
}

// reconcile looks at every open fire's run: records the ends, and starts
// again runs that were recorded but not created (a crash between the
// record and the run).
func (s *Scheduler) reconcile(ctx context.Context, sc *sched) error {
	return s.recordEnds(ctx, sc, true)
}

// recordEnds records the ends of the open fires' runs; with dispatch,
// it also starts again runs recorded but not created (reconcile).
func (s *Scheduler) recordEnds(ctx context.Context, sc *sched, dispatch bool) error {
	sc.mu.Lock()
	open := make([]Fire, 0, len(sc.st.open))
	for _, f := range sc.st.open {
		open = append(open, *f)
	}
	sc.mu.Unlock()
	now := s.clock()
	for i := range open {
		f := &open[i]
		status, err := s.runner.Status(ctx, f.RunID)
		if errors.Is(err, journal.ErrNotFound) && !dispatch {
			continue
		}
		if errors.Is(err, journal.ErrNotFound) {
			since := f.At
			if !f.Started.IsZero() {
				since = f.Started
			}
			if now.Sub(since) > s.opts.DispatchTimeout {
				s.failDispatch(ctx, sc, f, fmt.Errorf("the run was not created within %s", s.opts.DispatchTimeout))
				continue
			}
			s.dispatch(ctx, sc, f)
			continue
		}
		if err != nil {
			return err
		}
		if !status.Terminal() {
			continue
		}
		_, err = sc.s.Append(ctx, RunEnded, &runEnded{Key: f.Key, RunID: f.RunID, Status: status}, sc.check(func(st *state) error {
			if o := st.byKey[f.Key]; o == nil || o.RunID != f.RunID || !o.ran() {
				return errStale
			}
			return nil
		}))
		if err != nil && !errors.Is(err, errStale) && !errors.Is(err, ErrDeleted) {
			return err
		}
	}
	return nil
}

// pauseOnFailures pauses the schedule when its policy's count of
// consecutive failed fires is reached.
func (s *Scheduler) pauseOnFailures(ctx context.Context, sc *sched) error {
	sc.mu.Lock()
	n, failures, paused := sc.st.def.Policy.PauseAfterFailures, sc.st.failures, sc.st.paused
	sc.mu.Unlock()
	if n <= 0 || failures < n || paused {
		return nil
	}
	reason := fmt.Sprintf("%d consecutive fires failed", failures)
	_, err := sc.s.Append(ctx, Paused, &changed{By: Principal, Reason: reason}, sc.check(func(st *state) error {
		if st.paused || st.failures < n {
			return errStale
		}
		return nil
	}))
	if errors.Is(err, errStale) || errors.Is(err, ErrDeleted) {
		return nil
	}
	return err
}

// startBuffered starts the oldest buffered fire once no run of the
// schedule is open.
func (s *Scheduler) startBuffered(ctx context.Context, sc *sched) error {
	for {
		now := s.clock().UTC()
		sc.mu.Lock()
		if sc.st.paused || len(sc.st.open) > 0 || len(sc.st.buffer) == 0 {
			sc.mu.Unlock()
			return nil
		}
		f := *sc.st.buffer[0]
		sc.mu.Unlock()
		late := now.Sub(f.Due)
		if late < 0 {
			late = 0
		}
		// A fire decided late (after a stop) stays a catch-up when it
		// starts.
		outcome := OutcomeFired
		if f.Source == SourceSchedule && f.Late.D() > s.opts.LateAfter {
			outcome = OutcomeCaughtUp
		}
		_, err := sc.s.Append(ctx, Started, &started{Key: f.Key, RunID: f.RunID, Late: agent.Duration(late), Outcome: outcome}, sc.check(func(st *state) error {
			if st.paused || len(st.open) > 0 || len(st.buffer) == 0 || st.buffer[0].Key != f.Key {
				return errStale
			}
			return nil
		}))
		if errors.Is(err, errStale) || errors.Is(err, ErrDeleted) {
			return nil
		}
		if err != nil {
			return err
		}
		f.Outcome, f.Late, f.Started = outcome, agent.Duration(late), now
		s.dispatch(ctx, sc, &f)
	}
}

// generate records every scheduled nominal time that is due, in
// batches; upTo, when set, bounds the nominal times (a Temporal fire).
// Without upTo, for a Temporal-driven schedule it records only those
// beyond the catch-up window (Temporal will not deliver them), as missed.
func (s *Scheduler) generate(ctx context.Context, sc *sched, upTo time.Time) error {
	for done := 0; done < s.opts.MaxPerTick; {
		now := s.clock().UTC()
		sc.mu.Lock()
		st := sc.st
		if st.paused || st.deleted {
			sc.mu.Unlock()
			return nil
		}
		temporal, window := st.def.Driver == DriverTemporal, st.def.Policy.window()
		var batch []*Fire
		for n := st.nextNominal(); !n.IsZero() && len(batch) < maxBatch && done+len(batch) < s.opts.MaxPerTick; n = st.times.next(n) {
			due := st.due(n)
			if due.After(now) || !upTo.IsZero() && n.After(upTo) || upTo.IsZero() && temporal && now.Sub(due) <= window+s.opts.LateAfter {
				break
			}
			batch = append(batch, &Fire{Key: scheduledKey(n), Source: SourceSchedule, Nominal: n, Due: due})
		}
		sc.mu.Unlock()
		if len(batch) == 0 {
			return nil
		}
		recs, err := s.fireBatch(ctx, sc, batch, "")
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			sc.mu.Lock()
			stuck := !st.paused && st.nextNominal().Equal(batch[0].Nominal)
			sc.mu.Unlock()
			if stuck {
				return fmt.Errorf("schedule: %s is not recorded and cannot be", batch[0].Key)
			}
		}
		done += len(batch)
	}
	return nil
}
