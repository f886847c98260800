// Package audit checks and exports journals: it verifies every run's hash
// chain, its agreement with the store's run index (a cut-off tail), and
// that its events fold into a valid run, and reports the first bad event;
// it exports runs as JSON lines with their hashes, which anyone can check
// again with journal.ReadJSONL and journal.Verify.
//
// The identity stream (package identity) is audited like a run.
// [ExternalCalls] lists the calls that were given a credential, with
// the gate's decision on each (keel audit calls).
//
// # What the chain shows, and what anchors add
//
// A hash chain shows that a stream was changed without its hashes being
// recomputed (a byte flipped, an event edited or deleted by hand), and the
// run index shows a tail cut off. It does not show a rewrite by someone
// who can write the journal file and recomputes every hash after the
// change: the rewritten chain verifies. [Anchors] returns each stream's
// head (sequence number and hash) to keep outside that person's reach;
// [CheckAnchors] later finds any change at or before an anchor.
package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
)

// Report is the audit of one stream.
type Report struct {
	RunID string `json:"run_id"`
	// Kind is "run", "identity" for the identity stream, or "system" for
	// the server's other reserved streams (API tokens, API actions).
	Kind string `json:"kind"`
	// Events is the number of events read.
	Events int `json:"events"`
	// OK is true when the stream verified and folded.
	OK bool `json:"ok"`
	// FirstBad is the sequence number of the first bad event (0 when OK,
	// or when the stream cannot be read at all).
	FirstBad int64 `json:"first_bad,omitempty"`
	// Reason says what is wrong.
	Reason string `json:"reason,omitempty"`
	// Status is the run's status as folded (runs only).
	Status journal.Status `json:"status,omitempty"`
	// Head is the hash of the newest event: with the event count, what a
	// person can write down to check later that nothing was appended or
	// cut.
	Head string `json:"head,omitempty"`
}

// Verify audits one stream of store: it reads the events, checks the hash
// chain from the first event, compares the newest event with the store's
// run index when the run is listed there, and folds the events (a run, or
// the identity directory). It returns the report; an error only when the
// store cannot be asked at all (a run that does not exist is an error
// wrapping journal.ErrNotFound).
func Verify(ctx context.Context, store journal.Store, runID string) (Report, error) {
	runs, err := store.Runs(ctx, nil)
	if err != nil {
		return Report{}, fmt.Errorf("audit: list runs: %w", err)
	}
	var sum *journal.RunSummary
	for i := range runs {
		if runs[i].RunID == runID {
			sum = &runs[i]
		}
	}
	return verify(ctx, store, runID, sum)
}

// VerifyAll audits every stream the store lists, runs and the identity
// stream, in the store's order (newest run first).
func VerifyAll(ctx context.Context, store journal.Store) ([]Report, error) {
	runs, err := store.Runs(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("audit: list runs: %w", err)
	}
	out := make([]Report, 0, len(runs))
	for i := range runs {
		r, err := verify(ctx, store, runs[i].RunID, &runs[i])
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

func verify(ctx context.Context, store journal.Store, runID string, sum *journal.RunSummary) (Report, error) {
	r := Report{RunID: runID, Kind: "run"}
	switch {
	case runID == identity.StreamID:
		r.Kind = "identity"
	case journal.IsSystem(runID):
		// Another system stream (API tokens, the API action log): its
		// chain and index are audited; it has no fold of its own here.
		r.Kind = "system"
	}
	fail := func(err error) (Report, error) {
		var ce *journal.CorruptError
		if errors.As(err, &ce) {
			r.FirstBad, r.Reason = ce.Seq, ce.Reason
			return r, nil
		}
		if errors.Is(err, journal.ErrNotFound) {
			return r, fmt.Errorf("audit: %w", err)
		}
		r.Reason = err.Error()
		return r, nil
	}
	events, err := store.Read(ctx, runID, 1)
	if err != nil {
		return fail(err)
	}
	r.Events = len(events)
	if len(events) == 0 {
		return fail(&journal.CorruptError{RunID: runID, Seq: 1, Reason: "the run exists but has no events"})
	}
	if err := journal.Verify(runID, events); err != nil {
		return fail(err)
	}
	last := events[len(events)-1]
	r.Head = last.Hash
	if sum != nil && sum.LastSeq != last.Seq {
		return fail(&journal.CorruptError{RunID: runID, Seq: min(sum.LastSeq, last.Seq) + 1,
			Reason: fmt.Sprintf("the run index ends at event %d but the journal at event %d: events were cut off or added behind Keel's back", sum.LastSeq, last.Seq)})
	}
	if sum != nil && sum.LastType != last.Type {
		return fail(&journal.CorruptError{RunID: runID, Seq: last.Seq,
			Reason: fmt.Sprintf("the run index says the newest event is %s, the journal has %s", sum.LastType, last.Type)})
	}
	switch r.Kind {
	case "system":
	case "identity":
		if _, err := identity.NewDirectory(store, nil).List(ctx); err != nil {
			return fail(err)
		}
	default:
		st, err := agent.Fold(runID, events)
		if err != nil {
			return fail(err)
		}
		r.Status = st.Status
	}
	r.OK = true
	return r, nil
}

// ExportOptions configure [Export]. The zero value is valid.
type ExportOptions struct {
	// Unverified exports runs even when they fail verification (the
	// export then carries the bad events as stored). By default a run
	// that fails is not written and Export returns its error.
	Unverified bool
}

// Export writes the events of runIDs to w as JSON lines with their hashes
// (the format of journal.WriteJSONL), each run verified first. It returns
// the first error: a run that does not verify (a *journal.CorruptError,
// unless opts.Unverified), a store error, or a write error.
func Export(ctx context.Context, store journal.Store, runIDs []string, w io.Writer, opts *ExportOptions) error {
	if opts == nil {
		opts = &ExportOptions{}
	}
	for _, id := range runIDs {
		var events []journal.Event
		var err error
		if opts.Unverified {
			events, err = store.Read(ctx, id, 1)
		} else {
			events, err = journal.ReadVerified(ctx, store, id)
		}
		if err != nil {
			return fmt.Errorf("audit: export %s: %w", id, err)
		}
		if err := journal.WriteJSONL(w, events); err != nil {
			return fmt.Errorf("audit: export %s: %w", id, err)
		}
	}
	return nil
}

// Anchor is the head of one stream at one moment: its newest event's
// sequence number and hash. The hash chain alone shows that a journal was
// changed without its hashes being recomputed; someone who can write the
// journal file can recompute them after a change, and the chain then
// verifies. Anchors kept outside that person's reach (printed, mailed,
// committed elsewhere) close the gap: [CheckAnchors] finds any change to
// a stream at or before its anchor, however its hashes were recomputed.
type Anchor struct {
	RunID string `json:"run_id"`
	Seq   int64  `json:"seq"`
	Hash  string `json:"hash"`
	// Time is the time of the event at Seq.
	Time time.Time `json:"time"`
}

// Anchors verifies every stream of store ([VerifyAll]) and returns the
// head of each as an [Anchor], in the store's order. It returns an error
// naming the streams that do not verify (an anchor of a bad journal
// would vouch for it), or the store's error.
func Anchors(ctx context.Context, store journal.Store) ([]Anchor, error) {
	reports, err := VerifyAll(ctx, store)
	if err != nil {
		return nil, err
	}
	var bad []string
	out := make([]Anchor, 0, len(reports))
	for _, r := range reports {
		if !r.OK {
			bad = append(bad, fmt.Sprintf("%s (event %d: %s)", r.RunID, r.FirstBad, r.Reason))
			continue
		}
		events, err := store.Read(ctx, r.RunID, int64(r.Events))
		if err != nil || len(events) == 0 {
			return nil, fmt.Errorf("audit: anchor %s: %w", r.RunID, err)
		}
		last := events[len(events)-1]
		out = append(out, Anchor{RunID: r.RunID, Seq: last.Seq, Hash: last.Hash, Time: last.Time})
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("audit: anchor: %d stream(s) do not verify: %s", len(bad), strings.Join(bad, "; "))
	}
	return out, nil
}

// AnchorReport is the check of one [Anchor].
type AnchorReport struct {
	Anchor
	// OK is true when the stream verifies and its event at Anchor.Seq has
	// Anchor.Hash.
	OK bool `json:"ok"`
	// Reason says what is wrong.
	Reason string `json:"reason,omitempty"`
}

// CheckAnchors checks store against anchors taken earlier ([Anchors]):
// each anchored stream must still exist, verify from its first event, and
// have the anchored hash at the anchored sequence number, so that a
// change at or before the anchor (an edit with recomputed hashes, a
// deleted event, a cut tail, a deleted stream) is found. It returns one
// report per anchor, in order; an error only when the store cannot be
// asked.
func CheckAnchors(ctx context.Context, store journal.Store, anchors []Anchor) ([]AnchorReport, error) {
	out := make([]AnchorReport, 0, len(anchors))
	for _, a := range anchors {
		r := AnchorReport{Anchor: a}
		events, err := store.Read(ctx, a.RunID, 1)
		var ce *journal.CorruptError
		switch {
		case errors.Is(err, journal.ErrNotFound):
			r.Reason = "the stream no longer exists"
		case errors.As(err, &ce):
			r.Reason = fmt.Sprintf("corrupt at event %d: %s", ce.Seq, ce.Reason)
		case err != nil:
			return out, fmt.Errorf("audit: check anchor of %s: %w", a.RunID, err)
		default:
			r.Reason = checkAnchor(a, events)
		}
		r.OK = r.Reason == ""
		out = append(out, r)
	}
	return out, nil
}

func checkAnchor(a Anchor, events []journal.Event) string {
	if err := journal.Verify(a.RunID, events); err != nil {
		return err.Error()
	}
	if int64(len(events)) < a.Seq {
		return fmt.Sprintf("the stream ends at event %d, before the anchored event %d: events were removed", len(events), a.Seq)
	}
	e := events[a.Seq-1]
	if e.Seq != a.Seq {
		return fmt.Sprintf("event %d is numbered %d", a.Seq, e.Seq)
	}
	if e.Hash != a.Hash {
		return fmt.Sprintf("event %d has hash %.16s…, the anchor says %.16s…: the stream was rewritten at or before it", a.Seq, e.Hash, a.Hash)
	}
	return ""
}
