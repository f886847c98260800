package model

import (
	"context"
	"fmt"
	"time"
)

// Observer is told what a model call does before its answer is
// complete: the answer's text as it streams, and each repeat of the
// request. It is for a person watching (keel run prints it); the runtime
// journals only the whole [Response] that Generate returns, so nothing an
// Observer sees is stored or can differ from what is.
//
// A provider streams its answer when the context of Generate carries an
// Observer ([WithObserver]) and sends whole answers otherwise. Callbacks
// are called from the goroutine of Generate, in order, and must not
// block for long; a nil field is not called.
type Observer struct {
	// Text receives each piece of the answer's text as it arrives.
	// Pieces of a request that is then repeated (a stream cut short) may
	// have been seen already: Retry says so first.
	Text func(delta string)
	// Call is told when the answer starts a tool call, with the tool's
	// name as the model wrote it.
	Call func(name string)
	// Retry is told before the request is sent again.
	Retry func(r Retry)
}

// Retry describes one repeat of a model request.
type Retry struct {
	// Attempt is the number of the attempt about to be made (2 for the
	// first repeat).
	Attempt int
	// Status is the HTTP status that failed (429, 529, 5xx), 0 for a
	// connection error or an unusable answer.
	Status int
	// Wait is how long the client waits before the attempt (the
	// provider's Retry-After when it gave one), 0 when unknown.
	Wait time.Duration
	// Reason says why, in a few words ("rate limited", "overloaded",
	// "server error", "connection error", "unusable answer").
	Reason string
}

// String says the retry as a person reads it: "rate limited (HTTP 429):
// retrying in 20s (attempt 2)".
func (r Retry) String() string {
	s := r.Reason
	if r.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d)", r.Status)
	}
	if r.Wait > 0 {
		s += fmt.Sprintf(": retrying in %s", r.Wait.Round(time.Millisecond))
	} else {
		s += ": retrying"
	}
	return s + fmt.Sprintf(" (attempt %d)", r.Attempt)
}

type observerKey struct{}

// WithObserver returns a context whose model calls report to o.
func WithObserver(ctx context.Context, o *Observer) context.Context {
	return context.WithValue(ctx, observerKey{}, o)
}

// ObserverOf returns the [Observer] of ctx, or nil.
func ObserverOf(ctx context.Context) *Observer {
	o, _ := ctx.Value(observerKey{}).(*Observer)
	return o
}

// OnText calls o.Text if o and it are set.
func (o *Observer) OnText(s string) {
	if o != nil && o.Text != nil && s != "" {
		o.Text(s)
	}
}

// OnCall calls o.Call if o and it are set.
func (o *Observer) OnCall(name string) {
	if o != nil && o.Call != nil {
		o.Call(name)
	}
}

// OnRetry calls o.Retry if o and it are set.
func (o *Observer) OnRetry(r Retry) {
	if o != nil && o.Retry != nil {
		o.Retry(r)
	}
}

// RetryReason names the failure of an HTTP status a client repeats.
func RetryReason(status int) string {
	switch {
	case status == 429:
		return "rate limited"
	case status == 529:
		return "overloaded"
	case status == 408:
		return "request timeout"
	case status == 409:
		return "conflict"
	case status >= 500:
		return "server error"
	case status == 0:
		return "connection error"
	default:
		return "HTTP error"
	}
}
