package journal

import (
	"context"
	"errors"
	"fmt"
)

// ErrLocked is wrapped by [Locker.Lock] when another executor holds a
// run's lease.
var ErrLocked = errors.New("journal: run is locked by another executor")

// Locker is an optional interface of a [Store] that gives one executor at
// a time the lease to execute a run. Appends are already kept apart by
// [ErrConflict]; the lease also stops a second process from *starting*
// (for example `keel runs resume` of a run that is in fact still running,
// which would otherwise declare its live tool calls interrupted).
//
// A lease ends when unlock is called or when its holder's process dies
// (the SQLite backend uses flock(2) on a lock file beside the database, so
// a kill -9 releases it). Implementations are safe for concurrent use; a
// second Lock of a held run fails even within one process.
type Locker interface {
	// Lock takes run's lease without waiting. It returns an error wrapping
	// ErrLocked, naming the holder when known, if someone else holds it.
	Lock(ctx context.Context, runID string) (unlock func(), err error)
	// Holder describes the current holder of run's lease ("pid 1234 on
	// host"), or "" when nobody holds it.
	Holder(ctx context.Context, runID string) (string, error)
}

// Head is an optional interface of a [Store] that keeps an index of each
// run's newest event apart from the events themselves. Readers compare it
// with what they read: a journal whose newest events were deleted still
// chains correctly, and only the index shows the cut ([ReadVerified] and
// agent.Runtime.Load report it as corrupt).
type Head interface {
	// Head returns run's newest sequence number and hash as indexed, or
	// an error wrapping ErrNotFound.
	Head(ctx context.Context, runID string) (lastSeq int64, lastHash string, err error)
}

// CheckHead compares the events read for run (from seq 1) with the
// store's index when the store implements [Head], and returns a
// [*CorruptError] if events are missing at the end.
func CheckHead(ctx context.Context, s Store, runID string, events []Event) error {
	h, ok := s.(Head)
	if !ok {
		return nil
	}
	seq, hash, err := h.Head(ctx, runID)
	if err != nil {
		return err
	}
	var gotSeq int64
	var gotHash string
	if n := len(events); n > 0 {
		gotSeq, gotHash = events[n-1].Seq, events[n-1].Hash
	}
	if seq > gotSeq {
		// Appended between our read and the index read? Then the events
		// are there now.
		more, err := s.Read(ctx, runID, gotSeq+1)
		if err == nil && len(more) > 0 && more[len(more)-1].Seq >= seq {
			return nil
		}
	}
	if gotSeq != seq || (hash != "" && gotHash != hash) {
		return &CorruptError{RunID: runID, Seq: gotSeq + 1, Reason: fmt.Sprintf("the run's index says its newest event is %d, but the journal ends at %d: events were removed or rewritten", seq, gotSeq)}
	}
	return nil
}
