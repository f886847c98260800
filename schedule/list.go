package schedule

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/keel-run/keel/journal"
)

// Status is a schedule as listed: its definition and what its records
// say.
type Status struct {
	Schedule
	Paused       bool      `json:"paused,omitempty"`
	PausedBy     string    `json:"paused_by,omitempty"`
	PausedReason string    `json:"paused_reason,omitempty"`
	PausedAt     time.Time `json:"paused_at,omitzero"`
	Deleted      bool      `json:"deleted,omitempty"`
	// Next is the next nominal time (zero: none, the schedule ended).
	Next time.Time `json:"next,omitzero"`
	// Counts are the records by outcome.
	Counts map[Outcome]int `json:"counts"`
	// Open are the runs fired and not ended; Buffered the fires waiting.
	Open     []string `json:"open,omitempty"`
	Buffered int      `json:"buffered,omitempty"`
	// Failures counts the consecutive failed fires.
	Failures int `json:"failures,omitempty"`
	// Failing is the first fire whose run could not be created since a
	// run of the schedule last ended or it was resumed (nil: none): a
	// failure that lasts (a revoked creator, a workspace gone) makes
	// every later fire fail too, so this one stands for all of them.
	Failing *Fire `json:"failing,omitempty"`
	// Last is the newest record.
	Last *Fire `json:"last,omitempty"`
}

// List returns every schedule not deleted, oldest first.
func (s *Scheduler) List(ctx context.Context) ([]*Status, error) {
	ids, err := s.dir.IDs(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*Status, 0, len(ids))
	for _, id := range ids {
		st, err := s.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// Get returns the schedule named or identified by ref.
func (s *Scheduler) Get(ctx context.Context, ref string) (*Status, error) {
	sc, err := s.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	st := sc.st
	out := &Status{Schedule: st.def, Paused: st.paused, PausedBy: st.pausedBy, PausedReason: st.pausedReason, Deleted: st.deleted, Counts: map[Outcome]int{}, Buffered: len(st.buffer), Failures: st.failures}
	if st.paused {
		out.PausedAt = st.pausedAt
	}
	for k, v := range st.counts {
		if v != 0 {
			out.Counts[k] = v
		}
	}
	if !st.deleted && !st.paused {
		if n := st.nextNominal(); !n.IsZero() {
			out.Next = n
		}
	}
	for _, f := range st.open {
		out.Open = append(out.Open, f.RunID)
	}
	if st.failing != nil {
		f := *st.failing
		out.Failing = &f
	}
	if n := len(st.recent); n > 0 {
		l := *st.recent[n-1]
		out.Last = &l
	}
	return out, nil
}

// FiresParams filters [Scheduler.Fires]. The zero value returns every
// record, oldest first.
type FiresParams struct {
	// Outcome keeps only records with this outcome ("" all).
	Outcome Outcome
	// Last keeps only the newest Last records (0: all).
	Last int
}

// Fires reads a schedule's records from the journal, each with what
// happened to it since (a buffered fire's start, a failed dispatch, the
// run's end), in the order they were recorded.
func (s *Scheduler) Fires(ctx context.Context, ref string, p *FiresParams) ([]*Fire, error) {
	sc, err := s.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	if p == nil {
		p = &FiresParams{}
	}
	events, err := journal.ReadVerified(ctx, s.store, sc.s.ID())
	if err != nil {
		return nil, err
	}
	var fires []*Fire
	byKey := map[string]*Fire{}
	for i := range events {
		e := &events[i]
		switch e.Type {
		case Fired:
			f := new(Fire)
			if err := json.Unmarshal(e.Payload, f); err != nil {
				return nil, fmt.Errorf("schedule: event %d: %w", e.Seq, err)
			}
			f.At = e.Time
			fires = append(fires, f)
			byKey[f.Key] = f
		case Started:
			var q started
			if json.Unmarshal(e.Payload, &q) == nil && byKey[q.Key] != nil {
				f := byKey[q.Key]
				f.Outcome, f.RunID, f.Late, f.Started = q.Outcome, q.RunID, q.Late, e.Time
			}
		case DispatchFailed:
			var q dispatchFailed
			if json.Unmarshal(e.Payload, &q) == nil && byKey[q.Key] != nil {
				byKey[q.Key].Outcome, byKey[q.Key].Reason = OutcomeFailed, q.Reason
			}
		case RunEnded:
			var q runEnded
			if json.Unmarshal(e.Payload, &q) == nil && byKey[q.Key] != nil {
				byKey[q.Key].RunStatus = q.Status
			}
		}
	}
	if p.Outcome != "" {
		fires = slices.DeleteFunc(fires, func(f *Fire) bool { return f.Outcome != p.Outcome })
	}
	if p.Last > 0 && len(fires) > p.Last {
		fires = fires[len(fires)-p.Last:]
	}
	return fires, nil
}

// find returns the record of key.
func (s *Scheduler) find(ctx context.Context, sc *sched, key string) (*Fire, error) {
	sc.mu.Lock()
	if f := sc.st.byKey[key]; f != nil {
		c := *f
		sc.mu.Unlock()
		return &c, nil
	}
	for _, f := range sc.st.recent {
		if f.Key == key {
			c := *f
			sc.mu.Unlock()
			return &c, nil
		}
	}
	id := sc.st.def.ID
	sc.mu.Unlock()
	fires, err := s.Fires(ctx, id, nil)
	if err != nil {
		return nil, err
	}
	for _, f := range fires {
		if f.Key == key {
			return f, nil
		}
	}
	return nil, fmt.Errorf("schedule: no record %s", key)
}
