package schedule

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// Payloads of the events other than Created (a [Schedule]) and Fired (a
// [Fire]).
type (
	changed struct {
		By     string `json:"by,omitempty"`
		Reason string `json:"reason,omitempty"`
	}
	started struct {
		Key   string         `json:"key"`
		RunID string         `json:"run_id"`
		Late  agent.Duration `json:"late,omitempty"`
		// Outcome is fired, or caught up when the fire was decided late.
		Outcome Outcome `json:"outcome"`
	}
	dispatchFailed struct {
		Key    string `json:"key"`
		Reason string `json:"reason"`
	}
	runEnded struct {
		Key    string         `json:"key"`
		RunID  string         `json:"run_id"`
		Status journal.Status `json:"status"`
	}
)

// keepRecent is how many recent fires a schedule's state keeps in memory;
// [Scheduler.Fires] reads older ones from the journal.
const keepRecent = 100

// state is one schedule folded from its stream.
type state struct {
	def   Schedule
	times *times
	// seq is the newest event folded; at its time.
	seq int64
	at  time.Time

	paused       bool
	pausedBy     string
	pausedReason string
	pausedAt     time.Time
	deleted      bool
	// resumedAt: scheduled fires after a resume start after it.
	resumedAt time.Time

	// cursor is the newest scheduled nominal time such that every
	// nominal time of the spec up to it (outside pauses) is recorded;
	// ahead holds recorded ones beyond it (a Temporal driver may record
	// out of order).
	cursor time.Time
	ahead  map[time.Time]bool
	// keys of manual and backfill fires.
	keys map[string]bool

	// open are fires whose run has not ended (or is not known to have
	// started), oldest first; buffer the buffered fires, in order.
	open   []*Fire
	buffer []*Fire
	// byKey finds an open or buffered fire.
	byKey map[string]*Fire
	// failures counts consecutive failed fires since the last success
	// or resume.
	failures int
	// failing is the first fire whose run could not be created since a
	// run of the schedule last ended (or it was resumed): the start of a
	// lasting failure, told to the schedule's sinks once.
	failing *Fire

	counts  map[Outcome]int
	recent  []*Fire
	lastRun time.Time // nominal time of the newest fire with a run
}

func newState() *state {
	return &state{ahead: map[time.Time]bool{}, keys: map[string]bool{}, byKey: map[string]*Fire{}, counts: map[Outcome]int{}}
}

// apply folds one event of a schedule's stream.
func (st *state) apply(e *journal.Event) error {
	st.seq, st.at = e.Seq, e.Time
	switch e.Type {
	case Created:
		if st.times != nil {
			return errors.New("a second schedule.created")
		}
		if err := json.Unmarshal(e.Payload, &st.def); err != nil {
			return err
		}
		t, err := st.def.Spec.compile(st.def.Created)
		if err != nil {
			return err
		}
		st.times = t
	case Paused:
		var p changed
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return err
		}
		st.paused, st.pausedBy, st.pausedReason, st.pausedAt = true, p.By, p.Reason, e.Time
	case Resumed:
		st.paused, st.pausedBy, st.pausedReason = false, "", ""
		st.resumedAt, st.failures, st.failing = e.Time, 0, nil
	case Deleted:
		st.deleted = true
	case Fired:
		f := new(Fire)
		if err := json.Unmarshal(e.Payload, f); err != nil {
			return err
		}
		if st.recorded(f) {
			return fmt.Errorf("fire %s recorded twice", f.Key)
		}
		f.At = e.Time
		st.record(f)
	case Started:
		var p started
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return err
		}
		f := st.byKey[p.Key]
		if f == nil || f.Outcome != OutcomeBuffered {
			return fmt.Errorf("start of fire %s, which is not buffered", p.Key)
		}
		if p.Outcome != OutcomeFired && p.Outcome != OutcomeCaughtUp {
			return fmt.Errorf("start of fire %s as %q", p.Key, p.Outcome)
		}
		f.Outcome, f.RunID, f.Late, f.Started = p.Outcome, p.RunID, p.Late, e.Time
		st.buffer = slices.DeleteFunc(st.buffer, func(b *Fire) bool { return b == f })
		st.open = append(st.open, f)
		st.counts[OutcomeBuffered]--
		st.counts[p.Outcome]++
		if f.Nominal.After(st.lastRun) {
			st.lastRun = f.Nominal
		}
	case DispatchFailed:
		var p dispatchFailed
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return err
		}
		f := st.byKey[p.Key]
		if f == nil {
			return fmt.Errorf("dispatch failure of fire %s, which has no open run", p.Key)
		}
		st.counts[f.Outcome]--
		f.Outcome, f.Reason = OutcomeFailed, p.Reason
		st.counts[OutcomeFailed]++
		st.close(f)
		st.failures++
		if st.failing == nil {
			st.failing = f
		}
	case RunEnded:
		var p runEnded
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return err
		}
		f := st.byKey[p.Key]
		if f == nil || f.RunID != p.RunID {
			return fmt.Errorf("end of run %s of fire %s, which is not open", p.RunID, p.Key)
		}
		f.RunStatus = p.Status
		st.close(f)
		st.failing = nil // a run was created again
		switch p.Status {
		case journal.StatusFailed:
			st.failures++
		case journal.StatusCompleted:
			st.failures = 0
		}
	default:
		return fmt.Errorf("unknown event type %s", e.Type)
	}
	return nil
}

// recorded reports whether f's key already has a record.
func (st *state) recorded(f *Fire) bool {
	if f.Source != SourceSchedule {
		return st.keys[f.Key]
	}
	return !f.Nominal.After(st.cursor) || st.ahead[f.Nominal]
}

// record folds a new fire record.
func (st *state) record(f *Fire) {
	if f.Source == SourceSchedule {
		st.ahead[f.Nominal] = true
		// Advance the cursor over every recorded time in sequence.
		for {
			n := st.nextNominal()
			if n.IsZero() || !st.ahead[n] {
				break
			}
			delete(st.ahead, n)
			st.cursor = n
		}
	} else {
		st.keys[f.Key] = true
	}
	st.counts[f.Outcome]++
	switch f.Outcome {
	case OutcomeFired, OutcomeCaughtUp:
		st.open = append(st.open, f)
		st.byKey[f.Key] = f
		if f.Nominal.After(st.lastRun) {
			st.lastRun = f.Nominal
		}
	case OutcomeBuffered:
		st.buffer = append(st.buffer, f)
		st.byKey[f.Key] = f
	}
	// A run canceled by this fire no longer holds the schedule: it ends
	// (canceled) in its own time, and does not count as a failure.
	for _, id := range f.Canceled {
		for _, o := range st.open {
			if o.RunID == id {
				o.RunStatus = journal.StatusCanceled
			}
		}
	}
	st.recent = append(st.recent, f)
	if len(st.recent) > keepRecent {
		st.recent = slices.Delete(st.recent, 0, len(st.recent)-keepRecent)
	}
}

// close forgets an open fire whose run ended or never started.
func (st *state) close(f *Fire) {
	st.open = slices.DeleteFunc(st.open, func(o *Fire) bool { return o == f })
	delete(st.byKey, f.Key)
}

// nextNominal returns the first scheduled nominal time not yet behind
// the cursor (after the newest resume), or zero when the spec has no
// more.
func (st *state) nextNominal() time.Time {
	after := st.cursor
	if st.resumedAt.After(after) {
		after = st.resumedAt
	}
	if after.IsZero() {
		after = st.def.Created
	}
	return st.times.next(after)
}

// due returns the time the fire at nominal time n is due: n plus its
// jitter.
func (st *state) due(n time.Time) time.Time {
	return n.Add(jitter(st.def.ID, n, st.def.Spec.Jitter.D()))
}

// holding returns the open runs that hold the schedule (not being
// canceled by a later fire).
func (st *state) holding() []*Fire {
	var h []*Fire
	for _, o := range st.open {
		if o.RunStatus == "" {
			h = append(h, o)
		}
	}
	return h
}
