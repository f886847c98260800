package journaltest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/journal"
)

func checkRuns(ctx context.Context, s journal.Store) error {
	var v violations
	// Runs are created out of order; "r-tie-a" and "r-tie-b" share a
	// creation time, so run ID (descending) breaks the tie.
	type spec struct {
		id      string
		created int // seconds after T0
		types   []journal.Type
	}
	specs := []spec{
		{"r-done", 30, []journal.Type{journal.RunCreated, journal.RunCompleted}},
		{"r-running", 10, []journal.Type{journal.RunCreated, journal.ModelResponded, journal.ToolStarted}},
		{"r-failed", 50, []journal.Type{journal.RunCreated, journal.RunFailed}},
		{"r-tie-a", 20, []journal.Type{journal.RunCreated, journal.ApprovalRequested}},
		{"r-tie-b", 20, []journal.Type{journal.RunCreated, journal.RunPaused}},
		{"r-canceled", 40, []journal.Type{journal.RunCreated, journal.RunCanceled}},
		{"r-resumed", 60, []journal.Type{journal.RunCreated, journal.RunPaused, journal.RunResumed}},
	}
	want := map[string]journal.RunSummary{}
	for _, sp := range specs {
		var drafts []journal.Draft
		for i, typ := range sp.types {
			drafts = append(drafts, journal.Draft{Type: typ, Time: T0.Add(time.Duration(sp.created+i) * time.Second), Payload: []byte(`{}`)})
		}
		// Append one event at a time so that the index is updated by
		// appends to an existing run too.
		for i, d := range drafts {
			if _, err := s.Append(ctx, sp.id, int64(i), d); err != nil {
				return fmt.Errorf("Append(%q, %d) = %w", sp.id, i, err)
			}
		}
		last := sp.types[len(sp.types)-1]
		want[sp.id] = journal.RunSummary{
			RunID:    sp.id,
			Created:  drafts[0].Time,
			Updated:  drafts[len(drafts)-1].Time,
			LastSeq:  int64(len(drafts)),
			LastType: last,
			Status:   journal.StatusOf(last),
		}
	}
	pick := func(ids ...string) []journal.RunSummary {
		out := []journal.RunSummary{}
		for _, id := range ids {
			out = append(out, want[id])
		}
		return out
	}
	for _, tt := range []struct {
		name string
		p    *journal.ListParams
		want []journal.RunSummary
	}{
		{"nil params", nil, pick("r-resumed", "r-failed", "r-canceled", "r-done", "r-tie-b", "r-tie-a", "r-running")},
		{"zero params", &journal.ListParams{}, pick("r-resumed", "r-failed", "r-canceled", "r-done", "r-tie-b", "r-tie-a", "r-running")},
		{"limit 3", &journal.ListParams{Limit: 3}, pick("r-resumed", "r-failed", "r-canceled")},
		{"limit above count", &journal.ListParams{Limit: 100}, pick("r-resumed", "r-failed", "r-canceled", "r-done", "r-tie-b", "r-tie-a", "r-running")},
		{"paused", &journal.ListParams{Status: []journal.Status{journal.StatusPaused}}, pick("r-tie-b", "r-tie-a")},
		{"running", &journal.ListParams{Status: []journal.Status{journal.StatusRunning}}, pick("r-resumed", "r-running")},
		{"terminal, limit 2", &journal.ListParams{
			Status: []journal.Status{journal.StatusCompleted, journal.StatusFailed, journal.StatusCanceled}, Limit: 2,
		}, pick("r-failed", "r-canceled")},
		{"no match", &journal.ListParams{Status: []journal.Status{"no-such-status"}}, pick()},
	} {
		got, err := s.Runs(ctx, tt.p)
		if err != nil {
			v.add("Runs(%s) = %v", tt.name, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got, cmp.Comparer(sameTime)); diff != "" {
			v.add("Runs(%s) (-want +got):\n%s", tt.name, diff)
		}
	}
	return v.err()
}

// sameTime compares times by instant and location.
func sameTime(a, b time.Time) bool { return a.Equal(b) && a.Location() == b.Location() }

func checkConcurrentOneRun(ctx context.Context, s journal.Store) error {
	const (
		writers = 6
		slots   = 15
	)
	const run = "run-race"
	var (
		mu     sync.Mutex
		winner = make([]int, slots) // slot -> writer+1
		v      violations
		wg     sync.WaitGroup
		start  = make(chan struct{})
	)
	for w := range writers {
		wg.Go(func() {
			<-start
			// A writer tries every slot in turn. A slot is free when the
			// writer's previous attempt has returned (its own win, or a
			// conflict because the run had moved on), so every slot is won
			// exactly once.
			for slot := range slots {
				d := journal.Draft{Type: journal.ModelResponded, Time: T0.Add(time.Duration(slot)), Payload: []byte(fmt.Sprintf(`{"writer":%d}`, w))}
				_, err := s.Append(ctx, run, int64(slot), d)
				mu.Lock()
				switch {
				case err == nil && winner[slot] != 0:
					v.add("slot after %d won by writers %d and %d", slot, winner[slot]-1, w)
				case err == nil:
					winner[slot] = w + 1
				case !errors.Is(err, journal.ErrConflict):
					v.add("writer %d, Append(after %d) = %v, want nil or ErrConflict", w, slot, err)
				}
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	events, err := journal.ReadVerified(ctx, s, run)
	if err != nil {
		return errors.Join(append(v, fmt.Errorf("ReadVerified after the race = %w", err))...)
	}
	if len(events) != slots {
		v.add("run has %d events after the race, want %d", len(events), slots)
	}
	for i, e := range events {
		if i < slots && string(e.Payload) != fmt.Sprintf(`{"writer":%d}`, winner[i]-1) {
			v.add("event %d has payload %s, but writer %d won its slot", e.Seq, e.Payload, winner[i]-1)
		}
	}
	return v.err()
}

func checkConcurrentRuns(ctx context.Context, s journal.Store) error {
	const (
		writers = 6
		events  = 10
	)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		v    violations
		gate = make(chan struct{})
	)
	for w := range writers {
		wg.Go(func() {
			<-gate
			run := fmt.Sprintf("run-par-%d", w)
			for i := range events {
				if _, err := s.Append(ctx, run, int64(i), draft(journal.ModelResponded, i)); err != nil {
					mu.Lock()
					v.add("Append(%q, %d) = %v", run, i, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	close(gate)
	wg.Wait()
	for w := range writers {
		run := fmt.Sprintf("run-par-%d", w)
		got, err := journal.ReadVerified(ctx, s, run)
		if err != nil || len(got) != events {
			v.add("ReadVerified(%q) = %d events, %v; want %d events", run, len(got), err, events)
		}
	}
	if runs, err := s.Runs(ctx, nil); err != nil || len(runs) != writers {
		v.add("Runs() = %d runs, %v; want %d", len(runs), err, writers)
	}
	return v.err()
}

func checkReadWhileAppending(ctx context.Context, s journal.Store) error {
	const runs = 30
	var (
		v    violations
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		for i := range runs {
			run := fmt.Sprintf("run-live-%d", i)
			if _, err := s.Append(ctx, run, 0, draft(journal.RunCreated, 0), draft(journal.ModelResponded, 1)); err != nil {
				v.add("Append(%q) = %v", run, err)
				return
			}
			if _, err := s.Append(ctx, run, 2, draft(journal.ToolStarted, 2)); err != nil {
				v.add("Append(%q, 2) = %v", run, err)
				return
			}
		}
	}()
	// A reader racing the writer sees each run as unknown or as a verified
	// prefix of whole batches, never as a known run without events or as
	// half a batch.
	var bad violations
	for i := range runs {
		run := fmt.Sprintf("run-live-%d", i)
		for {
			evs, err := s.Read(ctx, run, 1)
			if errors.Is(err, journal.ErrNotFound) {
				select {
				case <-done:
					// The writer has stopped; one last read decides.
					if _, err := s.Read(ctx, run, 1); errors.Is(err, journal.ErrNotFound) {
						return errors.Join(append(v, bad...)...)
					}
				default:
				}
				continue
			}
			if err != nil {
				bad.add("Read(%q) while appending = %v", run, err)
				break
			}
			if n := len(evs); n != 2 && n != 3 {
				bad.add("Read(%q) while appending returned %d events, want 2 or 3 (whole batches)", run, n)
			} else if err := journal.Verify(run, evs); err != nil {
				bad.add("Verify(Read(%q)) while appending = %v", run, err)
			}
			break
		}
	}
	<-done
	return errors.Join(append(v, bad...)...)
}

func checkPayloadRoundTrip(ctx context.Context, s journal.Store) error {
	var v violations
	big := `{"blob":"` + strings.Repeat("0123456789abcdef", 5<<20/16) + `"}`
	for i, tt := range []struct {
		name, in, want string // want: the stored bytes (in, compacted)
	}{
		{"empty", ``, `{}`},
		{"unicode", `{"s":"héllo 世界 🎉 \u00e9"}`, `{"s":"héllo 世界 🎉 \u00e9"}`},
		{"escapes", `{"nul":"\u0000","ctl":"\u001f\t\n","q":"\"\\\/","sur":"\ud83d\ude00"}`, `{"nul":"\u0000","ctl":"\u001f\t\n","q":"\"\\\/","sur":"\ud83d\ude00"}`},
		{"html", `{"h":"<a href='x'>&amp;</a>"}`, `{"h":"<a href='x'>&amp;</a>"}`},
		{"key order and duplicates", `{"b":1,"a":2,"a":3}`, `{"b":1,"a":2,"a":3}`},
		{"numbers", `{"big":123456789012345678901234567890,"exp":1E400,"neg":-0.0}`, `{"big":123456789012345678901234567890,"exp":1E400,"neg":-0.0}`},
		{"whitespace is compacted", "{ \"a\" : [ 1 , 2 ] ,\n\t\"b\" : { } }", `{"a":[1,2],"b":{}}`},
		{"5 MB", big, big},
	} {
		run := fmt.Sprintf("run-payload-%d", i)
		got, err := s.Append(ctx, run, 0, journal.Draft{Type: journal.ToolFinished, Time: T0, Payload: []byte(tt.in)})
		if err != nil {
			v.add("%s: Append = %v", tt.name, err)
			continue
		}
		if !bytes.Equal(got[0].Payload, []byte(tt.want)) {
			v.add("%s: Append returned payload %.80q, want %.80q", tt.name, got[0].Payload, tt.want)
		}
		read, err := journal.ReadVerified(ctx, s, run)
		if err != nil {
			v.add("%s: ReadVerified = %v", tt.name, err)
			continue
		}
		if !bytes.Equal(read[0].Payload, []byte(tt.want)) {
			v.add("%s: Read returned payload %.80q (%d bytes), want %.80q (%d bytes)", tt.name, read[0].Payload, len(read[0].Payload), tt.want, len(tt.want))
		}
	}
	return v.err()
}

func checkTimeRoundTrip(ctx context.Context, s journal.Store) error {
	var v violations
	kolkata := time.FixedZone("IST", 5*3600+1800)
	for i, in := range []time.Time{
		T0,
		time.Date(2026, 1, 2, 3, 4, 5, 1, kolkata),              // non-UTC, 1 ns
		time.Date(1999, 12, 31, 23, 59, 59, 999999999, kolkata), // crosses a year in UTC
		time.Now(),                               // carries a monotonic reading
		time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), // earliest storable
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
	} {
		run := fmt.Sprintf("run-time-%d", i)
		got, err := s.Append(ctx, run, 0, journal.Draft{Type: journal.RunCreated, Time: in})
		if err != nil {
			v.add("Append(time %v) = %v", in, err)
			continue
		}
		read, err := s.Read(ctx, run, 1)
		if err != nil || len(read) != 1 {
			v.add("Read(time %v) = %v, %v", in, read, err)
			continue
		}
		want := in.UTC().Round(0)
		for _, c := range []struct {
			what string
			t    time.Time
		}{{"Append", got[0].Time}, {"Read", read[0].Time}} {
			what, t := c.what, c.t
			if !t.Equal(want) || t.Location() != time.UTC || t.Nanosecond() != want.Nanosecond() {
				v.add("%s: time %v came back as %v (location %v), want %v in UTC", what, in, t, t.Location(), want)
			}
		}
		runs, err := s.Runs(ctx, nil)
		if err != nil {
			v.add("Runs = %v", err)
			continue
		}
		for _, r := range runs {
			if r.RunID == run && (!sameTime(r.Created, want) || !sameTime(r.Updated, want)) {
				v.add("Runs: run %s created %v, updated %v; want %v in UTC", run, r.Created, r.Updated, want)
			}
		}
	}
	for _, bad := range []time.Time{
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(0, 12, 31, 23, 59, 59, 0, time.UTC),
	} {
		if _, err := s.Append(ctx, "run-time-bad", 0, journal.Draft{Type: journal.RunCreated, Time: bad}); err == nil {
			v.add("Append(time %v) = nil, want an error: TimeFormat renders only years 1 to 9999 in fixed width", bad)
		}
	}
	return v.err()
}

func checkOwnership(ctx context.Context, s journal.Store) error {
	var v violations
	const run = "run-own"
	payload := []byte(`{"k":"original"}`)
	got, err := s.Append(ctx, run, 0, journal.Draft{Type: journal.RunCreated, Time: T0, Payload: payload})
	if err != nil {
		return fmt.Errorf("append: %w", err)
	}
	copy(payload, `{"k":"CHANGED!"}`)
	copy(got[0].Payload, `{"k":"changed2"}`)
	read, err := s.Read(ctx, run, 1)
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if string(read[0].Payload) != `{"k":"original"}` {
		v.add("changing the draft's or the returned payload changed the stored one: %s", read[0].Payload)
	}
	copy(read[0].Payload, `{"k":"changed3"}`)
	if again, err := s.Read(ctx, run, 1); err != nil || string(again[0].Payload) != `{"k":"original"}` {
		v.add("changing a payload returned by Read changed the stored one: %v, %v", again, err)
	}
	return v.err()
}

func checkNotify(ctx context.Context, s journal.Store) error {
	n, ok := s.(journal.Notifier)
	if !ok {
		return nil
	}
	var v violations
	const run = "run-notify"
	ch, stop := n.Notify(run)
	other, stopOther := n.Notify("run-other")
	defer stopOther()
	pending := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	if pending(ch) {
		v.add("a new subscription has a pending wake-up")
	}
	for i := range 3 {
		if _, err := s.Append(ctx, run, int64(i), draft(journal.ModelResponded, i)); err != nil {
			return fmt.Errorf("append: %w", err)
		}
	}
	if !pending(ch) {
		v.add("no wake-up pending after Append returned")
	}
	if pending(ch) {
		v.add("more than one wake-up pending: the channel must hold at most one")
	}
	if pending(other) {
		v.add("a subscriber of another run was woken")
	}
	stop()
	stop() // idempotent
	if _, err := s.Append(ctx, run, 3, draft(journal.ModelResponded, 3)); err != nil {
		return fmt.Errorf("append: %w", err)
	}
	if pending(ch) {
		v.add("a stopped subscription was woken")
	}
	return v.err()
}

func checkCanceledContext(ctx context.Context, s journal.Store) error {
	var v violations
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Append(canceled, "run-canceled-ctx", 0, draft(journal.RunCreated, 0)); err == nil {
		v.add("Append(canceled context) = nil, want an error")
	}
	if _, err := s.Read(ctx, "run-canceled-ctx", 1); !errors.Is(err, journal.ErrNotFound) {
		v.add("after Append(canceled context), Read = %v, want ErrNotFound", err)
	}
	return v.err()
}

func checkClose(ctx context.Context, s journal.Store) error {
	var v violations
	if _, err := s.Append(ctx, "run-close", 0, draft(journal.RunCreated, 0)); err != nil {
		v.add("Append = %v", err)
	}
	if err := s.Close(); err != nil {
		v.add("first Close = %v", err)
	}
	if err := s.Close(); err != nil {
		v.add("second Close = %v, want nil (Close is idempotent)", err)
	}
	if _, err := s.Append(ctx, "run-close", 1, draft(journal.ModelResponded, 1)); err == nil {
		v.add("Append after Close = nil, want an error")
	}
	if _, err := s.Read(ctx, "run-close", 1); err == nil {
		v.add("Read after Close = nil, want an error")
	}
	if _, err := s.Runs(ctx, nil); err == nil {
		v.add("Runs after Close = nil, want an error")
	}
	return v.err()
}
