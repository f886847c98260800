package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/keel-run/keel/model/replay"
)

// chatBody builds a chat completions request body with k assistant
// messages carrying the recorded tool call ids of tr.
func chatBody(t *testing.T, tr *replay.Trajectory, k int, tools ...string) string {
	t.Helper()
	msgs := []map[string]any{{"role": "system", "content": tr.System()}, {"role": "user", "content": tr.Task()}}
	for i := range k {
		turn, _ := tr.Turn(i)
		var calls []map[string]any
		for _, c := range turn.Message.ToolCalls {
			calls = append(calls, map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Arguments}})
		}
		msgs = append(msgs, map[string]any{"role": "assistant", "content": turn.Message.Content, "tool_calls": calls})
		for _, c := range turn.Message.ToolCalls {
			msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": c.ID, "content": "out"})
		}
	}
	var ts []map[string]any
	for _, name := range tools {
		ts = append(ts, map[string]any{"type": "function", "function": map[string]any{"name": name, "parameters": map[string]any{"type": "object"}}})
	}
	b, err := json.Marshal(map[string]any{"model": "deepseek-chat", "messages": msgs, "tools": ts})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func serve(h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(body)))
	return w
}

func TestHandlerServesRecordedBytes(t *testing.T) {
	t.Parallel()
	tr := load(t, "deepseek_chat_dev.traj.json")
	h := replay.NewHandler(tr)
	for _, k := range []int{0, 1, 40, 73} {
		for _, path := range []string{"/v1/chat/completions", "/chat/completions"} {
			w := serve(h, http.MethodPost, path, chatBody(t, tr, k, "bash"))
			turn, _ := tr.Turn(k)
			if w.Code != http.StatusOK {
				t.Fatalf("POST %s with %d assistant messages: HTTP %d %s", path, k, w.Code, w.Body)
			}
			if !bytes.Equal(w.Body.Bytes(), turn.Response) {
				t.Errorf("POST %s turn %d: body is not extra.response byte for byte", path, k+1)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
		}
	}
}

func TestHandlerModels(t *testing.T) {
	t.Parallel()
	h := replay.NewHandler(load(t, "deepseek_chat_dev.traj.json"))
	for _, path := range []string{"/v1/models", "/models"} {
		w := serve(h, http.MethodGet, path, "")
		var list struct {
			Object string `json:"object"`
			Data   []struct {
				ID     string `json:"id"`
				Object string `json:"object"`
			} `json:"data"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil || w.Code != http.StatusOK {
			t.Fatalf("GET %s = HTTP %d %s (%v)", path, w.Code, w.Body, err)
		}
		if list.Object != "list" || len(list.Data) != 1 || list.Data[0].ID != "deepseek-chat" || list.Data[0].Object != "model" {
			t.Errorf("GET %s = %+v, want the recorded model", path, list)
		}
	}
}

func TestHandlerErrors(t *testing.T) {
	t.Parallel()
	tr := load(t, "deepseek_chat_dev.traj.json")
	h := replay.NewHandler(tr)
	for _, tt := range []struct {
		name, method, path, body string
		status                   int
		code, message            string
	}{
		{"exhausted", http.MethodPost, "/v1/chat/completions", chatBody(t, tr, 74, "bash"), 400, "replay_exhausted",
			"trajectory has 74 assistant turns; request asks for turn 75"},
		{"tool not offered", http.MethodPost, "/v1/chat/completions", chatBody(t, tr, 0, "python"), 400, "replay_mismatch",
			`recorded turn 1 calls tool "bash", which the request does not offer (offered: python)`},
		{"bad json", http.MethodPost, "/v1/chat/completions", "{", 400, "invalid_json", "request body is not a chat completions request"},
		{"wrong method", http.MethodGet, "/v1/chat/completions", "", 405, "method_not_allowed", "GET is not allowed; use POST"},
		{"wrong method models", http.MethodPost, "/v1/models", "", 405, "method_not_allowed", "POST is not allowed; use GET"},
		{"unknown path", http.MethodPost, "/v1/completions", "", 404, "unknown_url", "unknown path /v1/completions"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := serve(h, tt.method, tt.path, tt.body)
			var body struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    string  `json:"code"`
				} `json:"error"`
			}
			raw, _ := io.ReadAll(w.Body)
			if err := json.Unmarshal(raw, &body); err != nil {
				t.Fatalf("body %q is not OpenAI-format error JSON: %v", raw, err)
			}
			if w.Code != tt.status || body.Error.Code != tt.code || !strings.Contains(body.Error.Message, tt.message) || body.Error.Type == "" {
				t.Errorf("%s %s = HTTP %d %s; want %d, code %s, message containing %q", tt.method, tt.path, w.Code, raw, tt.status, tt.code, tt.message)
			}
			if w.Header().Get("X-Should-Retry") != "false" {
				t.Errorf("X-Should-Retry = %q, want false", w.Header().Get("X-Should-Retry"))
			}
		})
	}
}

func TestHandlerTurnWithoutResponse(t *testing.T) {
	t.Parallel()
	tr, err := replay.Parse([]byte(`{"messages": [{"role": "assistant", "content": "hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	w := serve(replay.NewHandler(tr), http.MethodPost, "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}]}`)
	if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), "no_recorded_response") {
		t.Errorf("HTTP %d %s; want 500 no_recorded_response", w.Code, w.Body)
	}
}

func TestServeUntilCanceled(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	tr := load(t, "deepseek_chat_dev.traj.json")
	done := make(chan error, 1)
	go func() { done <- replay.Serve(ctx, ln, tr) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "deepseek-chat") {
		t.Errorf("GET /v1/models = HTTP %d %s", resp.StatusCode, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve after its context ended: %v", err)
	}
	if _, err := http.Get("http://" + ln.Addr().String() + "/v1/models"); err == nil {
		t.Error("the server still answers after its context ended")
	}
}
