package anthropic_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/anthropic"
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

// serveSequence answers the i-th request with cs[min(i, len-1)].
func serveSequence(t *testing.T, cs ...cassette) (*recorder, *httptest.Server) {
	t.Helper()
	rec := &recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
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

// TestStreamRecorded serves real recorded Messages API event streams:
// the observer is told the text as it arrives and each tool call, and
// Generate returns the whole message (the SDK's accumulation).
func TestStreamRecorded(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		file   string
		want   *model.Response
		pieces int
		calls  []string
	}{
		{"stream_text_tool_use.json", &model.Response{
			Message: model.Message{Role: model.RoleAssistant, Content: "I'll update the issue list for you.",
				ToolCalls: []model.ToolCall{{ID: "toolu_01QE1WLsSVp5hy5Q3GmGTmjP", Name: "updateIssueList", Arguments: "{}"}}},
			Usage: model.Usage{InputTokens: 565, OutputTokens: 48}, Model: "claude-sonnet-4-5-20250929", ID: "msg_01GE2RKp1VYsPzdFs3sS9z5S", StopReason: "tool_calls",
		}, 2, []string{"updateIssueList"}},
		{"stream_tool_use.json", &model.Response{
			Message: model.Message{Role: model.RoleAssistant,
				ToolCalls: []model.ToolCall{{ID: "toolu_019Zvehfe1XQWweT1pm7okyt", Name: "weather", Arguments: `{"location":"San Francisco"}`}}},
			Usage: model.Usage{InputTokens: 843, OutputTokens: 28}, Model: "claude-haiku-4-5-20251001", ID: "msg_01CD3XaZfhNabxRt1SG5ybtK", StopReason: "tool_calls",
		}, 0, []string{"weather"}},
	} {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			rec, srv := serveSequence(t, loadCassette(t, tt.file))
			m := newModel(t, srv, anthropic.Options{})
			var w watch
			resp, err := m.Generate(model.WithObserver(context.Background(), w.observer()), weatherRequest())
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
				Stream bool `json:"stream"`
			}
			if err := json.Unmarshal(rec.bodies[0], &body); err != nil || !body.Stream {
				t.Errorf("request %s: want stream (%v)", rec.bodies[0], err)
			}
		})
	}
}

// TestStreamSaysRetries: an overload before the stream is repeated by
// the SDK, and the observer is told first.
func TestStreamSaysRetries(t *testing.T) {
	t.Parallel()
	over := loadCassette(t, "error_529_overloaded.json")
	over.Header["Retry-After-Ms"] = "5" // keeps the test quick
	delete(over.Header, "Retry-After")
	rec, srv := serveSequence(t, over, loadCassette(t, "stream_tool_use.json"))
	m := newModel(t, srv, anthropic.Options{MaxRetries: 2})
	var w watch
	resp, err := m.Generate(model.WithObserver(context.Background(), w.observer()), weatherRequest())
	if err != nil {
		t.Fatal(err)
	}
	if rec.count() != 2 || resp.Usage.OutputTokens != 28 {
		t.Fatalf("%d requests, usage %+v", rec.count(), resp.Usage)
	}
	want := []model.Retry{{Attempt: 2, Status: 529, Wait: 5 * time.Millisecond, Reason: "overloaded"}}
	if d := cmp.Diff(want, w.retries); d != "" {
		t.Errorf("retries told (-want +got):\n%s", d)
	}
}
