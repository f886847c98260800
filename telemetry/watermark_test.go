package telemetry

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
)

// collector is an in-memory span exporter that can stop answering (a
// process killed with its spans in flight) or fail (a collector down).
type collector struct {
	mu     sync.Mutex
	spans  []sdktrace.ReadOnlySpan
	hang   bool
	fail   bool
	hangCh chan struct{}
}

func newCollector() *collector { return &collector{hangCh: make(chan struct{})} }

func (c *collector) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	c.mu.Lock()
	hang, fail := c.hang, c.fail
	c.mu.Unlock()
	if hang {
		select {
		case <-c.hangCh:
		case <-ctx.Done():
		}
		return errors.New("killed")
	}
	if fail {
		return errors.New("collector down")
	}
	c.mu.Lock()
	c.spans = append(c.spans, spans...)
	c.mu.Unlock()
	return nil
}

func (c *collector) Shutdown(context.Context) error { return nil }

func (c *collector) set(hang, fail bool) {
	c.mu.Lock()
	c.hang, c.fail = hang, fail
	c.mu.Unlock()
}

func (c *collector) ids() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, s := range c.spans {
		out = append(out, s.SpanContext().SpanID().String())
	}
	return out
}

// copyRun appends evs to a fresh store, as the run's process did.
func copyRun(t *testing.T, store journal.Store, evs []journal.Event) {
	t.Helper()
	for _, e := range evs {
		if _, err := store.Append(context.Background(), e.RunID, e.Seq-1, journal.Draft{Type: e.Type, Time: e.Time, Payload: e.Payload}); err != nil {
			t.Fatal(err)
		}
	}
}

func liveOn(store *mem.Store, c *collector) (*Live, *Exporter) {
	e := newExporter(c, &Config{Endpoint: "http://unused", BatchDelay: time.Millisecond})
	return NewLive(&LiveOptions{Exporter: e, Read: store.Read, Records: store}), e
}

// A process exports part of a run and is killed with spans unsent (or
// its collector failing); the process that continues the run sends
// exactly the spans no collector acknowledged: together every span of
// the run once.
func TestDurableExportAfterKill(t *testing.T) {
	id, evs := testRun(t, "x")
	want, err := Derive(id, evs, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wantIDs []string
	for _, s := range want {
		if !s.Open {
			wantIDs = append(wantIDs, s.SpanID.String())
		}
	}
	sort.Strings(wantIDs)
	for _, tt := range []struct {
		name     string
		acked    int // events whose spans the first collector acknowledged
		killedAt int // the kill
		fail     bool
	}{
		{"killed with spans in flight", 4, 9, false},
		{"killed before any acknowledgement", 0, 6, false},
		{"collector failed, then killed", 3, 11, true},
		{"killed after the run ended", 5, len(evs), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			store := mem.New()
			copyRun(t, store, evs[:tt.killedAt])
			c1 := newCollector()
			l1, _ := liveOn(store, c1)
			l1.Appended(evs[:tt.acked], 0)
			if err := l1.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if got, _ := NewWatermarks(store).Get(ctx, id); tt.acked > 0 && got != int64(tt.acked) {
				t.Fatalf("watermark after %d acknowledged events = %d", tt.acked, got)
			}
			c1.set(!tt.fail, tt.fail)
			l1.Appended(evs[tt.acked:tt.killedAt], 0)
			if tt.fail {
				_ = l1.Flush(ctx) // the collector refused them
			}
			t.Cleanup(func() { close(c1.hangCh) })
			// kill -9: l1 is abandoned, whatever it had queued is lost.

			c2 := newCollector()
			l2, _ := liveOn(store, c2)
			if tt.killedAt < len(evs) {
				copyRun(t, store, evs[tt.killedAt:])
				l2.Appended(evs[tt.killedAt:], 0)
			} else {
				runs, err := store.Runs(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if n, err := l2.RecoverPending(ctx, runs, time.Now().Add(time.Hour)); err != nil || n != 1 {
					t.Fatalf("RecoverPending = %d, %v", n, err)
				}
			}
			if err := l2.Close(ctx); err != nil {
				t.Fatal(err)
			}
			got := append(c1.ids(), c2.ids()...)
			sort.Strings(got)
			if len(got) != len(wantIDs) {
				t.Fatalf("collectors hold %d spans (%d + %d), the run has %d", len(got), len(c1.ids()), len(c2.ids()), len(wantIDs))
			}
			for i := range got {
				if got[i] != wantIDs[i] {
					t.Fatalf("span %d: %s, want %s (duplicate or missing)", i, got[i], wantIDs[i])
				}
			}
			if w, _ := NewWatermarks(store).Get(ctx, id); w != int64(len(evs)) {
				t.Errorf("watermark at the end = %d, want %d", w, len(evs))
			}
			if l2.Recovered() == 0 && len(c1.ids()) < len(wantIDs) {
				t.Error("no span counted as recovered")
			}
		})
	}
}

// A sweep leaves alone runs that are fully exported, never exported, or
// still running.
func TestRecoverPendingSkips(t *testing.T) {
	ctx := context.Background()
	id, evs := testRun(t, "x")
	store := mem.New()
	copyRun(t, store, evs)
	c := newCollector()
	l, _ := liveOn(store, c)
	defer l.Close(ctx)
	runs, _ := store.Runs(ctx, nil)
	if n, _ := l.RecoverPending(ctx, runs, time.Now().Add(time.Hour)); n != 0 {
		t.Errorf("a run never exported live: %d queued", n)
	}
	if err := NewWatermarks(store).Advance(ctx, id, int64(len(evs))); err != nil {
		t.Fatal(err)
	}
	if n, _ := l.RecoverPending(ctx, runs, time.Now().Add(time.Hour)); n != 0 {
		t.Errorf("a run fully exported: %d queued", n)
	}
	runs[0].Status = journal.StatusRunning
	if err := NewWatermarks(store).Advance(ctx, id, 3); err != nil {
		t.Fatal(err)
	}
	if n, _ := l.RecoverPending(ctx, runs, time.Now().Add(time.Hour)); n != 0 {
		t.Errorf("a running run: %d queued", n)
	}
}

// Watermarks only grow, also when two processes advance one run.
func TestWatermarksOnlyGrow(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	a, b := NewWatermarks(store), NewWatermarks(store)
	if err := a.Advance(ctx, "r", 5); err != nil {
		t.Fatal(err)
	}
	if err := b.Advance(ctx, "r", 9); err != nil {
		t.Fatal(err)
	}
	if err := a.Advance(ctx, "r", 7); err != nil { // stale cached version
		t.Fatal(err)
	}
	for _, w := range []*Watermarks{a, b, NewWatermarks(store)} {
		if got, _ := w.Get(ctx, "r"); got != 9 {
			t.Errorf("watermark = %d, want 9", got)
		}
	}
}

// A collector that was down while a run ended: its spans failed, the
// watermark stayed behind, and the next sweep (once the collector is
// back) sends them from the journal, in the same process.
func TestRecoverAfterCollectorOutage(t *testing.T) {
	ctx := context.Background()
	id, evs := testRun(t, "x")
	want, _ := Derive(id, evs, nil)
	store := mem.New()
	copyRun(t, store, evs)
	c := newCollector()
	l, e := liveOn(store, c)
	defer l.Close(ctx)
	l.Appended(evs[:5], 0)
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c.set(false, true)
	l.Appended(evs[5:9], 0)
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c.set(false, false)
	l.Appended(evs[9:], 0) // the run ends; the watermark stays where the failure was
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if w, _ := NewWatermarks(store).Get(ctx, id); w >= 9 {
		t.Fatalf("watermark %d passed the failed spans", w)
	}
	if e.Stats().Failed == 0 {
		t.Fatal("nothing failed")
	}
	runs, _ := store.Runs(ctx, nil)
	if n, err := l.RecoverPending(ctx, runs, time.Now().Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("RecoverPending = %d, %v", n, err)
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, id := range c.ids() {
		got[id] = true
	}
	for _, s := range want {
		if !got[s.SpanID.String()] {
			t.Errorf("span %s missing after the sweep", s.Name)
		}
	}
	if w, _ := NewWatermarks(store).Get(ctx, id); w != int64(len(evs)) {
		t.Errorf("watermark after the sweep = %d, want %d", w, len(evs))
	}
}
