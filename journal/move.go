package journal

import (
	"context"
	"errors"
	"fmt"
)

// ErrExists is wrapped by [Import] when the destination already has a run
// with the imported run's id and different events.
var ErrExists = errors.New("journal: run already exists")

// Import stores a whole run, read from another journal (with [ReadJSONL]
// from an export, or from another [Store]), into dst with its sequence
// numbers, times, payloads and hashes unchanged: the events are checked
// with [Verify] first, appended in one atomic [Store.Append], and the
// hashes dst computes are compared with the originals, so the chain that
// arrives is the chain that left. events must be one run's, from event 1.
//
// It returns true when it stored the run, and false with a nil error when
// dst already holds exactly these events (importing twice is harmless). A
// run in dst with other events, or more of them, is refused with an error
// wrapping [ErrExists]; one that holds a prefix of events gets the rest.
func Import(ctx context.Context, dst Store, events []Event) (bool, error) {
	if len(events) == 0 {
		return false, errors.New("journal: import: no events")
	}
	runID := events[0].RunID
	if err := Verify(runID, events); err != nil {
		return false, fmt.Errorf("journal: import run %s: %w", runID, err)
	}
	have, err := dst.Read(ctx, runID, 1)
	switch {
	case errors.Is(err, ErrNotFound):
		have = nil
	case err != nil:
		return false, fmt.Errorf("journal: import run %s: %w", runID, err)
	}
	for i := range have {
		if i >= len(events) || have[i].Hash != events[i].Hash {
			return false, fmt.Errorf("journal: import run %s: %w in the destination with %d events that differ from the %d imported (from event %d on)",
				runID, ErrExists, len(have), len(events), i+1)
		}
	}
	rest := events[len(have):]
	if len(rest) == 0 {
		return false, nil
	}
	drafts := make([]Draft, len(rest))
	for i, e := range rest {
		drafts[i] = Draft{Type: e.Type, Time: e.Time, Payload: e.Payload}
	}
	stored, err := dst.Append(ctx, runID, int64(len(have)), drafts...)
	if err != nil {
		return false, fmt.Errorf("journal: import run %s: %w", runID, err)
	}
	for i := range stored {
		if stored[i].Hash != rest[i].Hash {
			// Unreachable for a backend that stores what it is given;
			// the run is in dst now, and wrong: say so loudly.
			return true, &CorruptError{RunID: runID, Seq: stored[i].Seq, Reason: fmt.Sprintf(
				"imported event hashes to %s in the destination, %s in the source", stored[i].Hash, rest[i].Hash)}
		}
	}
	return true, nil
}

// SplitRuns splits the events of an export into runs, each in the order
// of the export, the runs in the order each first appears. A system
// stream is refused: it belongs to the journal it came from.
func SplitRuns(events []Event) ([][]Event, error) {
	var runs [][]Event
	byRun := map[string]int{}
	for _, e := range events {
		i, ok := byRun[e.RunID]
		if !ok {
			if IsSystem(e.RunID) {
				return nil, fmt.Errorf("%s is a system stream of the journal it came from; it is not imported", e.RunID)
			}
			i = len(runs)
			byRun[e.RunID] = i
			runs = append(runs, nil)
		}
		runs[i] = append(runs[i], e)
	}
	return runs, nil
}

// ImportRuns stores runs (each one run's events, from event 1) with
// [Import], after checking every run's chain, so that a bad run stores
// nothing. stored[i] says whether runs[i] was stored (false: dst held
// it already); on an error, the runs before the failing one are stored.
func ImportRuns(ctx context.Context, dst Store, runs [][]Event) (stored []bool, err error) {
	for _, evs := range runs {
		if len(evs) == 0 {
			return nil, errors.New("journal: a run with no events")
		}
		if err := Verify(evs[0].RunID, evs); err != nil {
			return nil, fmt.Errorf("%w (nothing was stored)", err)
		}
	}
	for _, evs := range runs {
		ok, err := Import(ctx, dst, evs)
		if err != nil {
			return stored, err
		}
		stored = append(stored, ok)
	}
	return stored, nil
}

// ReadRuns reads runs ids of s, each chain verified, in the order of
// ids: what keel runs export writes.
func ReadRuns(ctx context.Context, s Store, ids ...string) ([]Event, error) {
	var all []Event
	for _, id := range ids {
		evs, err := ReadVerified(ctx, s, id)
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", id, err)
		}
		all = append(all, evs...)
	}
	return all, nil
}
