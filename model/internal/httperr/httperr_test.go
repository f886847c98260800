package httperr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/model"
)

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name string
		h    http.Header
		want time.Duration
	}{
		{"none", http.Header{}, 0},
		{"nil", nil, 0},
		{"seconds", http.Header{"Retry-After": {"20"}}, 20 * time.Second},
		{"fractional seconds", http.Header{"Retry-After": {"1.5"}}, 1500 * time.Millisecond},
		{"milliseconds win", http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"20"}}, 250 * time.Millisecond},
		{"http date", http.Header{"Retry-After": {"Mon, 30 Nov 2026 12:00:30 GMT"}}, 30 * time.Second},
		{"date in the past", http.Header{"Retry-After": {"Mon, 30 Nov 2026 11:00:00 GMT"}}, 0},
		{"garbage", http.Header{"Retry-After": {"soon"}}, 0},
		{"negative", http.Header{"Retry-After": {"-3"}}, 0},
		{"bad ms falls back", http.Header{"Retry-After-Ms": {"x"}, "Retry-After": {"2"}}, 2 * time.Second},
	} {
		if got := RetryAfter(tt.h, now); got != tt.want {
			t.Errorf("%s: RetryAfter(%v) = %v, want %v", tt.name, tt.h, got, tt.want)
		}
	}
}

func TestIsOverflow(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		code, msg string
		want      bool
	}{
		{"context_length_exceeded", "", true},
		{"", "prompt is too long: 208732 tokens > 200000 maximum", true},
		{"", "input length and `max_tokens` exceed context limit: 195000 + 8192 > 200000", true},
		{"", "This model's maximum context length is 65536 tokens. However, you requested 70312 tokens", true},
		{"", "the request exceeds the available context size, try increasing it", true},
		{"", "max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens", false},
		{"invalid_api_key", "Incorrect API key provided", false},
		{"", "messages: roles must alternate", false},
	} {
		if got := IsOverflow(tt.code, tt.msg); got != tt.want {
			t.Errorf("IsOverflow(%q, %q) = %v, want %v", tt.code, tt.msg, got, tt.want)
		}
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		p    Problem
		kind model.ErrorKind
	}{
		{Problem{Status: 429, Header: http.Header{"Retry-After": {"3"}}}, model.KindRateLimited},
		{Problem{Status: 529, Type: "overloaded_error"}, model.KindRateLimited},
		{Problem{Status: 500, Type: "overloaded_error"}, model.KindRateLimited},
		{Problem{Status: 401}, model.KindAuth},
		{Problem{Status: 403}, model.KindAuth},
		{Problem{Status: 413, Type: "request_too_large"}, model.KindContextOverflow},
		{Problem{Status: 400, Message: "prompt is too long: 1 tokens > 0 maximum"}, model.KindContextOverflow},
		{Problem{Status: 400, Code: "context_length_exceeded"}, model.KindContextOverflow},
		{Problem{Status: 400}, model.KindInvalidRequest},
		{Problem{Status: 402, Type: "billing_error"}, model.KindInvalidRequest},
		{Problem{Status: 404}, model.KindInvalidRequest},
		{Problem{Status: 408}, model.KindRetryable},
		{Problem{Status: 409}, model.KindRetryable},
		{Problem{Status: 500}, model.KindRetryable},
		{Problem{Status: 503}, model.KindRetryable},
		{Problem{}, model.KindRetryable},
	} {
		tt.p.Provider = "p"
		e := Classify(tt.p)
		if e.Kind != tt.kind || e.Provider != "p" || e.StatusCode != tt.p.Status {
			t.Errorf("Classify(%+v) = %+v, want kind %s", tt.p, e, tt.kind)
		}
	}
	if e := Classify(Problem{Status: 429, Header: http.Header{"Retry-After": {"3"}}}); e.RetryAfter != 3*time.Second {
		t.Errorf("429 RetryAfter = %v, want 3s", e.RetryAfter)
	}
}

func TestSafeText(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 1000)
	for _, tt := range []struct {
		p    Problem
		want string
	}{
		{Problem{Type: "invalid_request_error", Code: "invalid_api_key", Message: "Incorrect API key provided: sk-proj-abcdefgh1234."}, "invalid_request_error: invalid_api_key: Incorrect API key provided: [REDACTED]."},
		{Problem{Type: "x", Code: "x", Message: "m"}, "x: m"},
		{Problem{Status: 502}, "Bad Gateway"},
		{Problem{Message: "key sk-ant-api03-AAAAAAAAAA leaked"}, "key [REDACTED] leaked"},
		{Problem{Message: long}, long[:maxMessage] + "…"},
	} {
		if got := safeText(tt.p); got != tt.want {
			t.Errorf("safeText(%+v) = %q, want %q", tt.p, got, tt.want)
		}
	}
}

func TestTransport(t *testing.T) {
	t.Parallel()
	stall := &model.Error{Kind: model.KindStalled, Message: "no bytes for 1s on 3 attempts"}
	if e := Transport(t.Context(), "p", fmt.Errorf("post: %w", stall)); e.Kind != model.KindStalled || e.Provider != "p" || stall.Provider != "" {
		t.Errorf("Transport(stall) = %+v (original %+v); want a copy with the provider set", e, stall)
	}
	if e := Transport(t.Context(), "p", errors.New("dial tcp: connection refused")); e.Kind != model.KindRetryable {
		t.Errorf("Transport(refused) = %+v, want retryable", e)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if e := Transport(ctx, "p", errors.New("x")); e.Kind != model.KindUnknown || !errors.Is(e, context.Canceled) {
		t.Errorf("Transport(canceled) = %+v, want unknown wrapping context.Canceled", e)
	}
}

func TestStopStallRetry(t *testing.T) {
	t.Parallel()
	var stall error
	mw := StopStallRetry(&stall, slog.New(slog.DiscardHandler), "m")
	req, _ := http.NewRequest(http.MethodPost, "http://x/", nil)
	want := &model.Error{Kind: model.KindStalled}
	res, err := mw(req, func(*http.Request) (*http.Response, error) { return nil, fmt.Errorf("wrapped: %w", want) })
	if err != nil || res.StatusCode != http.StatusGatewayTimeout || res.Header.Get("X-Should-Retry") != "false" {
		t.Errorf("middleware = %+v, %v; want a synthetic 504 the SDK does not retry", res, err)
	}
	if stall != want {
		t.Errorf("stall = %v, want the transport's error", stall)
	}
	other := errors.New("reset")
	if _, err := mw(req, func(*http.Request) (*http.Response, error) { return nil, other }); err != other {
		t.Errorf("middleware passed %v, want other errors unchanged", err)
	}
}
