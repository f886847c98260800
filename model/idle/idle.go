// Package idle abandons HTTP requests that stop moving bytes. Its
// [Transport] is shared by the provider adapters ([github.com/keel-run/keel/model/openai],
// [github.com/keel-run/keel/model/anthropic]) so that a provider that
// accepts a request and then goes silent is detected, repeated a bounded
// number of times and finally reported as a [model.KindStalled] error,
// instead of hanging a run. It lives outside package model so that the core
// types do not pull in net/http.
package idle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/keel-run/keel/model"
)

// Defaults of [Options].
const (
	// DefaultTimeout is how long a request may go without moving a
	// byte (request body written, response headers or body read) before it
	// is abandoned.
	DefaultTimeout = 2 * time.Minute
	// DefaultResponseTimeout is the longest one attempt may take from
	// sending the request to the end of the response body, however
	// steadily bytes arrive: a provider (or a proxy) that keeps the
	// connection alive with a byte every few seconds never trips the idle
	// timeout, and would otherwise hold a step forever. It is the
	// official OpenAI and Anthropic SDKs' default request timeout.
	DefaultResponseTimeout = 10 * time.Minute
	// DefaultStallRetries is how many times a stalled request is sent again
	// before [Transport] gives up with [model.KindStalled].
	DefaultStallRetries = 2
	// DefaultMaxResponseBytes bounds a buffered (non-streaming) response
	// body: 64 MiB, far above any chat completion.
	DefaultMaxResponseBytes = 64 << 20
)

// Options configures [NewTransport]. The zero value is valid.
type Options struct {
	// IdleTimeout is the longest time without a byte moving in either
	// direction. 0 means [DefaultTimeout]; a negative value disables
	// the watchdog (bodies are still buffered and bounded).
	IdleTimeout time.Duration
	// ResponseTimeout is the longest one attempt may take, headers and
	// whole body, bytes moving or not. 0 means [DefaultResponseTimeout];
	// a negative value disables it. An attempt over it counts as a stall
	// (repeated, then [model.KindStalled]).
	ResponseTimeout time.Duration
	// StallRetries is how many times a stalled request is repeated. 0
	// means [DefaultStallRetries]; a negative value means no repeat.
	StallRetries int
	// MaxResponseBytes bounds a buffered response body. 0 means
	// [DefaultMaxResponseBytes].
	MaxResponseBytes int64
	// Logger receives a warning for every stalled attempt. nil discards.
	Logger *slog.Logger
}

// Transport is an [http.RoundTripper] that abandons a request when no
// byte moves for the idle timeout, repeats it a bounded number of times, and
// then fails with an [*model.Error] of [model.KindStalled] whose message reads, for
// example, "no bytes for 2m0s on 3 attempts".
//
// The watchdog covers writing the request body, waiting for the response
// headers and reading the response body. A non-streaming response body is
// read whole inside RoundTrip, so a stall or a truncated body is an error of
// RoundTrip and never a half body handed to a JSON parser: a partial
// response can never yield a tool call. A body that breaks off (connection
// reset, short Content-Length) is returned as a plain error for the caller's
// own retry policy (the provider SDKs treat it as a connection error). A
// streaming response (Content-Type text/event-stream) is not buffered; its
// body is watched instead and a read fails with [model.KindStalled] after the idle
// timeout, without a repeat, since part of it was already consumed.
//
// Repeating a request needs [http.Request.GetBody] when the request has a
// body (the OpenAI and Anthropic SDKs set it). Transport is safe for
// concurrent use.
type Transport struct {
	base     http.RoundTripper
	idle     time.Duration
	deadline time.Duration
	retries  int
	maxBytes int64
	logger   *slog.Logger
}

var _ http.RoundTripper = (*Transport)(nil)

// NewIdleTransport returns an [Transport] sending through base
// (http.DefaultTransport when nil) with opts (nil means defaults).
func NewTransport(base http.RoundTripper, opts *Options) *Transport {
	var o Options
	if opts != nil {
		o = *opts
	}
	if base == nil {
		base = http.DefaultTransport
	}
	t := &Transport{base: base, idle: o.IdleTimeout, deadline: o.ResponseTimeout, retries: o.StallRetries, maxBytes: o.MaxResponseBytes, logger: o.Logger}
	if t.idle == 0 {
		t.idle = DefaultTimeout
	}
	if t.deadline == 0 {
		t.deadline = DefaultResponseTimeout
	}
	switch {
	case t.retries == 0:
		t.retries = DefaultStallRetries
	case t.retries < 0:
		t.retries = 0
	}
	if t.maxBytes <= 0 {
		t.maxBytes = DefaultMaxResponseBytes
	}
	if t.logger == nil {
		t.logger = slog.New(slog.DiscardHandler)
	}
	return t
}

// Timeout returns the effective idle timeout (negative when disabled).
func (t *Transport) Timeout() time.Duration { return t.idle }

// ResponseTimeout returns the effective per-attempt deadline (negative
// when disabled).
func (t *Transport) ResponseTimeout() time.Duration { return t.deadline }

// StallRetries returns the effective number of repeats after a stall.
func (t *Transport) StallRetries() int { return t.retries }

// errIdle is the cancellation cause of an attempt abandoned by the
// watchdog; errDeadline of one that went on longer than the response
// timeout.
var (
	errIdle     = errors.New("idle: timeout")
	errDeadline = errors.New("idle: response timeout")
)

// abandoned reports whether err ended an attempt abandoned by the
// transport itself (idle or over the deadline).
func abandoned(err error) bool { return errors.Is(err, errIdle) || errors.Is(err, errDeadline) }

// RoundTrip implements [http.RoundTripper]. It returns the response with its
// body fully read (unless streaming), the base transport's error, an error
// reading the body, or an [*model.Error] of [model.KindStalled] once every attempt
// stalled. The request is not modified; its body is closed.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	attempts := t.retries + 1
	body := req.Body
	for n := 1; ; n++ {
		res, err := t.attempt(req, body)
		if !abandoned(err) {
			return res, err
		}
		over := errors.Is(err, errDeadline)
		if over {
			t.logger.Warn(fmt.Sprintf("model request abandoned: no complete response within %s (attempt %d of %d)", t.deadline, n, attempts))
		} else {
			t.logger.Warn(fmt.Sprintf("model request stalled: no bytes for %s (attempt %d of %d)", t.idle, n, attempts))
		}
		if n == attempts {
			return nil, t.stalled(n, over)
		}
		if req.Body != nil && req.Body != http.NoBody {
			if req.GetBody == nil {
				return nil, t.stalled(n, over)
			}
			if body, err = req.GetBody(); err != nil {
				return nil, fmt.Errorf("idle: replay request body after stall: %w", err)
			}
		}
	}
}

// stalled is the error after attempts abandoned attempts, the last one
// over the response deadline when over, else idle.
func (t *Transport) stalled(attempts int, over bool) *model.Error {
	unit := "attempts"
	if attempts == 1 {
		unit = "attempt"
	}
	if over {
		return &model.Error{Kind: model.KindStalled, Message: fmt.Sprintf("no complete response within %s on %d %s (the provider kept the connection open without finishing)", t.deadline, attempts, unit)}
	}
	return &model.Error{Kind: model.KindStalled, Message: fmt.Sprintf("no bytes for %s on %d %s", t.idle, attempts, unit)}
}

// attempt sends req once with body and reads the response body. It returns
// an error wrapping errIdle when the watchdog abandoned it.
func (t *Transport) attempt(req *http.Request, body io.ReadCloser) (*http.Response, error) {
	parent := req.Context()
	ctx, cancel := context.WithCancelCause(parent)
	dog := newWatchdog(t.idle, func() { cancel(errIdle) })
	end := newWatchdog(t.deadline, func() { cancel(errDeadline) })
	r := req.Clone(ctx)
	r.Body = body
	if body != nil && body != http.NoBody {
		r.Body = &progressReader{rc: body, dog: dog}
	}
	idle := func(err error) error {
		if cause := context.Cause(ctx); parent.Err() == nil && abandoned(cause) {
			return fmt.Errorf("%w: %v", cause, err)
		}
		return err
	}

	res, err := t.base.RoundTrip(r)
	if err != nil {
		dog.stop()
		end.stop()
		err = idle(err)
		cancel(nil)
		return nil, err
	}
	dog.kick()
	if isStream(res.Header) {
		res.Body = &watchedBody{rc: res.Body, dog: dog, end: end, ctx: ctx, cancel: cancel, parent: parent, idle: t.idle, deadline: t.deadline}
		return res, nil
	}
	data, err := io.ReadAll(io.LimitReader(&progressReader{rc: res.Body, dog: dog}, t.maxBytes+1))
	dog.stop()
	end.stop()
	res.Body.Close()
	if err != nil {
		err = idle(err)
		cancel(nil)
		if abandoned(err) {
			return nil, err
		}
		return nil, fmt.Errorf("idle: read response body: %w", err)
	}
	cancel(nil)
	if int64(len(data)) > t.maxBytes {
		return nil, fmt.Errorf("idle: response body exceeds %d bytes", t.maxBytes)
	}
	res.Body = io.NopCloser(bytes.NewReader(data))
	res.ContentLength = int64(len(data))
	res.Header.Set("Content-Length", strconv.Itoa(len(data)))
	return res, nil
}

func isStream(h http.Header) bool {
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	return mt == "text/event-stream"
}

// watchdog runs f once no kick happened for d. A negative d disables it.
type watchdog struct {
	mu      sync.Mutex
	t       *time.Timer
	d       time.Duration
	stopped bool
}

func newWatchdog(d time.Duration, f func()) *watchdog {
	w := &watchdog{d: d}
	if d > 0 {
		w.t = time.AfterFunc(d, f)
	}
	return w
}

// kick restarts the countdown, unless the watchdog was stopped.
func (w *watchdog) kick() {
	if w.t == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.t.Reset(w.d)
	}
}

func (w *watchdog) stop() {
	if w.t == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.t.Stop()
}

// progressReader kicks the watchdog on every read that moved bytes.
type progressReader struct {
	rc  io.ReadCloser
	dog *watchdog
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.rc.Read(b)
	if n > 0 {
		p.dog.kick()
	}
	return n, err
}

func (p *progressReader) Close() error { return p.rc.Close() }

// watchedBody is a streaming response body under the watchdog.
// A streaming response is under the response deadline as a whole: past
// it, a read fails with [model.KindStalled], without a repeat (part of it
// was consumed).
type watchedBody struct {
	rc       io.ReadCloser
	dog, end *watchdog
	ctx      context.Context
	parent   context.Context
	cancel   context.CancelCauseFunc
	idle     time.Duration
	deadline time.Duration
}

func (w *watchedBody) Read(b []byte) (int, error) {
	n, err := w.rc.Read(b)
	if n > 0 {
		w.dog.kick()
	}
	if err != nil && err != io.EOF && w.parent.Err() == nil {
		switch cause := context.Cause(w.ctx); {
		case errors.Is(cause, errIdle):
			return n, &model.Error{Kind: model.KindStalled, Message: fmt.Sprintf("no bytes for %s in a streaming response", w.idle), Err: err}
		case errors.Is(cause, errDeadline):
			return n, &model.Error{Kind: model.KindStalled, Message: fmt.Sprintf("streaming response not complete within %s", w.deadline), Err: err}
		}
	}
	return n, err
}

func (w *watchedBody) Close() error {
	w.dog.stop()
	w.end.stop()
	err := w.rc.Close()
	w.cancel(nil)
	return err
}
