package server

import (
	"context"

	"github.com/keel-run/keel/journal"
)

// FairAppends returns store wrapped so that appends from this process
// reach it one at a time, in the order they were asked for. A server
// appends for hundreds of runs at once; a backend that admits waiting
// writers in no particular order (database/sql hands a free connection
// to a random waiter) then lets some appends wait far longer than
// others, and a request that creates a run or approves a call waits with
// them. In arrival order, an append waits at most for those queued
// before it.
//
// The wrapper keeps the store's optional interfaces (journal.Notifier,
// journal.Locker, journal.Head); a store that lacks one of them is
// returned unwrapped. Reads pass through.
func FairAppends(store journal.Store) journal.Store {
	if _, ok := store.(fullStore); !ok {
		return store
	}
	return &fairStore{fullStore: store.(fullStore), turn: make(chan struct{}, 1)}
}

// fullStore is a store with every optional interface FairAppends keeps.
type fullStore interface {
	journal.Store
	journal.Notifier
	journal.Locker
	journal.Head
}

type fairStore struct {
	fullStore
	// turn is a lock whose waiters are served first come, first served:
	// goroutines blocked sending on a channel are queued in order.
	turn chan struct{}
}

// Append implements journal.Store.
func (f *fairStore) Append(ctx context.Context, runID string, after int64, drafts ...journal.Draft) ([]journal.Event, error) {
	select {
	case f.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	defer func() { <-f.turn }()
	return f.fullStore.Append(ctx, runID, after, drafts...)
}
