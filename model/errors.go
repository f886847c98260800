package model

import (
	"errors"
	"fmt"
	"time"
)

// ErrorKind classifies a provider failure. Retryability is part of the kind
// (the pattern of Temporal's NonRetryableApplicationError).
type ErrorKind int

// The error kinds. The zero value is [KindUnknown].
const (
	KindUnknown ErrorKind = iota
	// KindRetryable is a transient failure (5xx, connection reset, a
	// stalled response) that may succeed when repeated.
	KindRetryable
	// KindRateLimited is HTTP 429 or a provider overload; RetryAfter says
	// how long to wait when the provider said so.
	KindRateLimited
	// KindAuth is HTTP 401/403 or a missing key: not retryable.
	KindAuth
	// KindContextOverflow means the prompt does not fit the model's
	// context window: retrying the same request cannot help.
	KindContextOverflow
	// KindInvalidRequest is any other 4xx: not retryable.
	KindInvalidRequest
	// KindStalled means no bytes arrived for the configured idle time on
	// every allowed attempt.
	KindStalled
	// KindExhausted is a replayed trajectory with no more recorded turns.
	KindExhausted
	// KindMismatch is a replay whose request does not match the recording
	// (for example a recorded tool that the request does not offer).
	KindMismatch
)

var kindNames = [...]string{"unknown", "retryable", "rate_limited", "auth", "context_overflow", "invalid_request", "stalled", "exhausted", "mismatch"}

// String returns the snake_case name of k, as stored in the journal.
func (k ErrorKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Retryable reports whether an error of kind k may succeed if repeated.
func (k ErrorKind) Retryable() bool {
	return k == KindRetryable || k == KindRateLimited || k == KindStalled
}

// Error is a classified provider failure.
type Error struct {
	Kind ErrorKind
	// Provider names the adapter ("openai", "anthropic", "replay").
	Provider string
	// StatusCode is the HTTP status when there was one, else 0.
	StatusCode int
	// RetryAfter is the provider's requested delay, 0 if none.
	RetryAfter time.Duration
	// Message is user-safe text (no keys, no request bodies).
	Message string
	// Err is the underlying error, if any.
	Err error
}

// Error implements error.
func (e *Error) Error() string {
	s := "model"
	if e.Provider != "" {
		s += " " + e.Provider
	}
	s += ": " + e.Kind.String()
	if e.StatusCode != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.StatusCode)
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(" (the provider asked to wait %s before the next request)", e.RetryAfter.Round(time.Second))
	}
	return s
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error of the same kind, so that
// errors.Is(err, &model.Error{Kind: model.KindAuth}) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind && (t.Provider == "" || t.Provider == e.Provider)
}

// KindOf returns the [ErrorKind] of err, or KindUnknown when err is not (or
// does not wrap) an [*Error].
func KindOf(err error) ErrorKind {
	var me *Error
	if errors.As(err, &me) {
		return me.Kind
	}
	return KindUnknown
}
