package modeltest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/model"
)

// SecretKey is the API key a factory passed to [Run] or [RunErrors] should
// configure its provider with: the suites fail when an error text contains
// it, since [model.Error] text must be safe to show.
const SecretKey = "sk-keel-conformance-5ecret-0123456789abcdef"

// Tools returns the tools every conformance request offers, sorted by name:
// "bash" ({"command": string}) and "echo" ({"text": string}).
func Tools() []model.ToolSpec {
	return []model.ToolSpec{
		{Name: "bash", Description: "Run a shell command and return its output.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`)},
		{Name: "echo", Description: "Return the text.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)},
	}
}

// FirstRequest returns the first request of every conformance check: a
// system prompt, one user message and [Tools].
func FirstRequest() *model.Request {
	return &model.Request{
		System:          "You are a conformance test. Use a tool.",
		Messages:        []model.Message{{Role: model.RoleUser, Content: "Call a tool, then say done."}},
		Tools:           Tools(),
		MaxOutputTokens: 256,
	}
}

// Run checks the behaviour every [model.Model] shares. newModel must return
// a fresh model (a new script, a new fake server...) that answers
// [FirstRequest] with a turn calling at least one tool of [Tools], and the
// follow-up request (that turn, a result for each call, a user message)
// with any turn or [model.KindExhausted]. Run checks that:
//
//   - a response is an assistant message whose tool calls have non-empty,
//     unique ids and names, with consistent usage (cached and cache-write
//     tokens within InputTokens, nothing negative);
//   - Generate does not modify its request;
//   - the model accepts its own answer back as history, with tool results
//     that are errors or contain NUL and invalid UTF-8 bytes;
//   - a cancelled context gives an error that wraps context.Canceled;
//   - concurrent calls are safe (run with -race) and fail, if at all, with
//     a classified [*model.Error].
func Run(t *testing.T, newModel func(t *testing.T) model.Model) {
	t.Helper()
	t.Run("FirstTurn", func(t *testing.T) {
		m := newModel(t)
		req := FirstRequest()
		before := CloneRequest(req)
		resp, err := m.Generate(t.Context(), req)
		if err != nil {
			t.Fatalf("Generate(first request) error = %v (kind %s)", err, model.KindOf(err))
		}
		if diff := cmp.Diff(before, req); diff != "" {
			t.Errorf("Generate modified its request (-before +after):\n%s", diff)
		}
		if err := checkResponse(resp); err != nil {
			t.Error(err)
		}
		if len(resp.Message.ToolCalls) == 0 {
			t.Fatalf("first answer has no tool call; the factory must script one (content %q)", resp.Message.Content)
		}
		for _, c := range resp.Message.ToolCalls {
			if c.Name != "bash" && c.Name != "echo" {
				t.Errorf("first answer calls %q, which the request does not offer", c.Name)
			}
		}
	})
	t.Run("RoundTrip", func(t *testing.T) {
		m := newModel(t)
		req := FirstRequest()
		resp, err := m.Generate(t.Context(), req)
		if err != nil {
			t.Fatalf("Generate(first request) error = %v", err)
		}
		req.Messages = append(req.Messages, resp.Message)
		for i, c := range resp.Message.ToolCalls {
			res := model.Message{Role: model.RoleTool, ToolCallID: c.ID, Content: "ok: bytes A\x00B and \xff\xfe end"}
			if i == 0 {
				res.IsError, res.Content = true, "exit status 1: command failed"
			}
			req.Messages = append(req.Messages, res)
		}
		req.Messages = append(req.Messages, model.Message{Role: model.RoleUser, Content: "Now say done."})
		before := CloneRequest(req)
		resp2, err := m.Generate(t.Context(), req)
		if diff := cmp.Diff(before, req); diff != "" {
			t.Errorf("Generate modified its request (-before +after):\n%s", diff)
		}
		switch model.KindOf(err) {
		case model.KindExhausted:
			t.Logf("follow-up: %v (accepted: the model has a single turn)", err)
			return
		case model.KindUnknown:
			if err != nil {
				t.Fatalf("follow-up error is not a classified *model.Error: %v", err)
			}
		default:
			t.Fatalf("follow-up with the model's own answer as history failed: %v (kind %s)", err, model.KindOf(err))
		}
		if err := checkResponse(resp2); err != nil {
			t.Error(err)
		}
	})
	t.Run("Canceled", func(t *testing.T) {
		m := newModel(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		resp, err := m.Generate(ctx, FirstRequest())
		if err == nil {
			t.Fatalf("Generate(canceled ctx) = %+v, nil; want an error", resp)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Generate(canceled ctx) error = %v; want one wrapping context.Canceled", err)
		}
	})
	t.Run("Concurrent", func(t *testing.T) {
		m := newModel(t)
		const n = 4
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				resp, err := m.Generate(t.Context(), FirstRequest())
				if err != nil {
					var me *model.Error
					if !errors.As(err, &me) || me.Kind == model.KindUnknown {
						errs[i] = fmt.Errorf("call %d: unclassified error %v", i, err)
					}
					return
				}
				if err := checkResponse(resp); err != nil {
					errs[i] = fmt.Errorf("call %d: %w", i, err)
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Error(err)
		}
	})
}

// checkResponse returns the violations of the response invariants.
func checkResponse(resp *model.Response) error {
	if resp == nil {
		return errors.New("Generate returned a nil response and a nil error")
	}
	var errs []error
	m := resp.Message
	if m.Role != model.RoleAssistant {
		errs = append(errs, fmt.Errorf("response role = %q, want assistant", m.Role))
	}
	if m.ToolCallID != "" || m.IsError {
		errs = append(errs, fmt.Errorf("assistant message has tool_call_id %q / is_error %v", m.ToolCallID, m.IsError))
	}
	seen := map[string]bool{}
	for i, c := range m.ToolCalls {
		if c.ID == "" || c.Name == "" {
			errs = append(errs, fmt.Errorf("tool call %d has id %q, name %q: both are required", i, c.ID, c.Name))
		}
		if seen[c.ID] {
			errs = append(errs, fmt.Errorf("tool call id %q is repeated", c.ID))
		}
		seen[c.ID] = true
	}
	u := resp.Usage
	if u.InputTokens < 0 || u.OutputTokens < 0 || u.CachedInputTokens < 0 || u.CacheWriteTokens < 0 {
		errs = append(errs, fmt.Errorf("negative usage %+v", u))
	}
	if u.CachedInputTokens+u.CacheWriteTokens > u.InputTokens {
		errs = append(errs, fmt.Errorf("usage %+v: cached + cache-write tokens exceed InputTokens, which must count every prompt token", u))
	}
	return errors.Join(errs...)
}

// ErrorKinds are the kinds [RunErrors] asks a factory to simulate.
var ErrorKinds = []model.ErrorKind{
	model.KindRetryable, model.KindRateLimited, model.KindAuth, model.KindContextOverflow,
	model.KindInvalidRequest, model.KindStalled, model.KindExhausted, model.KindMismatch,
}

var stallText = regexp.MustCompile(`no bytes for \S+ on \d+ attempts?`)

// RunErrors checks error classification. For each kind in [ErrorKinds],
// newFailing returns a fresh model whose next Generate of [FirstRequest]
// fails for that reason (a 429 with a Retry-After header, a 401, an
// overflow error, a response that stalls...), or nil when the model cannot
// fail that way (the kind is skipped). RunErrors checks that the error is
// an [*model.Error] of that kind with a provider name, that errors.Is
// matches it by kind, that its text names the kind and does not contain
// [SecretKey], that a rate limit carries a positive RetryAfter, and that a
// stall says "no bytes for D on N attempts".
func RunErrors(t *testing.T, newFailing func(t *testing.T, kind model.ErrorKind) model.Model) {
	t.Helper()
	for _, kind := range ErrorKinds {
		t.Run(kind.String(), func(t *testing.T) {
			m := newFailing(t, kind)
			if m == nil {
				t.Skipf("the model cannot fail with %s", kind)
			}
			resp, err := m.Generate(t.Context(), FirstRequest())
			if err == nil {
				t.Fatalf("Generate = %+v, nil; want a %s error", resp, kind)
			}
			var me *model.Error
			if !errors.As(err, &me) {
				t.Fatalf("Generate error %v (%T) is not a *model.Error", err, err)
			}
			var errs []error
			if me.Kind != kind {
				errs = append(errs, fmt.Errorf("kind = %s, want %s (error %v)", me.Kind, kind, err))
			}
			if me.Provider == "" {
				errs = append(errs, errors.New("error has no Provider"))
			}
			if !errors.Is(err, &model.Error{Kind: kind}) {
				errs = append(errs, fmt.Errorf("errors.Is(err, &model.Error{Kind: %s}) = false", kind))
			}
			if !strings.Contains(err.Error(), kind.String()) {
				errs = append(errs, fmt.Errorf("error text %q does not name the kind %s", err, kind))
			}
			if strings.Contains(err.Error(), SecretKey) || strings.Contains(me.Message, SecretKey) {
				errs = append(errs, fmt.Errorf("error text contains the API key: %q", err))
			}
			if me.Kind.Retryable() != kind.Retryable() {
				errs = append(errs, fmt.Errorf("Retryable() = %v, want %v", me.Kind.Retryable(), kind.Retryable()))
			}
			if kind == model.KindRateLimited && me.RetryAfter <= 0 {
				errs = append(errs, fmt.Errorf("rate limit has RetryAfter %v, want the provider's delay", me.RetryAfter))
			}
			if kind == model.KindStalled && !stallText.MatchString(me.Message) {
				errs = append(errs, fmt.Errorf("stall message %q does not say \"no bytes for D on N attempts\"", me.Message))
			}
			if err := errors.Join(errs...); err != nil {
				t.Error(err)
			}
		})
	}
}
