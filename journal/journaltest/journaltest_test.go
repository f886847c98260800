package journaltest

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
)

// The suite is only worth running if it fails broken stores. Each case
// wraps a correct in-memory store with one defect and checks that the
// property meant to catch it reports a violation.

// blindAppend ignores after: it appends after whatever is newest.
type blindAppend struct{ journal.Store }

func (s blindAppend) Append(ctx context.Context, runID string, _ int64, drafts ...journal.Draft) ([]journal.Event, error) {
	evs, err := s.Store.Read(ctx, runID, 1)
	if err != nil {
		evs = nil
	}
	return s.Store.Append(ctx, runID, int64(len(evs)), drafts...)
}

// oneByOne appends drafts one at a time, so a bad draft leaves a prefix.
type oneByOne struct{ journal.Store }

func (s oneByOne) Append(ctx context.Context, runID string, after int64, drafts ...journal.Draft) ([]journal.Event, error) {
	var out []journal.Event
	for i, d := range drafts {
		evs, err := s.Store.Append(ctx, runID, after+int64(i), d)
		if err != nil {
			return nil, err
		}
		out = append(out, evs...)
	}
	return out, nil
}

// reencode re-marshals payloads on read, as a jsonb column would.
type reencode struct{ journal.Store }

func (s reencode) Read(ctx context.Context, runID string, from int64) ([]journal.Event, error) {
	evs, err := s.Store.Read(ctx, runID, from)
	for i := range evs {
		var v any
		if json.Unmarshal(evs[i].Payload, &v) == nil {
			evs[i].Payload, _ = json.Marshal(v)
		}
	}
	return evs, err
}

// microseconds truncates times on read, as a timestamp column would.
type microseconds struct{ journal.Store }

func (s microseconds) Read(ctx context.Context, runID string, from int64) ([]journal.Event, error) {
	evs, err := s.Store.Read(ctx, runID, from)
	for i := range evs {
		evs[i].Time = evs[i].Time.Truncate(time.Microsecond)
	}
	return evs, err
}

// insertionOrder lists runs oldest first.
type insertionOrder struct{ journal.Store }

func (s insertionOrder) Runs(ctx context.Context, p *journal.ListParams) ([]journal.RunSummary, error) {
	rs, err := s.Store.Runs(ctx, p)
	slices.Reverse(rs)
	return rs, err
}

// deafNotifier implements Notifier but never wakes anyone.
type deafNotifier struct{ journal.Store }

func (deafNotifier) Notify(string) (<-chan struct{}, func()) { return make(chan struct{}), func() {} }

// leakyClose fails the second Close.
type leakyClose struct {
	journal.Store
	closed bool
}

func (s *leakyClose) Close() error {
	if s.closed {
		return context.Canceled
	}
	s.closed = true
	return s.Store.Close()
}

func TestSuiteCatchesDefects(t *testing.T) {
	for _, tt := range []struct {
		name  string
		wrap  func(journal.Store) journal.Store
		check func(context.Context, journal.Store) error
	}{
		{"stale after accepted", func(s journal.Store) journal.Store { return blindAppend{s} }, checkConflict},
		{"race lets two writers win", func(s journal.Store) journal.Store { return blindAppend{s} }, checkConcurrentOneRun},
		{"batch not atomic", func(s journal.Store) journal.Store { return oneByOne{s} }, checkAtomicBatch},
		{"payload re-encoded", func(s journal.Store) journal.Store { return reencode{s} }, checkPayloadRoundTrip},
		{"time truncated", func(s journal.Store) journal.Store { return microseconds{s} }, checkTimeRoundTrip},
		{"runs oldest first", func(s journal.Store) journal.Store { return insertionOrder{s} }, checkRuns},
		{"notifier never wakes", func(s journal.Store) journal.Store { return deafNotifier{s} }, checkNotify},
		{"second close fails", func(s journal.Store) journal.Store { return &leakyClose{Store: s} }, checkClose},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := tt.wrap(mem.New())
			defer s.Close()
			if err := tt.check(t.Context(), s); err == nil {
				t.Errorf("the property passed a store whose %s", tt.name)
			} else {
				t.Logf("reported, as it should:\n%v", err)
			}
		})
	}
}
