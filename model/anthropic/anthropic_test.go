package anthropic_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/anthropic"
	"github.com/keel-run/keel/model/modeltest"
)

// cassette is one documented HTTP response in testdata/.
type cassette struct {
	Source string            `json:"source"`
	Status int               `json:"status"`
	Header map[string]string `json:"header"`
	Body   json.RawMessage   `json:"body"`
}

func loadCassette(t *testing.T, name string) cassette {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var c cassette
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return c
}

func (c cassette) write(w http.ResponseWriter) {
	for k, v := range c.Header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(c.Status)
	w.Write(c.Body)
}

// recorder keeps the requests a test server received.
type recorder struct {
	mu     sync.Mutex
	bodies [][]byte
	heads  []http.Header
	paths  []string
}

func (r *recorder) add(req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bodies = append(r.bodies, b)
	r.heads = append(r.heads, req.Header.Clone())
	r.paths = append(r.paths, req.URL.Path)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.bodies)
}

// serve answers every request with c.
func serve(t *testing.T, c cassette) (*recorder, *httptest.Server) {
	t.Helper()
	rec := &recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		c.write(w)
	}))
	t.Cleanup(srv.Close)
	return rec, srv
}

func newModel(t *testing.T, srv *httptest.Server, o anthropic.Options) *anthropic.Model {
	t.Helper()
	if o.Model == "" {
		o.Model = "claude-sonnet-4-5"
	}
	if o.APIKey == "" {
		o.APIKey = "sk-ant-test"
	}
	o.BaseURL = srv.URL
	m, err := anthropic.New(&o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func weatherRequest() *model.Request {
	return &model.Request{
		System:   "You are a weather bot.",
		Messages: []model.Message{{Role: model.RoleUser, Content: "What is the weather like in San Francisco?"}},
		Tools: []model.ToolSpec{{Name: "get_weather", Description: "Get the current weather in a given location",
			Parameters: json.RawMessage(`{"type":"object","properties":{"location":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["location"]}`)}},
	}
}

func TestResponseMapping(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		file string
		want *model.Response
	}{
		{"tool_use.json", &model.Response{
			Message: model.Message{
				Role:      model.RoleAssistant,
				Content:   "<thinking>I need to use the get_weather, and the user wants SF, which is likely San Francisco, CA.</thinking>",
				ToolCalls: []model.ToolCall{{ID: "toolu_01A09q90qw90lq917835lq9", Name: "get_weather", Arguments: `{"location":"San Francisco, CA","unit":"celsius"}`}},
			},
			// input_tokens 21 + cache_read 188086 + cache_creation 0.
			Usage:      model.Usage{InputTokens: 188107, OutputTokens: 393, CachedInputTokens: 188086},
			Model:      "claude-3-opus-20240229",
			ID:         "msg_01Aq9w938a90dw8q",
			StopReason: "tool_calls",
		}},
		{"text_cache_write.json", &model.Response{
			Message:    model.Message{Role: model.RoleAssistant, Content: "Hi! My name is Claude."},
			Usage:      model.Usage{InputTokens: 188107, OutputTokens: 393, CacheWriteTokens: 188086},
			Model:      "claude-sonnet-4-20250514",
			ID:         "msg_013Zva2CMHLNnXjNJJKqJ2EF",
			StopReason: "stop",
		}},
	} {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			_, srv := serve(t, loadCassette(t, tt.file))
			got, err := newModel(t, srv, anthropic.Options{}).Generate(t.Context(), weatherRequest())
			if err != nil {
				t.Fatalf("Generate error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Generate (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStopReasons(t *testing.T) {
	t.Parallel()
	base := loadCassette(t, "text_cache_write.json")
	for wire, want := range map[string]string{
		"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls", "max_tokens": "length",
		"refusal": "content_filter", "pause_turn": "pause_turn", "model_context_window_exceeded": "length",
	} {
		t.Run(wire, func(t *testing.T) {
			t.Parallel()
			var body map[string]any
			json.Unmarshal(base.Body, &body)
			body["stop_reason"] = wire
			c := base
			c.Body, _ = json.Marshal(body)
			_, srv := serve(t, c)
			got, err := newModel(t, srv, anthropic.Options{}).Generate(t.Context(), weatherRequest())
			if err != nil || got.StopReason != want {
				t.Errorf("stop_reason %s: Generate = %+v, %v; want StopReason %q", wire, got, err, want)
			}
		})
	}
}

// TestRequestBody checks the system prompt, the cache breakpoints, tool
// specs, tool_use blocks, the grouping of consecutive tool results into one
// user message with is_error, and max_tokens.
func TestRequestBody(t *testing.T) {
	t.Parallel()
	temp := 0.25
	req := &model.Request{
		System: "You are Keel.",
		Messages: []model.Message{
			{Role: model.RoleUser, Content: "fix the bug"},
			{Role: model.RoleAssistant, Content: "Let me look.", ToolCalls: []model.ToolCall{
				{ID: "toolu_1", Name: "bash", Arguments: `{"command": "ls"}`},
				{ID: "call_00_x.y", Name: "edit", Arguments: `{"path": "a.txt",`},
			}},
			{Role: model.RoleTool, ToolCallID: "toolu_1", Content: "a.txt\n"},
			{Role: model.RoleTool, ToolCallID: "call_00_x.y", Content: "arguments are not a valid JSON object", IsError: true},
			{Role: model.RoleUser, Content: "also check b.txt"},
			{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "toolu_3", Name: "bash", Arguments: ``}}},
			{Role: model.RoleTool, ToolCallID: "toolu_3", Content: ""},
		},
		Tools: []model.ToolSpec{
			{Name: "bash", Description: "Run a command.", Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"],"additionalProperties":false}`)},
			{Name: "edit", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)},
		},
		Temperature: &temp,
	}
	want := `{
	  "model": "claude-sonnet-4-5",
	  "max_tokens": 8192,
	  "temperature": 0.25,
	  "system": [{"type": "text", "text": "You are Keel.", "cache_control": {"type": "ephemeral"}}],
	  "tools": [
	    {"name": "bash", "description": "Run a command.", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"], "additionalProperties": false}},
	    {"name": "edit", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}, "cache_control": {"type": "ephemeral"}}
	  ],
	  "messages": [
	    {"role": "user", "content": [{"type": "text", "text": "fix the bug"}]},
	    {"role": "assistant", "content": [
	      {"type": "text", "text": "Let me look."},
	      {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}},
	      {"type": "tool_use", "id": "call_00_x_y", "name": "edit", "input": {}}
	    ]},
	    {"role": "user", "content": [
	      {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "a.txt\n"}]},
	      {"type": "tool_result", "tool_use_id": "call_00_x_y", "is_error": true, "content": [{"type": "text", "text": "arguments are not a valid JSON object"}]},
	      {"type": "text", "text": "also check b.txt"}
	    ]},
	    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_3", "name": "bash", "input": {}}]},
	    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_3", "cache_control": {"type": "ephemeral"}}]}
	  ]
	}`
	rec, srv := serve(t, loadCassette(t, "tool_use.json"))
	if _, err := newModel(t, srv, anthropic.Options{APIKey: "sk-ant-key"}).Generate(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	assertJSON(t, rec.bodies[0], want)
	h := rec.heads[0]
	if h.Get("Authorization") != "Bearer sk-ant-key" || h.Get("Anthropic-Version") == "" || rec.paths[0] != "/v1/messages" {
		t.Errorf("request to %s with authorization %q, anthropic-version %q", rec.paths[0], h.Get("Authorization"), h.Get("Anthropic-Version"))
	}
}

func TestMaxTokens(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		opts    int
		request int
		want    float64
	}{
		{"default", 0, 0, 8192},
		{"options", 4096, 0, 4096},
		{"request wins", 4096, 1000, 1000},
		{"large, beyond the SDK's non-streaming estimate", 0, 64000, 64000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec, srv := serve(t, loadCassette(t, "text_cache_write.json"))
			req := weatherRequest()
			req.MaxOutputTokens = tt.request
			if _, err := newModel(t, srv, anthropic.Options{MaxTokens: tt.opts}).Generate(t.Context(), req); err != nil {
				t.Fatal(err)
			}
			var body map[string]any
			json.Unmarshal(rec.bodies[0], &body)
			if body["max_tokens"] != tt.want {
				t.Errorf("max_tokens = %v, want %v", body["max_tokens"], tt.want)
			}
		})
	}
}

func assertJSON(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("request body %q is not JSON: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad expectation: %v", err)
	}
	if diff := cmp.Diff(w, g); diff != "" {
		t.Errorf("request body (-want +got):\n%s", diff)
	}
}

func TestErrorClassification(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		file       string
		kind       model.ErrorKind
		retryAfter time.Duration
		message    string
	}{
		{"error_429_rate_limit.json", model.KindRateLimited, 30 * time.Second, "rate_limit_error: Number of request tokens has exceeded"},
		{"error_529_overloaded.json", model.KindRateLimited, 0, "overloaded_error: Overloaded"},
		{"error_400_prompt_too_long.json", model.KindContextOverflow, 0, "prompt is too long: 208732 tokens > 200000 maximum"},
		{"error_413_request_too_large.json", model.KindContextOverflow, 0, "request_too_large"},
		{"error_401_authentication.json", model.KindAuth, 0, "authentication_error: invalid x-api-key"},
		{"error_400_invalid_request.json", model.KindInvalidRequest, 0, "`tool_use` ids were found without `tool_result` blocks"},
		{"error_500_api_error.json", model.KindRetryable, 0, "api_error: Internal server error"},
	} {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			c := loadCassette(t, tt.file)
			rec, srv := serve(t, c)
			resp, err := newModel(t, srv, anthropic.Options{MaxRetries: -1}).Generate(t.Context(), weatherRequest())
			if resp != nil {
				t.Errorf("Generate returned a response with the error: %+v", resp)
			}
			var me *model.Error
			if !errors.As(err, &me) {
				t.Fatalf("Generate error = %v (%T), want *model.Error", err, err)
			}
			if me.Kind != tt.kind || me.StatusCode != c.Status || me.Provider != "anthropic" || me.RetryAfter != tt.retryAfter {
				t.Errorf("error = %s/%d/%q/%v; want %s/%d/anthropic/%v", me.Kind, me.StatusCode, me.Provider, me.RetryAfter, tt.kind, c.Status, tt.retryAfter)
			}
			if !strings.Contains(me.Message, tt.message) {
				t.Errorf("Message = %q, want it to contain %q", me.Message, tt.message)
			}
			var apiErr *sdk.Error
			if !errors.As(err, &apiErr) {
				t.Error("error does not wrap the SDK's *anthropic.Error")
			}
			if rec.count() != 1 {
				t.Errorf("server saw %d requests, want 1", rec.count())
			}
		})
	}
}

// TestSDKRetries checks that 429 and 529 are retried by the SDK.
func TestSDKRetries(t *testing.T) {
	t.Parallel()
	ok := loadCassette(t, "tool_use.json")
	for _, file := range []string{"error_429_rate_limit.json", "error_529_overloaded.json"} {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			fail := loadCassette(t, file)
			fail.Header["Retry-After-Ms"] = "1" // keep the SDK's wait short
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) == 1 {
					fail.write(w)
					return
				}
				ok.write(w)
			}))
			t.Cleanup(srv.Close)
			resp, err := newModel(t, srv, anthropic.Options{}).Generate(t.Context(), weatherRequest())
			if err != nil || resp.ID != "msg_01Aq9w938a90dw8q" {
				t.Fatalf("Generate = %+v, %v; want the second answer", resp, err)
			}
			if n.Load() != 2 {
				t.Errorf("server saw %d requests, want 2", n.Load())
			}
		})
	}
}

func stallServer(t *testing.T, body []byte) (*atomic.Int32, *httptest.Server) {
	t.Helper()
	var n atomic.Int32
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		w.Write(body[:len(body)/2])
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}))
	t.Cleanup(func() { close(done); srv.Close() })
	return &n, srv
}

func TestStall(t *testing.T) {
	t.Parallel()
	n, srv := stallServer(t, loadCassette(t, "tool_use.json").Body)
	resp, err := newModel(t, srv, anthropic.Options{IdleTimeout: 50 * time.Millisecond}).Generate(t.Context(), weatherRequest())
	if resp != nil {
		t.Fatalf("Generate returned a response from half a body: %+v", resp)
	}
	var me *model.Error
	if !errors.As(err, &me) || me.Kind != model.KindStalled || me.Provider != "anthropic" || me.Message != "no bytes for 50ms on 3 attempts" {
		t.Fatalf("Generate error = %v, want an anthropic stall after 3 attempts", err)
	}
	if n.Load() != 3 {
		t.Errorf("server saw %d requests, want 3 (no SDK retries on top)", n.Load())
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	if _, err := anthropic.New(&anthropic.Options{Model: "claude-sonnet-4-5"}); !errors.Is(err, anthropic.ErrNoAPIKey) || !strings.Contains(err.Error(), "ANTHROPIC_API_KEY") {
		t.Errorf("New without key = %v, want ErrNoAPIKey naming ANTHROPIC_API_KEY", err)
	}
	if _, err := anthropic.New(&anthropic.Options{APIKey: "k"}); !errors.Is(err, anthropic.ErrNoModel) {
		t.Errorf("New without model = %v, want ErrNoModel", err)
	}
	m, err := anthropic.New(&anthropic.Options{Model: "claude-sonnet-4-5", APIKey: "k"})
	if err != nil || m.Name() != "anthropic:claude-sonnet-4-5" {
		t.Errorf("New = %v, %v; want Name anthropic:claude-sonnet-4-5", m, err)
	}
}

func TestNoEnvironment(t *testing.T) {
	// Not parallel: sets the environment, which the library must ignore.
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
	t.Setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
	rec, srv := serve(t, loadCassette(t, "tool_use.json"))
	if _, err := newModel(t, srv, anthropic.Options{APIKey: "sk-ant-given"}).Generate(t.Context(), weatherRequest()); err != nil {
		t.Fatal(err)
	}
	if got := rec.heads[0].Get("Authorization"); got != "Bearer sk-ant-given" {
		t.Errorf("authorization = %q, want the key from Options", got)
	}
}

func TestInvalidRequestIsNotSent(t *testing.T) {
	t.Parallel()
	rec, srv := serve(t, loadCassette(t, "tool_use.json"))
	m := newModel(t, srv, anthropic.Options{})
	for _, req := range []*model.Request{
		{Messages: []model.Message{{Role: "robot", Content: "x"}}},
		{Messages: []model.Message{{Role: model.RoleTool, Content: "x"}}},
		{Messages: []model.Message{{Role: model.RoleUser, Content: "x"}}, Tools: []model.ToolSpec{{Name: "t", Parameters: json.RawMessage(`{"type":"string"}`)}}},
	} {
		if _, err := m.Generate(t.Context(), req); model.KindOf(err) != model.KindInvalidRequest {
			t.Errorf("Generate(%+v) error = %v, want kind invalid_request", req, err)
		}
	}
	if rec.count() != 0 {
		t.Errorf("%d requests reached the server", rec.count())
	}
}

// conformanceServer answers like the API, statelessly: a request without an
// assistant message gets the documented tool_use response (calling the
// conformance tool "echo" instead of get_weather), any later one the
// documented text response.
func conformanceServer(t *testing.T) *httptest.Server {
	t.Helper()
	toolUse := loadCassette(t, "tool_use.json")
	toolUse.Body = bytes.Replace(toolUse.Body, []byte(`"name": "get_weather"`), []byte(`"name": "echo"`), 1)
	toolUse.Body = bytes.Replace(toolUse.Body, []byte(`{"location": "San Francisco, CA", "unit": "celsius"}`), []byte(`{"text": "San Francisco"}`), 1)
	text := loadCassette(t, "text_cache_write.json")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			loadCassette(t, "error_400_invalid_request.json").write(w)
			return
		}
		for _, m := range req.Messages {
			if m.Role == "assistant" {
				text.write(w)
				return
			}
		}
		toolUse.write(w)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestConformance(t *testing.T) {
	t.Parallel()
	srv := conformanceServer(t)
	modeltest.Run(t, func(t *testing.T) model.Model {
		return newModel(t, srv, anthropic.Options{APIKey: modeltest.SecretKey})
	})
}

func TestErrorConformance(t *testing.T) {
	t.Parallel()
	files := map[model.ErrorKind]string{
		model.KindRetryable:       "error_500_api_error.json",
		model.KindRateLimited:     "error_429_rate_limit.json",
		model.KindAuth:            "error_401_authentication.json",
		model.KindContextOverflow: "error_400_prompt_too_long.json",
		model.KindInvalidRequest:  "error_400_invalid_request.json",
	}
	modeltest.RunErrors(t, func(t *testing.T, kind model.ErrorKind) model.Model {
		o := anthropic.Options{APIKey: modeltest.SecretKey, MaxRetries: -1}
		switch {
		case files[kind] != "":
			_, srv := serve(t, loadCassette(t, files[kind]))
			return newModel(t, srv, o)
		case kind == model.KindStalled:
			_, srv := stallServer(t, loadCassette(t, "tool_use.json").Body)
			o.IdleTimeout, o.StallRetries = 20*time.Millisecond, 1
			return newModel(t, srv, o)
		}
		return nil
	})
}
