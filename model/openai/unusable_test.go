package openai_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/openai"
)

// An HTTP 200 whose body the runtime cannot use (no choices, an error
// object, not JSON: proxies and some OpenAI-compatible servers answer so)
// is repeated as often as MaxRetries says, which the SDK does not do; the
// provider's own message is kept when it gives up.
func TestUnusableAnswersAreRetried(t *testing.T) {
	t.Parallel()
	tr := loadTrajectory(t, "deepseek_chat_dev.traj.json")
	first, _ := tr.Turn(0)
	unusable := []string{
		`{"id":"x","object":"chat.completion","choices":[]}`,
		`<html><body>502 Bad Gateway</body></html>`,
		`{"error":{"message":"upstream overloaded, try again","type":"server_error"}}`,
		`null`,
		`{"id":"x","choices":[null]}`,
		`{"id":"x","choices":[{"index":0}]}`,
		`{"id":"x","choices":[{"index":0,"message":null}]}`,
	}
	serve := func(t *testing.T, bodies []string) (*atomic.Int32, *httptest.Server) {
		var n atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			i := int(n.Add(1)) - 1
			w.Header().Set("Content-Type", "application/json")
			if i < len(bodies) {
				w.Write([]byte(bodies[i]))
				return
			}
			w.Write(first.Response)
		}))
		t.Cleanup(srv.Close)
		return &n, srv
	}
	noWait := func(int) time.Duration { return 0 }

	t.Run("recovers", func(t *testing.T) {
		t.Parallel()
		n, srv := serve(t, unusable)
		m := newModel(t, srv, &openai.Options{Model: "deepseek-chat", APIKey: "k", MaxRetries: len(unusable), RetryBackoff: noWait})
		resp, err := m.Generate(t.Context(), userRequest())
		if err != nil {
			t.Fatalf("Generate: %v", err)
		}
		if got := n.Load(); int(got) != len(unusable)+1 || len(resp.Message.ToolCalls) != len(first.Message.ToolCalls) {
			t.Errorf("%d requests, %d tool calls; want %d and the recorded answer", got, len(resp.Message.ToolCalls), len(unusable)+1)
		}
	})
	t.Run("gives up with the provider's words", func(t *testing.T) {
		t.Parallel()
		n, srv := serve(t, []string{unusable[2], unusable[2], unusable[2], unusable[2]})
		m := newModel(t, srv, &openai.Options{Model: "deepseek-chat", APIKey: "k", MaxRetries: 1, RetryBackoff: noWait})
		_, err := m.Generate(t.Context(), userRequest())
		if model.KindOf(err) != model.KindRetryable || !strings.Contains(err.Error(), "upstream overloaded, try again") || !strings.Contains(err.Error(), "after 2 attempts") {
			t.Errorf("Generate error = %v (%s)", err, model.KindOf(err))
		}
		if got := n.Load(); got != 2 {
			t.Errorf("%d requests, want 2", got)
		}
	})
	t.Run("no retries", func(t *testing.T) {
		t.Parallel()
		n, srv := serve(t, unusable)
		m := newModel(t, srv, &openai.Options{Model: "deepseek-chat", APIKey: "k", MaxRetries: -1, RetryBackoff: noWait})
		if _, err := m.Generate(t.Context(), userRequest()); err == nil || n.Load() != 1 {
			t.Errorf("Generate = %v after %d requests, want an error after 1", err, n.Load())
		}
	})
}

// An error status whose body is not the API's error object is reported
// with its status, not as an unusable HTTP 200.
func TestErrorStatusWithForeignBody(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		status int
		kind   model.ErrorKind
	}{
		{500, model.KindRetryable},
		{400, model.KindInvalidRequest},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(tt.status)
			w.Write([]byte(`{"error":"x"}`))
		}))
		t.Cleanup(srv.Close)
		m := newModel(t, srv, &openai.Options{Model: "deepseek-chat", APIKey: "k", MaxRetries: -1, RetryBackoff: func(int) time.Duration { return 0 }})
		_, err := m.Generate(t.Context(), userRequest())
		var me *model.Error
		if !errors.As(err, &me) || me.StatusCode != tt.status || me.Kind != tt.kind {
			t.Errorf("HTTP %d: Generate error = %v (%+v), want status %d and kind %s", tt.status, err, me, tt.status, tt.kind)
		}
	}
}
