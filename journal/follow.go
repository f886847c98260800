package journal

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"
)

// DefaultPoll is how often [Follow] re-reads a run when no in-process
// wake-up arrives, to see appends by other processes.
const DefaultPoll = 200 * time.Millisecond

// SharedPoll is how often [Follow] re-reads a run without a wake-up when
// its store notifies appends by every process ([SharedNotifier]).
const SharedPoll = 10 * time.Second

// ReadVerified reads run's whole journal from s and checks it with
// [Verify]. It returns the events, or an error wrapping [ErrNotFound] for
// an unknown run, a [*CorruptError] naming the first bad event for a
// journal that fails its chain (a run the store lists with no events is
// corrupt at event 1), or the store's error. Use it wherever a journal is
// trusted: before folding, resuming, exporting or replaying.
//
// A chain proves that no event was changed, removed or inserted before the
// newest one; it cannot by itself notice that newest events were cut off.
// Backends that index the newest event (journal/sqlite does) refuse to
// append to a run whose tail disagrees with the index.
func ReadVerified(ctx context.Context, s Store, runID string) ([]Event, error) {
	events, err := s.Read(ctx, runID, 1)
	if err != nil {
		return nil, err
	}
	if len(events) == 0 {
		return nil, &CorruptError{RunID: runID, Seq: 1, Reason: "the run exists but has no events"}
	}
	if err := Verify(runID, events); err != nil {
		return nil, err
	}
	if err := CheckHead(ctx, s, runID, events); err != nil {
		return nil, err
	}
	return events, nil
}

// Follow reads run live: it yields the events of runID with Seq >= from
// (from < 1 means 1) that are stored now, then each new event as it is
// appended, until ctx is done or the loop body stops.
//
// Delivery: within one Follow, every event from from onward is yielded
// exactly once, in sequence order, with no gaps. A consumer that resumes
// with a new Follow from the last sequence number it processed plus one
// therefore sees every event at least once, in order, across restarts.
//
// Wake-ups: if s implements [Notifier], an append through s wakes the
// follower at once; appends by other processes (or other Store handles on
// the same database) are found by re-reading every poll interval (poll <= 0
// means [DefaultPoll]), or every [SharedPoll] while s notifies those too
// ([SharedNotifier]). A run that does not exist yet is waited for, so a
// follower may start before the writer; read it first if an unknown run
// should be an error.
//
// Integrity: each yielded event's hash is recomputed and checked against
// its content, its sequence number and its link to the previous event
// (the genesis hash for event 1; the first event's PrevHash is trusted
// when from > 1: use [ReadVerified] to check from the start). A failure
// yields a [*CorruptError] and ends the sequence; so does any store error,
// which is yielded once. When ctx is done, Follow ends without yielding an
// error: check ctx.Err() after the loop if the reason matters.
//
// Follow itself does nothing until ranged over; each range starts afresh
// from from, and releases its subscription and timer when it ends.
func Follow(ctx context.Context, s Store, runID string, from int64, poll time.Duration) iter.Seq2[Event, error] {
	if poll <= 0 {
		poll = DefaultPoll
	}
	from = max(from, 1)
	return func(yield func(Event, error) bool) {
		// Subscribe before the first read, so that an append landing
		// between the read and the wait still leaves a wake-up pending.
		var wake <-chan struct{}
		if n, ok := s.(Notifier); ok {
			ch, stop := n.Notify(runID)
			defer stop()
			wake = ch
		}
		shared, _ := s.(SharedNotifier)
		interval := func() time.Duration {
			if shared != nil && shared.Listening() {
				return max(poll, SharedPoll)
			}
			return poll
		}
		timer := time.NewTimer(interval())
		defer timer.Stop()
		next, prev := from, ""
		if from == 1 {
			prev = GenesisHash
		}
		for {
			events, err := s.Read(ctx, runID, next)
			switch {
			case errors.Is(err, ErrNotFound):
				events, err = nil, nil
			case err == nil && next == 1 && len(events) == 0:
				// The store knows the run but has lost its first event.
				yield(Event{}, &CorruptError{RunID: runID, Seq: 1, Reason: "the run exists but has no events"})
				return
			}
			if err != nil {
				if ctx.Err() == nil {
					yield(Event{}, fmt.Errorf("journal: follow run %s: %w", runID, err))
				}
				return
			}
			for i := range events {
				e := events[i]
				if err := checkNext(runID, next, prev, &e); err != nil {
					yield(Event{}, err)
					return
				}
				if !yield(e, nil) {
					return
				}
				next, prev = e.Seq+1, e.Hash
			}
			// Since Go 1.23, Reset discards a pending expiry: no drain.
			timer.Reset(interval())
			select {
			case <-ctx.Done():
				return
			case <-wake:
			case <-timer.C:
			}
		}
	}
}

// checkNext checks that e is event seq of runID, linked to prev (unless
// prev is empty) and hashed correctly.
func checkNext(runID string, seq int64, prev string, e *Event) error {
	link := prev
	if link == "" {
		link = e.PrevHash
	}
	return VerifyFrom(runID, link, seq, []Event{*e})
}
