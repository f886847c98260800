package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// sse is one Server-Sent Events response: the API's event stream and the
// web UI's live timeline both write through it.
type sse struct {
	w  http.ResponseWriter
	fl http.Flusher
}

// startSSE sends the headers of an event stream.
func startSSE(w http.ResponseWriter) (*sse, error) {
	fl, ok := w.(http.Flusher)
	if !ok {
		return nil, errors.New("server: response writer cannot flush")
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	return &sse{w: w, fl: fl}, nil
}

// send writes one message (id may be ""); data of several lines becomes
// several data lines.
func (s *sse) send(id, event string, data []byte) error {
	var b bytes.Buffer
	if id != "" {
		fmt.Fprintf(&b, "id: %s\n", id)
	}
	fmt.Fprintf(&b, "event: %s\n", event)
	for _, line := range bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n")) {
		fmt.Fprintf(&b, "data: %s\n", line)
	}
	b.WriteString("\n")
	_, err := s.w.Write(b.Bytes())
	return err
}

func (s *sse) flush() { s.fl.Flush() }

// resumeFrom returns the first sequence number a stream sends: from (the
// ?from= parameter's value), or the one after a Last-Event-ID header,
// which browsers send when they reconnect and which wins.
func resumeFrom(r *http.Request, from int64) (int64, error) {
	s := r.Header.Get("Last-Event-ID")
	if s == "" {
		return from, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n == math.MaxInt64 {
		return 0, badRequest("Last-Event-ID %q: want a sequence number", s)
	}
	return n + 1, nil
}

// follower says what a followed stream does with what happens.
type follower struct {
	// event handles one event; more reports that more events are
	// already waiting (a burst: flush after the last). done ends the
	// stream; an error ends it without another message.
	event func(e *journal.Event, more bool) (done bool, err error)
	// failed handles the error that ended journal.Follow.
	failed func(err error)
	// revoked is the message that ends the stream when its token is
	// revoked.
	revoked string
	// wake, if set, returns a channel that is closed when onWake should
	// run (nil: nothing to wait for); it is asked again each time.
	// onWake returning true ends the stream.
	wake   func() <-chan struct{}
	onWake func() (done bool)
	// live, if set, is the stream's cursor on the run's model call in
	// progress (liveHub): its deltas go to delta, as they come and after
	// each burst of events, for a stream whose newest event is seen().
	live  *service.LiveSub
	delta func(d *api.Delta) error
	seen  func() int64
}

// sendLive writes the deltas f.live has for the stream now.
func (f *follower) sendLive(s *sse) error {
	ds := f.live.Next(f.seen())
	for i := range ds {
		if err := f.delta(&ds[i]); err != nil {
			return err
		}
	}
	if len(ds) > 0 {
		s.flush()
	}
	return nil
}

// follow is the one loop of the server's event streams: it follows run
// id's journal from from (journal.Follow, in its own goroutine, so that
// the loop can write heartbeats while it waits; the goroutine ends with
// ctx), writes a comment every Heartbeat while idle, and ends the stream
// as soon as its token is revoked: at once for a revocation this server
// folds, within Options.TokenCheck for one by another process.
func (h *Handler) follow(ctx context.Context, s *sse, id string, from int64, guard *tokenGuard, f *follower) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer guard.stop()
	revoked := func() error {
		fmt.Fprint(s.w, f.revoked)
		s.flush()
		return nil
	}
	if !guard.valid(ctx) {
		return revoked()
	}
	type item struct {
		e   journal.Event
		err error
	}
	ch := make(chan item, 64)
	go func() {
		defer close(ch)
		for e, err := range journal.Follow(ctx, h.rt.Store(), id, from, h.opts.Poll) {
			select {
			case ch <- item{e, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	beat := time.NewTicker(h.opts.Heartbeat)
	defer beat.Stop()
	// live is asked for before every read of the cursor (and kept until
	// it fires), so that no change after a read is missed.
	var live <-chan struct{}
	if f.live != nil {
		defer f.live.Close()
		live = f.live.Wait()
	}
	for {
		var wake <-chan struct{}
		if f.wake != nil {
			wake = f.wake()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-guard.revoked:
			if !guard.valid(ctx) {
				return revoked()
			}
		case <-guard.tick.C:
			if !guard.valid(ctx) {
				return revoked()
			}
		case <-wake:
			if f.onWake() {
				return nil
			}
		case <-live:
			live = f.live.Wait()
			if err := f.sendLive(s); err != nil {
				return nil
			}
		case <-beat.C:
			if _, err := fmt.Fprint(s.w, ": keep-alive\n\n"); err != nil {
				return nil
			}
			s.flush()
		case it, ok := <-ch:
			if !ok {
				return nil
			}
			if it.err != nil {
				if f.failed != nil {
					f.failed(it.err)
				}
				return nil
			}
			if !guard.valid(ctx) {
				return revoked()
			}
			if f.live != nil {
				// The call's text is all in the hub before its event is
				// journaled: send what is left of it first.
				if err := f.sendLive(s); err != nil {
					return nil
				}
			}
			more := len(ch) > 0
			done, err := f.event(&it.e, more)
			if err != nil || done {
				return nil
			}
			if f.live != nil && !more {
				// Deltas held back until the stream caught up.
				if err := f.sendLive(s); err != nil {
					return nil
				}
			}
		}
	}
}
