package service

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/server/api"
)

// A server that hands runs to workers hands a run no process holds to
// them once, not at every sweep: again only when the run's journal moves
// or after adoptAgain sweeps. (Between two steps on a busy worker every
// run holds no lease; looking at each one's workflow every few seconds
// was most of a cluster server's CPU and much of Temporal's.)
func TestAdoptionHandsAQuietRunOverOnce(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	rt := agent.NewRuntime(store, nil)
	// A run created through the API: the server does not leave it to
	// another process (leftToStarter).
	id, err := rt.Create(ctx, &agent.RunCreated{Task: "t", Labels: map[string]string{LabelCreatedBy: "ada"}})
	if err != nil {
		t.Fatal(err)
	}
	handed := make(chan string, 100)
	later := func() time.Time { return time.Now().Add(time.Hour) } // every run is quiet
	h := New(rt, &Options{Adopt: time.Millisecond, Clock: later, Dispatcher: handOver(handed)})
	defer h.Shutdown(ctx)
	sweeps, done := make(chan int), make(chan struct{})
	defer close(done) // before Shutdown
	h.adoptSwept = func(n int) {
		select {
		case sweeps <- n:
		case <-done:
		}
	}
	if _, err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	next := func() int {
		select {
		case n := <-sweeps:
			return n
		case <-time.After(time.Minute):
			t.Fatal("no adoption sweep within a minute")
			return 0
		}
	}
	// The first sweep may still see the run queued by Start.
	for next() == 0 {
	}
	if got := <-handed; got != id {
		t.Fatalf("adopted %s, want %s", got, id)
	}
	for i := 1; i < adoptAgain; i++ {
		if n := next(); n != 0 {
			t.Fatalf("sweep %d after the hand-over submitted %d runs, want 0 (the journal did not move)", i, n)
		}
	}
	if n := next(); n != 1 {
		t.Fatalf("sweep %d after the hand-over submitted %d runs, want the run again", adoptAgain, n)
	}
	// The run moves: it is handed over at the next sweep.
	for i := 1; i < 3; i++ {
		if n := next(); n != 0 {
			t.Fatalf("sweep %d after the second hand-over submitted %d runs, want 0", i, n)
		}
	}
	last, _ := rt.Store().Runs(ctx, nil)
	payload, _ := json.Marshal(&agent.RunResumed{})
	if _, err := store.Append(ctx, id, last[0].LastSeq, journal.Draft{Type: journal.RunResumed, Time: time.Now(), Payload: payload}); err != nil {
		t.Fatal(err)
	}
	// The sweep under way when the event landed may have missed it.
	if first := next(); first == 0 && next() == 0 {
		t.Fatal("the run's journal moved, and the next two sweeps did not hand it over")
	}
}

// A limited list reads a page of the index, and the whole index only when
// the page falls short: the newest paused runs are found also behind many
// running ones, and system streams never count.
func TestLimitedListReadsAPage(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	rt := agent.NewRuntime(store, nil)
	h := New(rt, nil)
	defer h.Shutdown(ctx)
	base := time.Now()
	var ids []string
	for i := range 40 {
		id, err := rt.Create(ctx, &agent.RunCreated{Task: "t"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		if i < 5 { // the oldest five pause
			payload, _ := json.Marshal(&agent.RunEnded{Reason: "shutdown"})
			if _, err := store.Append(ctx, id, 1, journal.Draft{Type: journal.RunPaused, Time: base, Payload: payload}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := h.control.Append(ctx, CancelRequested, &cancelRequest{RunID: "x"}, nil); err != nil {
		t.Fatal(err) // a system stream, newest of all
	}
	for _, tc := range []struct {
		status []journal.Status
		limit  int
		want   []string
	}{
		{nil, 3, []string{ids[39], ids[38], ids[37]}},
		{[]journal.Status{journal.StatusPaused}, 3, []string{ids[4], ids[3], ids[2]}},
		{[]journal.Status{journal.StatusPaused}, 10, []string{ids[4], ids[3], ids[2], ids[1], ids[0]}},
		// The others never started and nothing executes them: queued.
		{[]journal.Status{StatusQueued}, 1, []string{ids[39]}},
		{[]journal.Status{journal.StatusRunning}, 1, nil},
	} {
		runs, err := h.runs(ctx, tc.status, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range runs {
			got = append(got, r.ID)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("runs(%v, %d) = %v, want %v", tc.status, tc.limit, got, tc.want)
		}
	}
}

// The run list's cached JSON is the run's JSON at its newest event: a new
// event, or the pool's view of the run, is never answered from the cache.
func TestListJSONCache(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	rt := agent.NewRuntime(store, nil)
	h := New(rt, nil)
	defer h.Shutdown(ctx)
	id, err := rt.Create(ctx, &agent.RunCreated{Task: "a task <with> & marks"})
	if err != nil {
		t.Fatal(err)
	}
	check := func(r api.Run) {
		t.Helper()
		got, err := h.sums.encode(&r)
		want, _ := json.Marshal(&r)
		if err != nil || string(got) != string(want) {
			t.Errorf("encode = %s, %v; want %s", got, err, want)
		}
	}
	r, err := h.run(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	check(r)
	check(r) // from the cache
	payload, _ := json.Marshal(&agent.RunEnded{Reason: "shutdown"})
	if _, err := store.Append(ctx, id, 1, journal.Draft{Type: journal.RunPaused, Time: time.Now(), Payload: payload}); err != nil {
		t.Fatal(err)
	}
	r2, err := h.run(ctx, id, 0)
	if err != nil || r2.Status != string(journal.StatusPaused) {
		t.Fatalf("run after pause: %+v, %v", r2, err)
	}
	check(r2)
	r2.Queued = true
	check(r2)
}

// handOver is a dispatcher that hands adopted runs to a channel.
type handOver chan string

func (handOver) Dispatch(context.Context, string) error { return nil }

func (h handOver) Adopt(_ context.Context, id string) error { h <- id; return nil }
