package openai_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/openai"
	"github.com/keel-run/keel/model/replay"
)

func loadTrajectory(t *testing.T, file string) *replay.Trajectory {
	t.Helper()
	tr, err := replay.Load(filepath.Join("..", "..", "testdata", "trajectories", file))
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// wire is a test server answering every request with one fixed body and
// recording the requests it received.
type wire struct {
	mu     sync.Mutex
	bodies [][]byte
	heads  []http.Header
	paths  []string
}

func (w *wire) record(r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.bodies = append(w.bodies, b)
	w.heads = append(w.heads, r.Header.Clone())
	w.paths = append(w.paths, r.URL.Path)
}

func (w *wire) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.bodies)
}

// serveBody starts a server answering 200 with body.
func serveBody(t *testing.T, body []byte) (*wire, *httptest.Server) {
	t.Helper()
	rec := &wire{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.record(r)
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return rec, srv
}

func newModel(t *testing.T, srv *httptest.Server, opts *openai.Options) *openai.Model {
	t.Helper()
	o := openai.Options{Model: "deepseek-chat", APIKey: "sk-test", BaseURL: srv.URL + "/v1"}
	if opts != nil {
		o = *opts
		if o.BaseURL == "" {
			o.BaseURL = srv.URL + "/v1"
		}
	}
	m, err := openai.New(&o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func userRequest() *model.Request {
	return &model.Request{
		System:   "sys",
		Messages: []model.Message{{Role: model.RoleUser, Content: "task"}},
		Tools:    []model.ToolSpec{{Name: "bash", Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}}}`)}},
	}
}

// TestResponseMapping serves recorded DeepSeek responses and checks the
// mapping of content, tool calls (ids and raw argument strings), usage with
// cached tokens, model, id and finish reason.
func TestResponseMapping(t *testing.T) {
	t.Parallel()
	tr := loadTrajectory(t, "deepseek_chat_dev.traj.json")
	first, _ := tr.Turn(0)
	rerun := loadTrajectory(t, "deepseek_chat_dev_rerun.traj.json")
	rerunFirst, _ := rerun.Turn(0)

	// Derived: the same recorded response without prompt_tokens_details,
	// as older DeepSeek versions sent it (only prompt_cache_hit_tokens).
	var noDetails map[string]any
	if err := json.Unmarshal(first.Response, &noDetails); err != nil {
		t.Fatal(err)
	}
	noDetails["usage"].(map[string]any)["prompt_tokens_details"] = nil
	noDetailsBody, _ := json.Marshal(noDetails)

	// Derived: two parallel tool calls in one message.
	var parallel map[string]any
	json.Unmarshal(first.Response, &parallel)
	msg := parallel["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	calls := msg["tool_calls"].([]any)
	second := map[string]any{"index": 1, "id": "call_01_second", "type": "function",
		"function": map[string]any{"name": "bash", "arguments": `{"command": "git status"}`}}
	msg["tool_calls"] = append(calls, second)
	parallelBody, _ := json.Marshal(parallel)

	wantMsg := first.Message
	for _, tt := range []struct {
		name string
		body []byte
		want *model.Response
	}{
		{"recorded", first.Response, &model.Response{
			Message: wantMsg,
			Usage:   model.Usage{InputTokens: 1893, OutputTokens: 77, CachedInputTokens: 1856},
			Model:   "deepseek-chat", ID: "31c7128f-4c49-4f0d-ba0f-2244f59190fd", StopReason: "tool_calls",
		}},
		{"recorded rerun, cold cache", rerunFirst.Response, &model.Response{
			Message: rerunFirst.Message,
			Usage:   model.Usage{InputTokens: 1893, OutputTokens: 77, CachedInputTokens: 320},
			Model:   "deepseek-chat", ID: "cb3cdcc6-318c-47b7-b2fe-5af4b21235ba", StopReason: "tool_calls",
		}},
		{"prompt_cache_hit_tokens only", noDetailsBody, &model.Response{
			Message: wantMsg,
			Usage:   model.Usage{InputTokens: 1893, OutputTokens: 77, CachedInputTokens: 1856},
			Model:   "deepseek-chat", ID: "31c7128f-4c49-4f0d-ba0f-2244f59190fd", StopReason: "tool_calls",
		}},
		{"parallel tool calls", parallelBody, &model.Response{
			Message: model.Message{Role: model.RoleAssistant, Content: wantMsg.Content, ToolCalls: []model.ToolCall{
				wantMsg.ToolCalls[0],
				{ID: "call_01_second", Name: "bash", Arguments: `{"command": "git status"}`},
			}},
			Usage: model.Usage{InputTokens: 1893, OutputTokens: 77, CachedInputTokens: 1856},
			Model: "deepseek-chat", ID: "31c7128f-4c49-4f0d-ba0f-2244f59190fd", StopReason: "tool_calls",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, srv := serveBody(t, tt.body)
			got, err := newModel(t, srv, nil).Generate(t.Context(), userRequest())
			if err != nil {
				t.Fatalf("Generate error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Generate (-want +got):\n%s", diff)
			}
		})
	}
	if want := `{"command": "pwd && ls -la"}`; first.Message.ToolCalls[0].Arguments != want {
		t.Errorf("recorded arguments = %q, want the raw string %q", first.Message.ToolCalls[0].Arguments, want)
	}
}

func TestResponseEdgeCases(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		body string
		want *model.Response
		kind model.ErrorKind
	}{
		{"missing tool call id", `{"id":"chatcmpl-1","model":"llama3","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"bash","arguments":"{}"}}]}}],"usage":{"prompt_tokens":5,"completion_tokens":1}}`,
			&model.Response{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "call_chatcmpl-1_0", Name: "bash", Arguments: "{}"}}},
				Usage: model.Usage{InputTokens: 5, OutputTokens: 1}, Model: "llama3", ID: "chatcmpl-1", StopReason: "tool_calls"}, 0},
		{"refusal", `{"id":"r","model":"gpt-4o","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":null,"refusal":"I can't help with that."}}]}`,
			&model.Response{Message: model.Message{Role: model.RoleAssistant, Content: "I can't help with that."}, Model: "gpt-4o", ID: "r", StopReason: "stop"}, 0},
		{"no choices", `{"id":"r","model":"m","choices":[]}`, nil, model.KindRetryable},
		{"not json", `{"id":"r","choices":[{"message":`, nil, model.KindRetryable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, srv := serveBody(t, []byte(tt.body))
			got, err := newModel(t, srv, &openai.Options{Model: "m", MaxRetries: -1}).Generate(t.Context(), userRequest())
			if tt.want == nil {
				if model.KindOf(err) != tt.kind || got != nil {
					t.Errorf("Generate = %+v, %v; want no response and kind %s", got, err, tt.kind)
				}
				return
			}
			if err != nil {
				t.Fatalf("Generate error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Generate (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRequestBody checks the wire shape of a request with every kind of
// message.
func TestRequestBody(t *testing.T) {
	t.Parallel()
	tr := loadTrajectory(t, "deepseek_chat_dev.traj.json")
	first, _ := tr.Turn(0)
	temp := 0.0
	req := &model.Request{
		System: "You are Keel.",
		Messages: []model.Message{
			{Role: model.RoleUser, Content: "fix the bug"},
			{Role: model.RoleAssistant, Content: "Let me look.", ToolCalls: []model.ToolCall{
				{ID: "call_1", Name: "bash", Arguments: `{"command": "ls"}`},
				{ID: "call_2", Name: "edit", Arguments: `{"path": "a.txt",`},
			}},
			{Role: model.RoleTool, ToolCallID: "call_1", Content: "a.txt\n"},
			{Role: model.RoleTool, ToolCallID: "call_2", Content: "arguments are not a valid JSON object", IsError: true},
			{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "call_3", Name: "bash", Arguments: `{}`}}},
			{Role: model.RoleTool, ToolCallID: "call_3", Content: "A\x00B"},
		},
		Tools: []model.ToolSpec{
			{Name: "bash", Description: "Run a command.", Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string","description":"shell"}},"required":["command"],"additionalProperties":false}`)},
			{Name: "noargs"},
		},
		MaxOutputTokens: 1024,
		Temperature:     &temp,
	}
	want := `{
	  "model": "deepseek-chat",
	  "messages": [
	    {"role": "system", "content": "You are Keel."},
	    {"role": "user", "content": "fix the bug"},
	    {"role": "assistant", "content": "Let me look.", "tool_calls": [
	      {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}},
	      {"id": "call_2", "type": "function", "function": {"name": "edit", "arguments": "{}"}}]},
	    {"role": "tool", "tool_call_id": "call_1", "content": "a.txt\n"},
	    {"role": "tool", "tool_call_id": "call_2", "content": "arguments are not a valid JSON object"},
	    {"role": "assistant", "tool_calls": [{"id": "call_3", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
	    {"role": "tool", "tool_call_id": "call_3", "content": "A\u0000B"}
	  ],
	  "tools": [
	    {"type": "function", "function": {"name": "bash", "description": "Run a command.", "parameters": {"type":"object","properties":{"command":{"type":"string","description":"shell"}},"required":["command"],"additionalProperties":false}}},
	    {"type": "function", "function": {"name": "noargs", "parameters": {"type": "object", "properties": {}}}}
	  ],
	  %s,
	  "temperature": 0
	}`
	for _, tt := range []struct {
		name, base, tokens, path string
	}{
		{"openai", "", `"max_completion_tokens": 1024`, "/v1/chat/completions"},
		{"compatible", "/compat/v1", `"max_tokens": 1024`, "/compat/v1/chat/completions"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec, srv := serveBody(t, first.Response)
			opts := &openai.Options{Model: "deepseek-chat", APIKey: "sk-test-key", BaseURL: srv.URL + tt.base}
			if tt.base == "" {
				// The official endpoint: no base URL, and a transport that
				// delivers api.openai.com's requests to the test server.
				opts.BaseURL = ""
				opts.HTTPClient = &http.Client{Transport: redirect{srv}}
			}
			m, err := openai.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Generate(t.Context(), req); err != nil {
				t.Fatal(err)
			}
			assertJSON(t, rec.bodies[0], strings.Replace(want, "%s", tt.tokens, 1))
			if got := rec.heads[0].Get("Authorization"); got != "Bearer sk-test-key" {
				t.Errorf("Authorization = %q", got)
			}
			if rec.paths[0] != tt.path {
				t.Errorf("path = %q, want %q", rec.paths[0], tt.path)
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

func TestNew(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		opts *openai.Options
		err  error
		spec string
	}{
		{"official", &openai.Options{Model: "gpt-4o", APIKey: "k"}, nil, "openai:gpt-4o"},
		{"compatible without key", &openai.Options{Model: "llama3.2", BaseURL: "http://127.0.0.1:11434/v1"}, nil, "openai-compatible:llama3.2@http://127.0.0.1:11434/v1"},
		{"no key", &openai.Options{Model: "gpt-4o"}, openai.ErrNoAPIKey, ""},
		{"no model", &openai.Options{APIKey: "k"}, openai.ErrNoModel, ""},
		{"nil options", nil, openai.ErrNoModel, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := openai.New(tt.opts)
			if !errors.Is(err, tt.err) {
				t.Fatalf("New error = %v, want %v", err, tt.err)
			}
			if err == nil && m.Name() != tt.spec {
				t.Errorf("Name() = %q, want %q", m.Name(), tt.spec)
			}
			if err == nil {
				if _, perr := model.ParseSpec(m.Name()); perr != nil {
					t.Errorf("Name() %q does not parse: %v", m.Name(), perr)
				}
			}
		})
	}
	if !strings.Contains(openai.ErrNoAPIKey.Error(), "OPENAI_API_KEY") {
		t.Errorf("ErrNoAPIKey = %q, want it to name OPENAI_API_KEY", openai.ErrNoAPIKey)
	}
}

func TestInvalidRequestIsNotSent(t *testing.T) {
	t.Parallel()
	rec, srv := serveBody(t, []byte(`{}`))
	m := newModel(t, srv, nil)
	for _, req := range []*model.Request{
		{Messages: []model.Message{{Role: "robot", Content: "x"}}},
		{Messages: []model.Message{{Role: model.RoleTool, Content: "x"}}},
		{Messages: []model.Message{{Role: model.RoleUser, Content: "x"}}, Tools: []model.ToolSpec{{Name: "t", Parameters: json.RawMessage(`[1]`)}}},
	} {
		if _, err := m.Generate(t.Context(), req); model.KindOf(err) != model.KindInvalidRequest {
			t.Errorf("Generate(%+v) error = %v, want kind invalid_request", req, err)
		}
	}
	if rec.count() != 0 {
		t.Errorf("%d requests reached the server", rec.count())
	}
}

func TestNoEnvironment(t *testing.T) {
	// Not parallel: sets the environment. The library must ignore it.
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/unused")
	tr := loadTrajectory(t, "deepseek_chat_dev.traj.json")
	first, _ := tr.Turn(0)
	rec, srv := serveBody(t, first.Response)
	m := newModel(t, srv, &openai.Options{Model: "deepseek-chat", APIKey: "sk-given"})
	if _, err := m.Generate(t.Context(), userRequest()); err != nil {
		t.Fatal(err)
	}
	if got := rec.heads[0].Get("Authorization"); got != "Bearer sk-given" {
		t.Errorf("Authorization = %q, want the key from Options", got)
	}
	if _, err := openai.New(&openai.Options{Model: "gpt-4o"}); !errors.Is(err, openai.ErrNoAPIKey) {
		t.Errorf("New without a key = %v, want ErrNoAPIKey despite OPENAI_API_KEY", err)
	}
}

// redirect sends every request to srv, whatever its host, so the official
// endpoint's requests can be inspected.
type redirect struct{ srv *httptest.Server }

func (r redirect) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host != "api.openai.com" {
		return nil, errors.New("request to unexpected host " + req.URL.Host)
	}
	u, _ := url.Parse(r.srv.URL)
	c := req.Clone(req.Context())
	c.URL.Scheme, c.URL.Host, c.Host = u.Scheme, u.Host, ""
	return http.DefaultTransport.RoundTrip(c)
}
