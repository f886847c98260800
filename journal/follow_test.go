package journal_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func appendN(t *testing.T, s journal.Store, run string, after int64, n int) []journal.Event {
	t.Helper()
	var drafts []journal.Draft
	for i := range n {
		seq := after + int64(i) + 1
		drafts = append(drafts, journal.Draft{Type: journal.ModelResponded, Time: t0.Add(time.Duration(seq) * time.Second), Payload: []byte(fmt.Sprintf(`{"seq":%d}`, seq))})
	}
	evs, err := s.Append(context.Background(), run, after, drafts...)
	if err != nil {
		t.Fatalf("Append(%q, %d, %d drafts) = %v", run, after, n, err)
	}
	return evs
}

// followed is one item of a Follow sequence.
type followed struct {
	e   journal.Event
	err error
}

// startFollow ranges over Follow in a goroutine and forwards each item;
// the channel is closed when the sequence ends.
func startFollow(ctx context.Context, s journal.Store, run string, from int64, poll time.Duration) <-chan followed {
	out := make(chan followed)
	go func() {
		defer close(out)
		for e, err := range journal.Follow(ctx, s, run, from, poll) {
			out <- followed{e, err}
		}
	}()
	return out
}

// hideNotifier hides a store's Notifier, as a store of another process
// would look: only polling finds its appends.
type hideNotifier struct{ journal.Store }

func TestFollowNotifiedWithoutPolling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := mem.New()
		defer s.Close()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		stored := appendN(t, s, "r", 0, 2)
		ch := startFollow(ctx, s, "r", 1, time.Hour)
		for _, want := range stored {
			if got := <-ch; got.err != nil || got.e.Seq != want.Seq {
				t.Fatalf("Follow yielded %+v, want stored event %d", got, want.Seq)
			}
		}
		synctest.Wait() // the follower waits for a wake-up now
		start := time.Now()
		more := appendN(t, s, "r", 2, 3)
		for _, want := range more {
			got := <-ch
			if diff := cmp.Diff(followed{e: want}, got, cmp.AllowUnexported(followed{})); diff != "" {
				t.Fatalf("Follow yielded (-want +got):\n%s", diff)
			}
		}
		if waited := time.Since(start); waited != 0 {
			t.Errorf("a notified append reached the follower after %v of (fake) time, want 0: it waited for the poll", waited)
		}
		cancel()
		if got, ok := <-ch; ok {
			t.Errorf("Follow yielded %+v after its context ended, want the end of the sequence", got)
		}
	})
}

func TestFollowPollsForOtherWriters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := mem.New()
		defer s.Close()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		const poll = 3 * time.Second
		// The run does not exist yet: Follow waits for it.
		ch := startFollow(ctx, hideNotifier{s}, "r", 1, poll)
		synctest.Wait()
		start := time.Now()
		stored := appendN(t, s, "r", 0, 2)
		for _, want := range stored {
			if got := <-ch; got.err != nil || got.e.Hash != want.Hash {
				t.Fatalf("Follow yielded %+v, want event %d", got, want.Seq)
			}
		}
		if waited := time.Since(start); waited != poll {
			t.Errorf("an unnotified append reached the follower after %v of (fake) time, want one poll interval, %v", waited, poll)
		}
	})
}

func TestFollowFromMiddleAndStop(t *testing.T) {
	s := mem.New()
	defer s.Close()
	stored := appendN(t, s, "r", 0, 5)
	var got []journal.Event
	for e, err := range journal.Follow(t.Context(), s, "r", 3, time.Hour) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
		if e.Seq == 4 {
			break
		}
	}
	if diff := cmp.Diff(stored[2:4], got); diff != "" {
		t.Errorf("Follow(from 3) until event 4 (-want +got):\n%s", diff)
	}
}

func TestFollowReportsCorruption(t *testing.T) {
	for _, tt := range []struct {
		name    string
		edit    func([]journal.Event) []journal.Event
		from    int64
		wantSeq int64
	}{
		{"changed payload", func(e []journal.Event) []journal.Event { e[2].Payload = []byte(`{"seq":99}`); return e }, 1, 3},
		{"gap", func(e []journal.Event) []journal.Event { return append(e[:2:2], e[3:]...) }, 1, 3},
		{"forged first event", func(e []journal.Event) []journal.Event { e[0].PrevHash = e[1].Hash; return e }, 1, 1},
		{"broken link after from", func(e []journal.Event) []journal.Event { e[3].PrevHash = e[0].Hash; return e }, 3, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := mem.New()
			defer s.Close()
			appendN(t, s, "r", 0, 5)
			if err := s.Rewrite("r", tt.edit); err != nil {
				t.Fatal(err)
			}
			var last error
			n := 0
			for _, err := range journal.Follow(t.Context(), s, "r", tt.from, time.Hour) {
				if err != nil {
					last = err
					break // Follow ends after an error anyway
				}
				n++
			}
			var ce *journal.CorruptError
			if !errors.As(last, &ce) || ce.Seq != tt.wantSeq {
				t.Fatalf("Follow ended with %v after %d events, want a CorruptError at event %d", last, n, tt.wantSeq)
			}
			if want := int(tt.wantSeq - tt.from); n != want {
				t.Errorf("Follow yielded %d good events before the corrupt one, want %d", n, want)
			}
		})
	}
}

func TestFollowStoreError(t *testing.T) {
	s := mem.New()
	appendN(t, s, "r", 0, 1)
	s.Close()
	var errs []error
	for _, err := range journal.Follow(t.Context(), s, "r", 1, time.Hour) {
		errs = append(errs, err)
	}
	if len(errs) != 1 || errs[0] == nil {
		t.Errorf("Follow(closed store) yielded %v, want exactly one error", errs)
	}
}

func TestReadVerified(t *testing.T) {
	s := mem.New()
	defer s.Close()
	stored := appendN(t, s, "r", 0, 4)
	got, err := journal.ReadVerified(t.Context(), s, "r")
	if err != nil {
		t.Fatalf("ReadVerified = %v", err)
	}
	if diff := cmp.Diff(stored, got); diff != "" {
		t.Errorf("ReadVerified (-want +got):\n%s", diff)
	}
	s.Rewrite("r", func(e []journal.Event) []journal.Event { e[1].Type = "model.respondeD"; return e })
	var ce *journal.CorruptError
	if _, err := journal.ReadVerified(t.Context(), s, "r"); !errors.As(err, &ce) || ce.Seq != 2 || ce.RunID != "r" {
		t.Errorf("ReadVerified(changed type at 2) = %v, want a CorruptError for run r at event 2", err)
	}
	if _, err := journal.ReadVerified(t.Context(), s, "missing"); !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("ReadVerified(unknown run) = %v, want ErrNotFound", err)
	}
}
