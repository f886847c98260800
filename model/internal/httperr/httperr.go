// Package httperr turns provider HTTP failures into [*model.Error] values.
// It is shared by the provider adapters below model/ and holds the one place
// where status codes, error codes and message texts are classified, so that
// OpenAI, every OpenAI-compatible endpoint and Anthropic agree on what is
// retryable, a rate limit, an authentication problem or a context overflow.
package httperr

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
	"strings"
	"time"

	"github.com/keel-run/keel/internal/lazy"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/redact"
)

// Problem is one failed provider call as the adapter saw it.
type Problem struct {
	// Provider names the adapter ("openai", "anthropic").
	Provider string
	// Status is the HTTP status, 0 when no response arrived.
	Status int
	// Header is the response header, nil when no response arrived.
	Header http.Header
	// Type and Code are the provider's error type and code
	// ("invalid_request_error", "context_length_exceeded"), if any.
	Type, Code string
	// Message is the provider's error message, if any.
	Message string
	// Err is the underlying error.
	Err error
}

// maxMessage bounds the provider text kept in [model.Error.Message].
const maxMessage = 400

// Classify returns the [*model.Error] for p. The rules, applied in order:
//
//   - 413, the OpenAI code context_length_exceeded, or a message saying the
//     prompt exceeds the context window (Anthropic "prompt is too long",
//     OpenAI/vLLM/DeepSeek "maximum context length") → KindContextOverflow;
//   - 429, 529 or the Anthropic type overloaded_error → KindRateLimited,
//     with RetryAfter from the retry-after-ms / retry-after headers;
//   - 401, 403 → KindAuth;
//   - 408, 409, 5xx → KindRetryable (what the SDKs themselves retry);
//   - any other 4xx → KindInvalidRequest;
//   - no status at all (connection refused, reset, TLS) → KindRetryable.
func Classify(p Problem) *model.Error {
	e := &model.Error{Provider: p.Provider, StatusCode: p.Status, Err: p.Err}
	e.Message = safeText(p)
	switch {
	case p.Status == http.StatusRequestEntityTooLarge || (p.Status >= 400 && p.Status < 500 && IsOverflow(p.Code, p.Message)):
		e.Kind = model.KindContextOverflow
	case p.Status == http.StatusTooManyRequests || p.Status == 529 || p.Type == "overloaded_error":
		e.Kind = model.KindRateLimited
		e.RetryAfter = RetryAfter(p.Header, time.Now())
	case p.Status == http.StatusUnauthorized || p.Status == http.StatusForbidden:
		e.Kind = model.KindAuth
	case p.Status == http.StatusRequestTimeout || p.Status == http.StatusConflict || p.Status >= 500:
		e.Kind = model.KindRetryable
		e.RetryAfter = RetryAfter(p.Header, time.Now())
	case p.Status >= 400:
		e.Kind = model.KindInvalidRequest
	default:
		e.Kind = model.KindRetryable
	}
	return e
}

// Transport classifies an error that came without an HTTP response. A
// cancelled or expired ctx gives KindUnknown wrapping the context's cause
// (so errors.Is(err, context.Canceled) holds); an [*model.Error] already in
// err's chain (a stall from the idle transport) is kept, with provider
// set; anything else is a connection failure, KindRetryable.
func Transport(ctx context.Context, provider string, err error) *model.Error {
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		return &model.Error{Kind: model.KindUnknown, Provider: provider, Message: "request canceled: " + cause.Error(), Err: errors.Join(cause, err)}
	}
	var me *model.Error
	if errors.As(err, &me) {
		c := *me
		c.Provider = provider
		return &c
	}
	return &model.Error{Kind: model.KindRetryable, Provider: provider, Message: "connection failed: " + redact.Text(err.Error()), Err: err}
}

// overflowText matches the context-window errors of the providers we know:
// Anthropic "prompt is too long: 208732 tokens > 200000 maximum" and
// "input length and `max_tokens` exceed context limit", OpenAI, vLLM and
// DeepSeek "This model's maximum context length is 65536 tokens", llama.cpp
// "exceeds the available context size", and "context window" phrasings.
var overflowText = lazy.Regexp(`(?i)prompt is too long|maximum context length|context length exceeded|context_length_exceeded|exceeds? (the )?(available )?context (size|window|limit)|exceed context limit|too many tokens|input is too long`)

// IsOverflow reports whether an error code or message says the prompt does
// not fit the model's context window.
func IsOverflow(code, message string) bool {
	return code == "context_length_exceeded" || code == "prompt_too_long" || overflowText().MatchString(message)
}

// RetryAfter returns the delay a response asks for: retry-after-ms in
// milliseconds, else retry-after in seconds or as an HTTP date (RFC 9110
// section 10.2.3), relative to now. It returns 0 when there is none or the
// value is malformed or in the past.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 && ms < 1e12 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 || s > 1e9 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// safeText is the user-safe summary of p: type, code and message, with key
// shapes redacted and the length bounded.
func safeText(p Problem) string {
	var parts []string
	for _, s := range []string{p.Type, p.Code} {
		if s != "" && !strings.Contains(strings.Join(parts, " "), s) {
			parts = append(parts, redact.Text(s))
		}
	}
	msg := strings.TrimSpace(p.Message)
	if msg == "" && p.Status != 0 {
		msg = http.StatusText(p.Status)
	}
	if msg != "" {
		parts = append(parts, redact.Text(msg))
	}
	// Each part alone: a code such as invalid_api_key before ": " is no
	// assignment of a key.
	s := strings.Join(parts, ": ")
	if len(s) > maxMessage {
		s = s[:maxMessage] + "…"
	}
	return s
}

// Middleware is the shape of an SDK middleware; both SDKs declare their
// option.Middleware as an alias of this function type.
type Middleware = func(*http.Request, func(*http.Request) (*http.Response, error)) (*http.Response, error)

// StopStallRetry returns a per-call SDK middleware that ends the SDK's own
// retry loop after a stall.
//
// The idle transport (package model/idle) already repeats a stalled
// request StallRetries times; without this middleware the SDK would take
// its final [model.KindStalled] error for a connection error and run the
// whole cycle again MaxRetries times. The middleware stores the stall in *stall and
// answers the SDK with a synthetic 504 carrying "x-should-retry: false",
// which both SDKs honour; the adapter then returns *stall instead of the
// SDK's error. Every failed attempt (status >= 400 or transport error) is
// logged at debug level with the model name, so retries done by the SDK are
// visible.
func StopStallRetry(stall *error, logger *slog.Logger, modelName string) Middleware {
	return func(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
		res, err := next(req)
		var me *model.Error
		if err != nil && errors.As(err, &me) && me.Kind == model.KindStalled {
			*stall = me
			return &http.Response{
				Status:     "504 Gateway Timeout",
				StatusCode: http.StatusGatewayTimeout,
				Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				Header: http.Header{
					"Content-Type":   {"application/json"},
					"X-Should-Retry": {"false"},
				},
				Body:    http.NoBody,
				Request: req,
			}, nil
		}
		switch {
		case err != nil:
			logger.Debug("model http attempt failed: "+redact.Text(err.Error()), "model", modelName)
		case res.StatusCode >= 400:
			logger.Debug(fmt.Sprintf("model http attempt failed: HTTP %d", res.StatusCode), "model", modelName)
		}
		return res, err
	}
}

// Observe returns inner wrapped so that each failed attempt the SDK will
// repeat is told to obs ([model.Observer.Retry]) before the SDK waits:
// HTTP 408, 409, 429 and 5xx and connection errors, unless the response
// says x-should-retry: false (a stall, see [StopStallRetry]), while
// attempts remain of the 1+maxRetries the SDK makes. The wait named is
// the provider's Retry-After when it gave one, else 0 (the SDK's own
// backoff, under a second at first). A Retry-After above maxWait (when
// positive) is not told: the SDK gives up rather than wait that long.
// A nil obs returns inner.
func Observe(obs *model.Observer, maxRetries int, maxWait time.Duration, inner Middleware) Middleware {
	if obs == nil {
		return inner
	}
	attempt := 1
	return func(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
		res, err := inner(req, next)
		if attempt > maxRetries || req.Context().Err() != nil {
			return res, err
		}
		var r model.Retry
		switch {
		case err != nil:
			r = model.Retry{Reason: model.RetryReason(0)}
		case res.Header.Get("X-Should-Retry") == "false":
			return res, err
		case res.StatusCode == 408 || res.StatusCode == 409 || res.StatusCode == 429 || res.StatusCode >= 500:
			r = model.Retry{Status: res.StatusCode, Reason: model.RetryReason(res.StatusCode), Wait: RetryAfter(res.Header, time.Now())}
			if maxWait > 0 && r.Wait > maxWait {
				return res, err
			}
		default:
			return res, err
		}
		attempt++
		r.Attempt = attempt
		obs.OnRetry(r)
		return res, err
	}
}

// WholeAnswer returns a middleware for a streaming request that keeps, in
// *whole, the body of an HTTP 200 answer that is not an event stream (a
// server that ignores "stream": true and sends the whole answer, or an
// error page), and hands the SDK an empty event stream in its place: the
// adapter then decodes *whole as a whole answer (or fails it as
// unusable). Bodies over 64 MiB are cut.
func WholeAnswer(whole *[]byte) Middleware {
	return func(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
		res, err := next(req)
		if err != nil || res.StatusCode != http.StatusOK {
			return res, err
		}
		if mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); mt == "text/event-stream" {
			return res, err
		}
		b, rerr := io.ReadAll(io.LimitReader(res.Body, 64<<20))
		res.Body.Close()
		if rerr != nil {
			return nil, rerr
		}
		*whole = b
		res.Header = res.Header.Clone()
		res.Header.Set("Content-Type", "text/event-stream")
		res.Body = io.NopCloser(bytes.NewReader(nil))
		res.ContentLength = 0
		return res, nil
	}
}

// Chain returns outer calling inner around next.
func Chain(outer, inner Middleware) Middleware {
	return func(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
		return outer(req, func(r *http.Request) (*http.Response, error) { return inner(r, next) })
	}
}
