package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/keel-run/keel/journal"
)

// System streams are journals in the same store as runs that hold
// Keel's own records (tokens, API actions, identities). Their ids start
// with [SystemPrefix], which a run id (a ULID) never does; run listings
// leave them out.
const (
	// SystemPrefix starts the id of every system stream.
	SystemPrefix = "_keel."
	// TokenStream holds token.created and token.revoked events.
	TokenStream = "_keel.tokens"
	// ActionStream holds one api.action event per state-changing API
	// request: who did what to which run.
	ActionStream = "_keel.api"
)

// Event types of the system streams.
const (
	TokenCreated journal.Type = "token.created"
	TokenRevoked journal.Type = "token.revoked"
	APIAction    journal.Type = "api.action"
)

// IsSystemStream reports whether id names a system stream rather than a
// run.
func IsSystemStream(id string) bool { return strings.HasPrefix(id, SystemPrefix) }

// stream is an append-only system stream folded in memory. It is safe for
// concurrent use: appends are serialised, and a conflict with another
// process writing the same stream is resolved by reading the new events
// and retrying.
type stream struct {
	store journal.Store
	id    string
	clock journal.Clock
	// apply folds one event; it is called under mu, in order.
	apply func(e *journal.Event) error

	mu       sync.Mutex
	lastSeq  int64
	lastHash string
}

// refresh reads and folds the events appended since the last one seen,
// verifying their chain. It must be called with mu held.
func (s *stream) refreshLocked(ctx context.Context) error {
	events, err := s.store.Read(ctx, s.id, s.lastSeq+1)
	if errors.Is(err, journal.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("server: read %s: %w", s.id, err)
	}
	prev := s.lastHash
	if s.lastSeq == 0 {
		prev = journal.GenesisHash
	}
	if err := journal.VerifyFrom(s.id, prev, s.lastSeq+1, events); err != nil {
		return fmt.Errorf("server: %s: %w", s.id, err)
	}
	for i := range events {
		if err := s.apply(&events[i]); err != nil {
			return fmt.Errorf("server: %s event %d: %w", s.id, events[i].Seq, err)
		}
		s.lastSeq, s.lastHash = events[i].Seq, events[i].Hash
	}
	return nil
}

// refresh is refreshLocked with mu taken.
func (s *stream) refresh(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refreshLocked(ctx)
}

// append journals one event with payload v and folds it. check, if set,
// runs under the lock after the stream is up to date and may refuse the
// append (for example a token id that another process just used).
func (s *stream) append(ctx context.Context, t journal.Type, v any, check func() error) (journal.Event, error) {
	payload, err := json.Marshal(v)
	if err != nil {
		return journal.Event{}, fmt.Errorf("server: encode %s: %w", t, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if err := s.refreshLocked(ctx); err != nil {
			return journal.Event{}, err
		}
		if check != nil {
			if err := check(); err != nil {
				return journal.Event{}, err
			}
		}
		evs, err := s.store.Append(context.WithoutCancel(ctx), s.id, s.lastSeq, journal.Draft{Type: t, Time: s.clock(), Payload: payload})
		if errors.Is(err, journal.ErrConflict) && attempt < 5 {
			continue // another process appended: read its events, retry
		}
		if err != nil {
			return journal.Event{}, fmt.Errorf("server: append %s to %s: %w", t, s.id, err)
		}
		e := evs[0]
		if err := s.apply(&e); err != nil {
			return journal.Event{}, err
		}
		s.lastSeq, s.lastHash = e.Seq, e.Hash
		return e, nil
	}
}
