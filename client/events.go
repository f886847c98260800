package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// EventsParams configures [Client.Events]. The zero value replays every
// event and then follows the run until ctx is done.
type EventsParams struct {
	// From is the first sequence number; 0 means 1.
	From int64
	// NoFollow ends after the events stored now.
	NoFollow bool
	// UntilStopped ends after the next event that stops an execution
	// (run.paused, run.completed, run.failed, run.canceled).
	UntilStopped bool
	// OnDisconnect, if set, is called with the error each time the
	// stream breaks and the client is about to reconnect, and with nil
	// when a reconnection succeeded after that.
	OnDisconnect func(err error)
	// OnDelta, if set, asks the server for the text of the run's model
	// call in progress (?deltas=true) and is called with each piece, in
	// order with the events, from the goroutine that ranges over
	// [Client.Events]. Deltas are not journaled: only a server that
	// executes the run itself sends them, a stream opened mid-call starts
	// with the text so far (Offset 0), and one older than an event
	// already yielded is stale (see [api.Delta]).
	OnDelta func(d api.Delta)
	// GiveUp, if positive, ends the sequence with the last connection
	// error when reconnecting has failed for this long (the server is
	// gone); 0 means reconnect until ctx is done.
	GiveUp time.Duration
}

// Events yields run id's events in order, each once, starting at p.From.
// It reads the server's Server-Sent Events stream; when the connection
// breaks it reconnects after [Options.Retry] with Last-Event-ID, so no
// event is lost or repeated. Each event's hash link to the previous one
// is checked (the first event's is checked against the genesis hash when
// From is 1; events whose hashes the server withheld, as they commit to
// memory this token may not see, by sequence number: journal.VerifyShown);
// a broken link ends the sequence with a
// *journal.CorruptError. Server errors (an unknown run, or a token
// revoked while the stream is open: code unauthenticated) end it with an
// *api.Error; when ctx is done it ends without an error.
func (c *Client) Events(ctx context.Context, id string, p *EventsParams) iter.Seq2[journal.Event, error] {
	var o EventsParams
	if p != nil {
		o = *p
	}
	return func(yield func(journal.Event, error) bool) {
		chain := journal.Shown{RunID: id, Next: max(o.From, 1)}
		if chain.Next == 1 {
			chain.Prev = journal.GenesisHash
		}
		var downSince time.Time // zero while connected
		for {
			connected := func() {
				if !downSince.IsZero() {
					downSince = time.Time{}
					if o.OnDisconnect != nil {
						o.OnDisconnect(nil)
					}
				}
			}
			done, err := c.streamOnce(ctx, id, &o, chain.Next, connected, func(e journal.Event) bool {
				if e.Seq < chain.Next {
					return true // a replayed duplicate
				}
				// The server withholds the hashes of events that follow
				// memory this token may not see: those are checked by
				// their sequence numbers (journal.VerifyShown).
				if err := chain.Add(&e); err != nil {
					yield(journal.Event{}, err)
					return false
				}
				return yield(e, nil)
			})
			if done {
				if err != nil {
					yield(journal.Event{}, err)
				}
				return
			}
			if ctx.Err() != nil {
				return
			}
			var ae *api.Error
			if errors.As(err, &ae) && ae.Status < 500 {
				yield(journal.Event{}, err)
				return
			}
			// The connection broke (or the server restarts): reconnect
			// after a pause, from where we are.
			if downSince.IsZero() {
				downSince = time.Now()
			}
			if o.GiveUp > 0 && time.Since(downSince) >= o.GiveUp {
				yield(journal.Event{}, fmt.Errorf("client: the server has not answered for %s: %w", time.Since(downSince).Round(time.Second), err))
				return
			}
			if o.OnDisconnect != nil {
				o.OnDisconnect(err)
			}
			t := time.NewTimer(c.retry)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// streamOnce reads one SSE connection. It returns done when the stream
// ended on purpose (an "end" message, or the consumer stopped), with an
// error if the server ended it because of one, and an error without done
// when the connection failed.
func (c *Client) streamOnce(ctx context.Context, id string, o *EventsParams, from int64, connected func(), deliver func(journal.Event) bool) (done bool, err error) {
	q := url.Values{}
	if o.NoFollow {
		q.Set("follow", "false")
	}
	if o.UntilStopped {
		q.Set("until", "stopped")
	}
	if o.OnDelta != nil {
		q.Set("deltas", "true")
	}
	h := http.Header{}
	h.Set("Accept", "text/event-stream")
	h.Set("Last-Event-ID", strconv.FormatInt(from-1, 10))
	resp, err := c.send(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id)+"/events", q, nil, h)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	connected()
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	var event string
	var data strings.Builder
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return false, fmt.Errorf("client: event stream of run %s: %w", id, err)
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if data.Len() == 0 {
				event = ""
				continue
			}
			if event == "end" {
				var end struct{ Reason, Code string }
				_ = json.Unmarshal([]byte(data.String()), &end)
				if msg, ok := strings.CutPrefix(end.Reason, "error: "); ok {
					e := &api.Error{Code: api.CodeInternal, Status: http.StatusInternalServerError, Message: "the server ended the event stream: " + msg}
					if end.Code == api.CodeUnauthenticated {
						// The token was revoked while the stream was open.
						e.Code, e.Status = end.Code, http.StatusUnauthorized
					}
					return true, e
				}
				return true, nil
			}
			if event == "delta" {
				var d api.Delta
				if err := json.Unmarshal([]byte(data.String()), &d); err == nil && o.OnDelta != nil {
					o.OnDelta(d)
				}
				data.Reset()
				event = ""
				continue
			}
			var e journal.Event
			if err := json.Unmarshal([]byte(data.String()), &e); err != nil {
				return false, fmt.Errorf("client: event stream of run %s: bad event: %w", id, err)
			}
			data.Reset()
			event = ""
			if !deliver(e) {
				return true, nil
			}
		case strings.HasPrefix(line, ":"):
			// a comment (keep-alive)
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
}
