package openai_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/openai"
)

// raw is the body as sent: a JSON string body (an event stream) is its
// text, anything else its JSON.
func (c cassette) raw() []byte {
	var s string
	if json.Unmarshal(c.Body, &s) == nil {
		return []byte(s)
	}
	return c.Body
}

// watch is an [model.Observer] that keeps what it was told.
type watch struct {
	mu      sync.Mutex
	text    strings.Builder
	pieces  int
	calls   []string
	retries []model.Retry
}

func (w *watch) observer() *model.Observer {
	return &model.Observer{
		Text: func(s string) { w.mu.Lock(); w.text.WriteString(s); w.pieces++; w.mu.Unlock() },
		Call: func(n string) { w.mu.Lock(); w.calls = append(w.calls, n); w.mu.Unlock() },
		Retry: func(r model.Retry) {
			w.mu.Lock()
			w.retries = append(w.retries, r)
			w.mu.Unlock()
		},
	}
}

// serveSequence answers the i-th request with cs[min(i, len-1)] and keeps
// the request bodies.
func serveSequence(t *testing.T, cs ...cassette) (*wire, *httptest.Server) {
	t.Helper()
	rec := &wire{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.record(r)
		c := cs[min(rec.count()-1, len(cs)-1)]
		for k, v := range c.Header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(c.Status)
		w.Write(c.raw())
	}))
	t.Cleanup(srv.Close)
	return rec, srv
}

// TestStreamRecorded serves real recorded OpenAI event streams: the
// observer is told the text as it arrives and the tool call, and Generate
// returns the same whole response a non-streaming call would map.
func TestStreamRecorded(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		file   string
		want   *model.Response
		pieces int
		calls  []string
	}{
		{"stream_text.json", &model.Response{
			Message: model.Message{Role: model.RoleAssistant, Content: "I'm unable to provide real-time weather updates. To get the current weather in San Francisco, I recommend checking a reliable weather website or a weather app."},
			Usage:   model.Usage{InputTokens: 14, OutputTokens: 30}, Model: "gpt-4o-2024-08-06", ID: "chatcmpl-ABfw031mOJeYCSHe4yI2ZjOA6kMJL", StopReason: "stop",
		}, 30, nil},
		{"stream_tool_call.json", &model.Response{
			Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "call_CTf1nWJLqSeRgDqaCG27xZ74", Name: "get_weather", Arguments: `{"city":"San Francisco","state":"CA"}`}}},
			Usage:   model.Usage{InputTokens: 48, OutputTokens: 19}, Model: "gpt-4o-2024-08-06", ID: "chatcmpl-ABfwCgi41eStOcARjZq97ohCEGBPO", StopReason: "tool_calls",
		}, 0, []string{"get_weather"}},
	} {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			rec, srv := serveSequence(t, loadCassette(t, tt.file))
			m := newModel(t, srv, &openai.Options{Model: "gpt-4o-2024-08-06", APIKey: "sk-test"})
			var w watch
			resp, err := m.Generate(model.WithObserver(context.Background(), w.observer()), &model.Request{
				Messages: []model.Message{{Role: model.RoleUser, Content: "What's the weather like in SF?"}},
			})
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, resp); d != "" {
				t.Errorf("response (-want +got):\n%s", d)
			}
			if w.text.String() != resp.Message.Content || w.pieces != tt.pieces {
				t.Errorf("streamed %d pieces %q, want %d adding up to the content", w.pieces, w.text.String(), tt.pieces)
			}
			if d := cmp.Diff(tt.calls, w.calls); d != "" {
				t.Errorf("calls told (-want +got):\n%s", d)
			}
			var body struct {
				Stream        bool `json:"stream"`
				StreamOptions struct {
					IncludeUsage bool `json:"include_usage"`
				} `json:"stream_options"`
			}
			if err := json.Unmarshal(rec.bodies[0], &body); err != nil || !body.Stream || !body.StreamOptions.IncludeUsage {
				t.Errorf("request %s: want stream with include_usage (%v)", rec.bodies[0], err)
			}
		})
	}
}

// TestStreamSaysRetries: a rate limit before the stream is repeated by
// the SDK, and the observer is told first, with the provider's wait.
func TestStreamSaysRetries(t *testing.T) {
	t.Parallel()
	limited := loadCassette(t, "error_429_rate_limit.json")
	// The recorded Retry-After is 20 s; the same header in milliseconds
	// keeps the test quick.
	limited.Header = map[string]string{"Content-Type": "application/json", "Retry-After-Ms": "5"}
	rec, srv := serveSequence(t, limited, loadCassette(t, "stream_text.json"))
	m := newModel(t, srv, &openai.Options{Model: "gpt-4o", APIKey: "sk-test", MaxRetries: 3})
	var w watch
	resp, err := m.Generate(model.WithObserver(context.Background(), w.observer()), &model.Request{
		Messages: []model.Message{{Role: model.RoleUser, Content: "What's the weather like in SF?"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if rec.count() != 2 || resp.Usage.OutputTokens != 30 {
		t.Fatalf("%d requests, usage %+v", rec.count(), resp.Usage)
	}
	want := []model.Retry{{Attempt: 2, Status: 429, Wait: 5 * time.Millisecond, Reason: "rate limited"}}
	if d := cmp.Diff(want, w.retries); d != "" {
		t.Errorf("retries told (-want +got):\n%s", d)
	}
}

// TestStreamNotAStream: a 200 answer that is no event stream is retried
// as an unusable answer (said to the observer), then fails retryable.
func TestStreamNotAStream(t *testing.T) {
	t.Parallel()
	page := cassette{Status: 200, Header: map[string]string{"Content-Type": "text/html"}, Body: json.RawMessage(`"<html><body>Bad gateway</body></html>"`)}
	rec, srv := serveSequence(t, page)
	m := newModel(t, srv, &openai.Options{Model: "gpt-4o", APIKey: "sk-test", MaxRetries: 1, RetryBackoff: func(int) time.Duration { return 0 }})
	var w watch
	_, err := m.Generate(model.WithObserver(context.Background(), w.observer()), &model.Request{
		Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}},
	})
	if model.KindOf(err) != model.KindRetryable {
		t.Fatalf("err = %v (%v), want retryable", err, model.KindOf(err))
	}
	if rec.count() != 2 || len(w.retries) != 1 || w.retries[0].Reason != "unusable answer" {
		t.Errorf("%d requests, retries told %+v", rec.count(), w.retries)
	}
}

// TestStreamTellsBeforeTheEnd: the observer gets the first piece of text
// while the rest of the answer has not been sent: the server holds the
// recorded stream after its first text chunk until the observer has it.
func TestStreamTellsBeforeTheEnd(t *testing.T) {
	t.Parallel()
	body := string(loadCassette(t, "stream_text.json").raw())
	events := strings.SplitAfter(body, "\n\n")
	seen := make(chan struct{})
	var early atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i, e := range events {
			io.WriteString(w, e)
			w.(http.Flusher).Flush()
			if i == 1 { // the first chunk with text ("I'm")
				select {
				case <-seen:
					early.Store(true)
				case <-time.After(30 * time.Second):
				}
			}
		}
	}))
	t.Cleanup(srv.Close)
	m := newModel(t, srv, &openai.Options{Model: "gpt-4o", APIKey: "sk-test"})
	var once sync.Once
	obs := &model.Observer{Text: func(string) { once.Do(func() { close(seen) }) }}
	if _, err := m.Generate(model.WithObserver(context.Background(), obs), &model.Request{
		Messages: []model.Message{{Role: model.RoleUser, Content: "What's the weather like in SF?"}},
	}); err != nil {
		t.Fatal(err)
	}
	if !early.Load() {
		t.Error("the observer was told nothing before the whole answer was sent")
	}
}
