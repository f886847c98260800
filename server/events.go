package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
)

// runEvents streams a run's events as Server-Sent Events:
//
//	id: SEQ
//	event: TYPE
//	data: {"run_id": ..., "seq": SEQ, "type": TYPE, "time": ..., "payload": {...}, "prev_hash": ..., "hash": ...}
//
// It replays the stored events from ?from=SEQ (default 1; a
// Last-Event-ID header, which browsers send when they reconnect, means
// "from that id plus one" and wins), then follows the run live. With
// ?follow=false it ends after the stored events; with ?until=stopped it
// ends after the next event that leaves the run stopped (run.paused,
// approval.requested with the rest of its batch, or a terminal event).
// A followed stream also ends after the run.completed that leaves the
// run completed now (a follow-up message continues a completed run: a
// stream that began before it goes on through it; failed and canceled
// runs can be resumed, so their streams go on). Every finite stream's
// last message is "event: end".
// With ?tree=true the stream also carries the events of the run's
// children, and of theirs (see treeEvents).
// With ?deltas=true a followed stream also carries "event: delta"
// messages without an id (api.Delta): the text of the model call in
// progress, when this server executes the run.
// Each event is checked against its hash chain as it is read; idle
// streams get a comment line every Heartbeat. A stream ends, with
// "event: end" and the reason "error: invalid or revoked API token", as
// soon as its token is revoked (see [Options].TokenCheck).
func (h *Handler) runEvents(w http.ResponseWriter, r *http.Request, who *caller) error {
	ctx := r.Context()
	id := r.PathValue("id")
	run, err := h.svc.Run(ctx, who, id)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	from := int64(1)
	if s := q.Get("from"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 {
			return badRequest("from %q: want a sequence number >= 1", s)
		}
		from = n
	}
	if from, err = resumeFrom(r, from); err != nil {
		return err
	}
	var follow bool
	switch s := q.Get("follow"); s {
	case "", "true":
		follow = true
	case "false":
	default:
		return badRequest("follow %q: want true or false", s)
	}
	untilStopped := q.Get("until") == "stopped"
	if s := q.Get("until"); s != "" && s != "stopped" {
		return badRequest("until %q: the only value is \"stopped\"", s)
	}
	var deltas bool
	switch s := q.Get("deltas"); s {
	case "", "false":
	case "true":
		deltas = true
	default:
		return badRequest("deltas %q: want true or false", s)
	}
	var tree bool
	switch s := q.Get("tree"); s {
	case "", "false":
	case "true":
		tree = true
		if deltas || untilStopped {
			return badRequest("tree=true does not go with deltas or until")
		}
	default:
		return badRequest("tree %q: want true or false", s)
	}
	out, err := startSSE(w)
	if err != nil {
		return err
	}
	if tree {
		return h.treeEvents(ctx, out, who, id, from, follow)
	}
	hide := h.svc.MemoryHider(ctx, who, id)
	write := func(e *journal.Event) error {
		shown := hide(*e)
		b, err := json.Marshal(&shown)
		if err != nil {
			return err
		}
		return out.send(strconv.FormatInt(e.Seq, 10), string(e.Type), b)
	}
	end := func(reason string) {
		_ = out.send("", "end", fmt.Appendf(nil, "{\"reason\":%q}", reason))
		out.flush()
	}
	// done reports whether the run is completed at event seq: nothing
	// after it, and no follow-up queued or executing here (a resume with
	// a message answers before its execution journals anything).
	done := func(run api.Run, seq int64) bool {
		return run.Status == string(journal.StatusCompleted) && run.Events <= seq && !run.Executing && !run.Queued
	}
	if follow && done(run, from-1) {
		end(string(journal.StatusCompleted))
		return nil
	}
	// A completed run with a follow-up queued or executing here: follow
	// it, ending when the pool lets the run go and nothing came after.
	waiting := follow && run.Status == string(journal.StatusCompleted) && from > run.Events
	if !follow {
		events, err := h.rt.Store().Read(ctx, id, from)
		if err != nil {
			end("error: " + h.streamError(err))
			return nil
		}
		prev := ""
		for i := range events {
			if err := checkLink(id, from, prev, &events[i]); err != nil {
				end("error: " + h.streamError(err))
				return nil
			}
			prev = events[i].Hash
			if err := write(&events[i]); err != nil {
				return nil
			}
		}
		end("replayed")
		return nil
	}
	completed := func(seq int64) bool {
		run, err := h.svc.Run(ctx, who, id)
		return err != nil || done(run, seq)
	}
	return h.followEvents(ctx, out, id, from, untilStopped, deltas, h.newTokenGuard(who), write, end, completed, waiting)
}

// revokedEnd is the end message of a stream whose token was revoked.
const revokedEnd = "event: end\ndata: {\"reason\":\"error: invalid or revoked API token\",\"code\":\"unauthenticated\"}\n\n"

// tokenGuard tells an open event stream when its token stops being
// valid: at once for a revocation this server folds, and within a tick
// (Options.TokenCheck) for one by another process.
type tokenGuard struct {
	h    *Handler
	id   string
	tick *time.Ticker
	// revoked is closed at the next revocation the server folds.
	revoked <-chan struct{}
}

// newTokenGuard returns the guard of a stream opened with token who;
// stop it when the stream ends.
func (h *Handler) newTokenGuard(who *caller) *tokenGuard {
	return &tokenGuard{h: h, id: who.ID, tick: time.NewTicker(h.opts.TokenCheck), revoked: h.tokens.Revocations()}
}

func (g *tokenGuard) stop() { g.tick.Stop() }

// valid reports whether the token is still valid (an error reading the
// token stream counts as valid: the stream's own reads will fail). It
// re-arms the revocation channel first, so no revocation is missed.
func (g *tokenGuard) valid(ctx context.Context) bool {
	g.revoked = g.h.tokens.Revocations()
	return !errors.Is(g.h.tokens.Active(ctx, g.id), token.ErrBad)
}

// streamError is the user-safe text of an error that ends a stream (a
// corrupt journal names its first bad event; anything else is logged).
func (h *Handler) streamError(err error) string {
	e, internal := classify(err)
	if internal {
		h.logger.Error("event stream", "err", err)
	}
	return e.msg
}

// checkLink verifies one event of a replay that starts at from.
func checkLink(id string, from int64, prev string, e *journal.Event) error {
	if prev == "" {
		prev = e.PrevHash // the first event's link is checked by a full verification, not here
		if from == 1 {
			prev = journal.GenesisHash
		}
	}
	return journal.VerifyFrom(id, prev, e.Seq, []journal.Event{*e})
}

// followEvents follows the run for the API's stream (see runEvents).
func (h *Handler) followEvents(ctx context.Context, out *sse, id string, from int64, untilStopped, deltas bool,
	guard *tokenGuard, write func(*journal.Event) error, end func(string), completed func(seq int64) bool, waiting bool) error {
	// sent is the newest event sent (a stop's batch is read ahead), or
	// the one before from, which the client has.
	sent := from - 1
	// waiting: the newest event sent (or the client's) is a run.completed
	// that did not end the stream, since this server's executor held the
	// run then (the execution that wrote it not yet let go, or a
	// follow-up queued): the stream ends once the executor lets it go
	// with nothing after it.
	closed := make(chan struct{})
	close(closed)
	f := &follower{
		wake: func() <-chan struct{} {
			if !waiting {
				return nil
			}
			ch := h.svc.Watch(id) // before the check: a change after it closes ch
			if completed(sent) {
				return closed
			}
			return ch // nil: not held here, and events came after: they follow
		},
		onWake: func() bool {
			if waiting && completed(sent) {
				end(string(journal.StatusCompleted))
				return true
			}
			return false
		},
		revoked: revokedEnd,
		failed:  func(err error) { end("error: " + h.streamError(err)) },
		event: func(e *journal.Event, more bool) (bool, error) {
			if e.Seq <= sent {
				return false, nil
			}
			if err := write(e); err != nil {
				return true, err
			}
			sent = e.Seq
			// Flush once the burst is written: replays go out in large
			// writes, live events one by one.
			if !more {
				out.flush()
			}
			waiting = false
			if e.Type == journal.RunCompleted && !more {
				if completed(e.Seq) {
					end(string(journal.StatusCompleted))
					return true, nil
				}
				waiting = true
			}
			if !untilStopped || !journal.Stops(e.Type) {
				return false, nil
			}
			// A stop may be one of several events appended at once
			// (approval.requested for each call of a turn): send the
			// rest of the batch, already stored, before ending.
			last := *e
			rest, err := h.rt.Store().Read(ctx, id, last.Seq+1)
			if err == nil {
				for i := range rest {
					if checkLink(id, last.Seq+1, last.Hash, &rest[i]) != nil || write(&rest[i]) != nil {
						break
					}
					last = rest[i]
				}
			}
			sent = last.Seq
			out.flush()
			if journal.Stops(last.Type) {
				end(string(journal.StatusOf(last.Type)))
				return true, nil
			}
			// The run moved on meanwhile: keep following after the
			// events just sent.
			return false, nil
		},
	}
	if deltas {
		// The model's text as it streams, on the server that executes
		// the run (see live.go).
		f.live, f.seen = h.svc.Subscribe(id), func() int64 { return sent }
		f.delta = func(d *api.Delta) error {
			b, err := json.Marshal(d)
			if err != nil {
				return err
			}
			return out.send("", "delta", b)
		}
	}
	return h.follow(ctx, out, id, from, guard, f)
}
