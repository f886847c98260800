package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// SystemPrefix starts the id of every system stream: a journal in the
// same store as the runs that holds Keel's own records (the identity
// directory, API tokens, the API action log). A run id (a ULID) never
// starts with it, and run listings leave system streams out.
const SystemPrefix = "_keel."

// IsSystem reports whether id names a system stream rather than a run.
func IsSystem(id string) bool { return strings.HasPrefix(id, SystemPrefix) }

// Stream is one system stream folded in memory by its owner: each event
// is verified against the hash chain and passed, in order, to the fold
// function given to [NewStream]. Several Streams (in several processes)
// may share a stream id: every read catches up with the newest events,
// and an append that another process beat is retried on the new state.
//
// A Stream is safe for concurrent use. Its fold function is called with
// the stream's lock held; so is the check function of [Stream.Append].
type Stream struct {
	store Store
	id    string
	clock Clock
	fold  func(e *Event) error

	mu   sync.Mutex
	last int64  // newest folded event
	hash string // its hash
}

// NewStream returns the stream id of store. fold folds one event; its
// error (a stored event that does not fold) is reported as a
// [*CorruptError] of the stream. clock gives the time of appended
// events; nil means time.Now. NewStream reads nothing.
func NewStream(store Store, id string, clock Clock, fold func(e *Event) error) *Stream {
	if clock == nil {
		clock = time.Now
	}
	return &Stream{store: store, id: id, clock: clock, fold: fold, hash: GenesisHash}
}

// ID returns the stream's id.
func (s *Stream) ID() string { return s.id }

// Sync reads and folds the events appended since the newest one folded,
// verifying their chain and its link to what was folded before.
func (s *Stream) Sync(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.syncLocked(ctx)
}

func (s *Stream) syncLocked(ctx context.Context) error {
	events, err := s.store.Read(ctx, s.id, s.last+1)
	if errors.Is(err, ErrNotFound) {
		if s.last > 0 {
			return &CorruptError{RunID: s.id, Seq: 1, Reason: "the stream disappeared"}
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("journal: read %s: %w", s.id, err)
	}
	if err := VerifyFrom(s.id, s.hash, s.last+1, events); err != nil {
		return err
	}
	return s.foldLocked(events)
}

func (s *Stream) foldLocked(events []Event) error {
	for i := range events {
		if err := s.fold(&events[i]); err != nil {
			if ce := (*CorruptError)(nil); errors.As(err, &ce) {
				return err
			}
			return &CorruptError{RunID: s.id, Seq: events[i].Seq, Reason: err.Error()}
		}
		s.last, s.hash = events[i].Seq, events[i].Hash
	}
	return nil
}

// maxConflicts bounds the retries of one append that other processes
// keep beating (each conflict means another append succeeded, so the
// stream moves on; the bound only guards against a store that always
// reports a conflict).
const maxConflicts = 100

// Append journals one event of type t with payload v (encoded as JSON)
// and folds it. check, if set, runs with the stream up to date and may
// refuse the append (for example a name another process just took); it
// runs again when another process appended first. The append itself is
// not canceled with ctx: an event that may have been stored is never
// reported as not stored.
func (s *Stream) Append(ctx context.Context, t Type, v any, check func() error) (Event, error) {
	evs, err := s.AppendMany(ctx, []Item{{Type: t, Value: v}}, check)
	if err != nil {
		return Event{}, err
	}
	return evs[0], nil
}

// Item is one event for [Stream.AppendMany]: its type and its payload
// (encoded as JSON).
type Item struct {
	Type  Type
	Value any
}

// AppendMany is [Stream.Append] for several events, stored atomically
// (all or none) in one append of the store, and folded in order.
func (s *Stream) AppendMany(ctx context.Context, items []Item, check func() error) ([]Event, error) {
	if len(items) == 0 {
		return nil, errors.New("journal: append nothing")
	}
	drafts := make([]Draft, len(items))
	for i, it := range items {
		payload, err := json.Marshal(it.Value)
		if err != nil {
			return nil, fmt.Errorf("journal: encode %s: %w", it.Type, err)
		}
		drafts[i] = Draft{Type: it.Type, Payload: payload}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if err := s.syncLocked(ctx); err != nil {
			return nil, err
		}
		if check != nil {
			if err := check(); err != nil {
				return nil, err
			}
		}
		now := s.clock()
		for i := range drafts {
			drafts[i].Time = now
		}
		evs, err := s.store.Append(context.WithoutCancel(ctx), s.id, s.last, drafts...)
		if errors.Is(err, ErrConflict) && attempt < maxConflicts {
			continue // another process appended: fold its events, retry
		}
		if err != nil {
			return nil, fmt.Errorf("journal: append %s to %s: %w", items[0].Type, s.id, err)
		}
		if err := s.foldLocked(evs); err != nil {
			return nil, err
		}
		return evs, nil
	}
}
