// Package mem is an in-memory [journal.Store] for tests of packages that
// write or read journals.
//
// It has the same semantics as the durable backends (it passes
// [github.com/keel-run/keel/journal/journaltest]) but keeps everything in
// process memory: nothing survives the process, and appends from another
// process are impossible. Use [github.com/keel-run/keel/journal/sqlite] for
// anything that must outlive a test.
package mem

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/internal/backend"
)

// errClosed is returned by every operation on a closed [Store].
var errClosed = errors.New("journal/mem: store closed")

// Store is an in-memory journal. The zero value is not usable; call [New].
// A Store is safe for concurrent use; appends are serialised by one mutex,
// so concurrent appenders of one run see [journal.ErrConflict] exactly as
// with a database.
type Store struct {
	broker backend.Broker

	mu     sync.RWMutex
	runs   map[string]*run
	closed bool

	lockMu sync.Mutex
	locks  map[string]bool

	rec records
}

var _ journal.Locker = (*Store)(nil)

// Lock implements [journal.Locker] within this process.
func (s *Store) Lock(ctx context.Context, runID string) (func(), error) {
	s.lockMu.Lock()
	defer s.lockMu.Unlock()
	if s.locks[runID] {
		return nil, fmt.Errorf("%w: run %s is executing (this process)", journal.ErrLocked, runID)
	}
	if s.locks == nil {
		s.locks = map[string]bool{}
	}
	s.locks[runID] = true
	var once sync.Once
	return func() {
		once.Do(func() {
			s.lockMu.Lock()
			delete(s.locks, runID)
			s.lockMu.Unlock()
		})
	}, nil
}

// Holder implements [journal.Locker].
func (s *Store) Holder(ctx context.Context, runID string) (string, error) {
	s.lockMu.Lock()
	defer s.lockMu.Unlock()
	if s.locks[runID] {
		return "this process", nil
	}
	return "", nil
}

type run struct {
	summary journal.RunSummary
	events  []journal.Event
}

var (
	_ journal.Store    = (*Store)(nil)
	_ journal.Notifier = (*Store)(nil)
)

// New returns an empty in-memory journal.
func New() *Store {
	return &Store{runs: make(map[string]*run)}
}

// Append implements [journal.Store.Append]: it seals drafts after the
// run's newest event and stores them all, or returns an error and stores
// nothing. A stale after returns an error wrapping [journal.ErrConflict].
// Subscribers from [Store.Notify] are woken before Append returns.
func (s *Store) Append(ctx context.Context, runID string, after int64, drafts ...journal.Draft) ([]journal.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("journal/mem: append run %s: %w", runID, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	r := s.runs[runID]
	last, prev := int64(0), journal.GenesisHash
	if r != nil {
		tail := &r.events[len(r.events)-1]
		last, prev = tail.Seq, tail.Hash
	}
	if after != last {
		return nil, fmt.Errorf("journal/mem: append run %s after %d: newest event is %d: %w", runID, after, last, journal.ErrConflict)
	}
	events, err := backend.Seal(runID, after, prev, drafts)
	if err != nil {
		return nil, err
	}
	if r == nil {
		r = &run{summary: journal.RunSummary{RunID: runID, Created: events[0].Time}}
		s.runs[runID] = r
	}
	for i := range events {
		r.events = append(r.events, clone(&events[i]))
	}
	tail := &events[len(events)-1]
	r.summary.Updated = tail.Time
	r.summary.LastSeq = tail.Seq
	r.summary.LastType = tail.Type
	types := make([]journal.Type, len(events))
	for i := range events {
		types[i] = events[i].Type
	}
	if st, keep := journal.TailStatus(types...); !keep {
		r.summary.Status = st
	}
	s.broker.Publish(runID)
	return events, nil
}

// Read implements [journal.Store.Read]. The returned events are copies:
// the caller may modify them.
func (s *Store) Read(ctx context.Context, runID string, from int64) ([]journal.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("journal/mem: read run %s: %w", runID, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, errClosed
	}
	r := s.runs[runID]
	if r == nil {
		return nil, fmt.Errorf("journal/mem: read run %s: %w", runID, journal.ErrNotFound)
	}
	// Events are stored in sequence order (Rewrite aside), so the first
	// event at or after from is found by binary search.
	i, _ := slices.BinarySearchFunc(r.events, from, func(e journal.Event, seq int64) int {
		return cmp.Compare(e.Seq, seq)
	})
	out := make([]journal.Event, 0, len(r.events)-i)
	for j := i; j < len(r.events); j++ {
		out = append(out, clone(&r.events[j]))
	}
	return out, nil
}

// Runs implements [journal.Store.Runs]: newest created first, ties broken
// by run ID descending (so ULID run IDs created in the same nanosecond
// still list newest first).
func (s *Store) Runs(ctx context.Context, p *journal.ListParams) ([]journal.RunSummary, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("journal/mem: list runs: %w", err)
	}
	if p == nil {
		p = &journal.ListParams{}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, errClosed
	}
	out := []journal.RunSummary{}
	for _, r := range s.runs {
		if len(p.Status) == 0 || slices.Contains(p.Status, r.summary.Status) {
			out = append(out, r.summary)
		}
	}
	slices.SortFunc(out, func(a, b journal.RunSummary) int {
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return cmp.Compare(b.RunID, a.RunID)
	})
	if p.Limit > 0 && len(out) > p.Limit {
		out = out[:p.Limit]
	}
	return out, nil
}

// Notify implements [journal.Notifier]: the channel receives after each
// append to runID through this Store, before that Append returns.
func (s *Store) Notify(runID string) (<-chan struct{}, func()) {
	return s.broker.Notify(runID)
}

// Close discards the journal; later calls fail. Close is idempotent and
// always returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.runs = nil
	return nil
}

// Rewrite replaces run's stored events with the result of edit, bypassing
// every check: no sealing, no sequence or chain validation, and the run
// summary is recomputed from the new newest event (a run edited to no
// events disappears). Keep the events in sequence order: Read relies on
// it. It exists so that tests can build journals that are
// corrupt on purpose and check that readers report them; edit receives a
// copy it may modify. Rewrite returns an error wrapping
// [journal.ErrNotFound] for an unknown run.
func (s *Store) Rewrite(runID string, edit func([]journal.Event) []journal.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	r := s.runs[runID]
	if r == nil {
		return fmt.Errorf("journal/mem: rewrite run %s: %w", runID, journal.ErrNotFound)
	}
	cp := make([]journal.Event, len(r.events))
	for i := range r.events {
		cp[i] = clone(&r.events[i])
	}
	events := edit(cp)
	if len(events) == 0 {
		delete(s.runs, runID)
		return nil
	}
	r.events = make([]journal.Event, len(events))
	for i := range events {
		r.events[i] = clone(&events[i])
	}
	tail := &r.events[len(r.events)-1]
	r.summary.Updated = tail.Time
	r.summary.LastSeq = tail.Seq
	r.summary.LastType = tail.Type
	r.summary.Status = journal.StatusOf(tail.Type)
	s.broker.Publish(runID)
	return nil
}

func clone(e *journal.Event) journal.Event {
	c := *e
	c.Payload = bytes.Clone(e.Payload)
	return c
}
