// Package journaltest is the conformance suite every [journal.Store]
// backend must pass, in the manner of testing/slogtest.
//
// A backend's test calls [Run] with a function that opens a fresh, empty
// store:
//
//	func TestConformance(t *testing.T) {
//		journaltest.Run(t, func(t *testing.T) journal.Store {
//			s, err := sqlite.Open(filepath.Join(t.TempDir(), "j.db"), nil)
//			if err != nil {
//				t.Fatal(err)
//			}
//			return s
//		})
//	}
//
// Each property runs as a parallel subtest on its own store, which the
// suite closes; a subtest reports all of its violations at once, joined
// with [errors.Join].
package journaltest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/journal"
)

// T0 is the time of the first event the suite writes; later events are
// T0 plus whole seconds and nanoseconds.
var T0 = time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)

// Run runs the conformance suite against the stores that open returns.
// open is called once per subtest with that subtest's t and must return
// an empty store (or fail t); the suite closes it.
//
// The properties checked, each a subtest: sequence numbers are gap-free
// from 1 and Append returns what Read returns; the chain verifies; a
// stale or future after is refused with [journal.ErrConflict] and stores
// nothing; a batch with one bad draft stores nothing; unknown runs return
// [journal.ErrNotFound]; Runs orders newest created first (ties by run ID
// descending), filters by status, limits, and derives status with
// [journal.StatusOf]; concurrent appenders to one run each win a slot at
// most once and every slot exactly once; appenders to different runs do
// not interfere; a reader racing a writer sees a run as unknown or as
// whole batches, never as a known run without events; payload bytes (unicode, escapes such as \u0000, key
// order, about 5 MB) and nanosecond UTC times round-trip exactly; returned
// events are the caller's to modify; [journal.Notifier], if implemented,
// wakes subscribers before Append returns; and Close is idempotent.
func Run(t *testing.T, open func(t *testing.T) journal.Store) {
	t.Helper()
	for _, c := range []struct {
		name  string
		check func(ctx context.Context, s journal.Store) error
	}{
		{"SequenceAndChain", checkSequenceAndChain},
		{"Conflict", checkConflict},
		{"AtomicBatch", checkAtomicBatch},
		{"NotFound", checkNotFound},
		{"Runs", checkRuns},
		{"ConcurrentOneRun", checkConcurrentOneRun},
		{"ConcurrentRuns", checkConcurrentRuns},
		{"ReadWhileAppending", checkReadWhileAppending},
		{"PayloadRoundTrip", checkPayloadRoundTrip},
		{"TimeRoundTrip", checkTimeRoundTrip},
		{"Ownership", checkOwnership},
		{"Notify", checkNotify},
		{"CanceledContext", checkCanceledContext},
		{"Records", checkRecords},
		{"KeepsStatus", checkKeepsStatus},
		{"TextIndex", checkTextIndex},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			t.Cleanup(func() { s.Close() })
			if err := c.check(t.Context(), s); err != nil {
				t.Error(err)
			}
		})
	}
	t.Run("Close", func(t *testing.T) {
		t.Parallel()
		if err := checkClose(t.Context(), open(t)); err != nil {
			t.Error(err)
		}
	})
}

// draft returns a draft of type typ at T0 plus i seconds and i
// nanoseconds, with payload {"i":i}.
func draft(typ journal.Type, i int) journal.Draft {
	return journal.Draft{
		Type:    typ,
		Time:    T0.Add(time.Duration(i)*time.Second + time.Duration(i)),
		Payload: []byte(fmt.Sprintf(`{"i":%d}`, i)),
	}
}

// violations collects failures of one property.
type violations []error

func (v *violations) add(format string, args ...any) {
	*v = append(*v, fmt.Errorf(format, args...))
}

func (v violations) err() error { return errors.Join(v...) }

func checkSequenceAndChain(ctx context.Context, s journal.Store) error {
	var v violations
	const run = "run-seq"
	first, err := s.Append(ctx, run, 0, draft(journal.RunCreated, 0))
	if err != nil {
		return fmt.Errorf("Append(%q, 0, 1 draft) = %w", run, err)
	}
	if len(first) != 1 || first[0].Seq != 1 || first[0].PrevHash != journal.GenesisHash || first[0].RunID != run {
		v.add("first Append returned %+v, want one event with seq 1, run %q and the genesis prev hash", first, run)
	}
	more, err := s.Append(ctx, run, 1, draft(journal.ModelResponded, 1), draft(journal.ToolStarted, 2), draft(journal.ToolFinished, 3))
	if err != nil {
		return errors.Join(append(v, fmt.Errorf("Append(%q, 1, 3 drafts) = %w", run, err))...)
	}
	for i, e := range more {
		if want := int64(i + 2); e.Seq != want {
			v.add("second Append event %d has seq %d, want %d", i, e.Seq, want)
		}
	}
	appended := append(first, more...)
	if err := journal.Verify(run, appended); err != nil {
		v.add("Verify(events returned by Append) = %v", err)
	}
	for _, from := range []int64{-1, 0, 1, 3, 4, 5, 100} {
		got, err := s.Read(ctx, run, from)
		if err != nil {
			v.add("Read(%q, %d) = %v", run, from, err)
			continue
		}
		want := appended[min(max(from, 1), 5)-1:]
		if diff := cmp.Diff(want, got, cmp.Comparer(sameEvent)); diff != "" {
			v.add("Read(%q, %d) differs from the appended events (-want +got):\n%s", run, from, diff)
		}
		if got == nil {
			v.add("Read(%q, %d) = nil slice, want an empty non-nil slice", run, from)
		}
	}
	got, err := journal.ReadVerified(ctx, s, run)
	if err != nil {
		v.add("ReadVerified(%q) = %v", run, err)
	} else if len(got) != 4 {
		v.add("ReadVerified(%q) returned %d events, want 4", run, len(got))
	}
	return v.err()
}

func checkConflict(ctx context.Context, s journal.Store) error {
	var v violations
	const run = "run-conflict"
	if _, err := s.Append(ctx, run, 3, draft(journal.RunCreated, 0)); !errors.Is(err, journal.ErrConflict) {
		v.add("Append(new run, after 3) = %v, want ErrConflict", err)
	}
	if _, err := s.Append(ctx, run, 0, draft(journal.RunCreated, 0), draft(journal.ModelResponded, 1)); err != nil {
		return fmt.Errorf("Append(%q, 0) = %w", run, err)
	}
	before, err := s.Read(ctx, run, 1)
	if err != nil {
		return fmt.Errorf("Read(%q) = %w", run, err)
	}
	for _, after := range []int64{0, 1, 3, 100} {
		if _, err := s.Append(ctx, run, after, draft(journal.ToolStarted, 9)); !errors.Is(err, journal.ErrConflict) {
			v.add("Append(%q, after %d) with newest event 2 = %v, want ErrConflict", run, after, err)
		}
	}
	after, err := s.Read(ctx, run, 1)
	if err != nil {
		return fmt.Errorf("Read(%q) = %w", run, err)
	}
	if diff := cmp.Diff(before, after, cmp.Comparer(sameEvent)); diff != "" {
		v.add("refused appends changed the run (-before +after):\n%s", diff)
	}
	if _, err := s.Append(ctx, run, 2, draft(journal.ToolStarted, 2)); err != nil {
		v.add("Append(%q, after 2) after conflicts = %v", run, err)
	}
	return v.err()
}

func checkAtomicBatch(ctx context.Context, s journal.Store) error {
	var v violations
	good := draft(journal.ModelResponded, 1)
	bad := map[string]journal.Draft{
		"payload not JSON":      {Type: journal.ToolStarted, Time: T0, Payload: []byte(`{"a":`)},
		"payload not an object": {Type: journal.ToolStarted, Time: T0, Payload: []byte(`[1,2]`)},
		"empty type":            {Time: T0, Payload: []byte(`{}`)},
		"zero time":             {Type: journal.ToolStarted, Payload: []byte(`{}`)},
	}
	for _, name := range []string{"payload not JSON", "payload not an object", "empty type", "zero time"} {
		d := bad[name]
		run := "run-atomic-new-" + name
		if _, err := s.Append(ctx, run, 0, good, d, good); err == nil || errors.Is(err, journal.ErrConflict) {
			v.add("Append(new run, [good, %s, good]) = %v, want a non-conflict error", name, err)
		}
		if _, err := s.Read(ctx, run, 1); !errors.Is(err, journal.ErrNotFound) {
			v.add("after a refused batch (%s), Read(new run) = %v, want ErrNotFound", name, err)
		}
	}
	const run = "run-atomic"
	if _, err := s.Append(ctx, run, 0, draft(journal.RunCreated, 0)); err != nil {
		return fmt.Errorf("Append(%q, 0) = %w", run, err)
	}
	for _, name := range []string{"payload not JSON", "empty type"} {
		if _, err := s.Append(ctx, run, 1, good, bad[name], good); err == nil {
			v.add("Append(%q, 1, [good, %s, good]) = nil, want an error", run, name)
		}
	}
	if got, err := s.Read(ctx, run, 1); err != nil || len(got) != 1 {
		v.add("after refused batches Read(%q) = %d events, %v; want 1 event", run, len(got), err)
	}
	if _, err := s.Append(ctx, run, 1); err == nil {
		v.add("Append(%q, 1) with no drafts = nil, want an error", run)
	}
	if _, err := s.Append(ctx, "", 0, good); err == nil {
		v.add(`Append("", 0) = nil, want an error`)
	}
	if evs, err := s.Append(ctx, run, 1, good, good); err != nil || len(evs) != 2 {
		v.add("Append(%q, 1, 2 good drafts) after refused batches = %d events, %v", run, len(evs), err)
	}
	return v.err()
}

func checkNotFound(ctx context.Context, s journal.Store) error {
	var v violations
	if _, err := s.Read(ctx, "no-such-run", 1); !errors.Is(err, journal.ErrNotFound) {
		v.add("Read(unknown run) = %v, want ErrNotFound", err)
	}
	if _, err := journal.ReadVerified(ctx, s, "no-such-run"); !errors.Is(err, journal.ErrNotFound) {
		v.add("ReadVerified(unknown run) = %v, want ErrNotFound", err)
	}
	runs, err := s.Runs(ctx, nil)
	if err != nil || len(runs) != 0 {
		v.add("Runs(empty store) = %v, %v; want no runs", runs, err)
	}
	if runs == nil && err == nil {
		v.add("Runs(empty store) = nil slice, want an empty non-nil slice")
	}
	return v.err()
}

// checkKeepsStatus: events that record the workspace's files
// (journal.KeepsStatus) leave the status of the run's index as it was: a
// completed run whose files were rewound is still completed, a running
// run whose files were checkpointed still running.
func checkKeepsStatus(ctx context.Context, s journal.Store) error {
	var v violations
	steps := []struct {
		types []journal.Type
		want  journal.Status
	}{
		{[]journal.Type{journal.RunCreated, journal.WorkspaceCheckpoint}, journal.StatusRunning},
		{[]journal.Type{journal.ToolFinished, journal.WorkspaceCheckpoint, journal.RunCompleted}, journal.StatusCompleted},
		{[]journal.Type{journal.WorkspaceCheckpoint, journal.WorkspaceRestored}, journal.StatusCompleted},
		{[]journal.Type{journal.WorkspaceRestored}, journal.StatusCompleted},
		{[]journal.Type{journal.WorkspaceRestoring, journal.WorkspaceRestored}, journal.StatusCompleted},
		{[]journal.Type{journal.RunResumed, journal.WorkspaceCheckpoint}, journal.StatusRunning},
	}
	seq := int64(0)
	for _, st := range steps {
		drafts := make([]journal.Draft, len(st.types))
		for i, ty := range st.types {
			drafts[i] = draft(ty, int(seq)+i)
		}
		if _, err := s.Append(ctx, "keeps", seq, drafts...); err != nil {
			return err
		}
		seq += int64(len(drafts))
		runs, err := s.Runs(ctx, nil)
		if err != nil {
			return err
		}
		for _, r := range runs {
			if r.RunID == "keeps" && (r.Status != st.want || r.LastType != st.types[len(st.types)-1] || r.LastSeq != seq) {
				v.add("after appending %v: status %s, last %s %d; want %s, %s %d", st.types, r.Status, r.LastType, r.LastSeq, st.want, st.types[len(st.types)-1], seq)
			}
		}
	}
	return v.err()
}

// sameEvent compares events field by field, times by instant and
// location (UTC is part of the contract).
func sameEvent(a, b journal.Event) bool {
	return a.RunID == b.RunID && a.Seq == b.Seq && a.Type == b.Type &&
		a.Time.Equal(b.Time) && a.Time.Location() == b.Time.Location() &&
		string(a.Payload) == string(b.Payload) && a.PrevHash == b.PrevHash && a.Hash == b.Hash
}
