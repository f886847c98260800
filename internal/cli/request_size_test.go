package cli_test

import (
	"cmp"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// firstRequestBudget bounds the first request of keel run on a one-line
// task with the default settings (the wire bytes of the chat completions
// request: system prompt, task, tool definitions). Every later request
// carries the same prefix. If a change must grow it, say why in the
// commit and raise the budget; better, shorten something else.
const firstRequestBudget = 3_600

// recordedRequestBudget bounds it on the recorded marshmallow task, whose
// text is 6,244 bytes of it (6,436 once encoded in JSON): the goal of a
// first request of at most 10 KB.
const recordedRequestBudget = 10_000

// TestFirstRequestSize pins the size of the first model request of a
// default keel run, captured at an OpenAI-compatible endpoint, and logs
// what it is made of. fetch_url and http_request are offered only to a
// run that may reach a host.
func TestFirstRequestSize(t *testing.T) {
	for _, tc := range []struct {
		name    string
		task    string
		args    []string
		network bool
		budget  int
	}{
		{name: "default", budget: firstRequestBudget},
		{name: "allowed host", args: []string{"--allow-host", "example.com"}, network: true},
		{name: "recorded marshmallow task", task: recordedTask(t), budget: recordedRequestBudget},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := firstRequest(t, cmp.Or(tc.task, "What does notes.txt say?"), tc.args...)
			var req struct {
				Messages []struct {
					Role    string `json:"role"`
					Content string `json:"content"`
				} `json:"messages"`
				Tools []json.RawMessage `json:"tools"`
			}
			if err := json.Unmarshal(first, &req); err != nil {
				t.Fatal(err)
			}
			for _, m := range req.Messages {
				t.Logf("%-9s message %5d bytes", m.Role, len(m.Content))
			}
			tools, offered := 0, map[string]bool{}
			for _, raw := range req.Tools {
				var tl struct {
					Function struct {
						Name string `json:"name"`
					} `json:"function"`
				}
				if err := json.Unmarshal(raw, &tl); err != nil {
					t.Fatal(err)
				}
				offered[tl.Function.Name] = true
				t.Logf("tool %-15s %5d bytes", tl.Function.Name, len(raw))
				tools += len(raw)
			}
			t.Logf("first request %d bytes: %d tools, %d bytes", len(first), len(req.Tools), tools)
			for _, n := range []string{"fetch_url", "http_request"} {
				if offered[n] != tc.network {
					t.Errorf("%s offered: %v, want %v", n, offered[n], tc.network)
				}
			}
			if tc.budget > 0 && len(first) > tc.budget {
				t.Errorf("the first request takes %d bytes, over the budget of %d", len(first), tc.budget)
			}
		})
	}
}

// recordedTask returns the task of the recorded marshmallow trajectory.
func recordedTask(t *testing.T) string {
	b, err := os.ReadFile(trajectory)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	for _, m := range tr.Messages {
		if m.Role == "user" {
			return m.Content
		}
	}
	t.Fatal("the trajectory has no task")
	return ""
}

// firstRequest runs keel run with args on task against an
// OpenAI-compatible endpoint that answers at once, and returns the body
// of the first request it received.
func firstRequest(t *testing.T, task string, args ...string) []byte {
	t.Helper()
	db := setup(t)
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		first []byte
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		mu.Lock()
		if first == nil {
			first = b
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"chatcmpl-size","object":"chat.completion","created":1727346180,"model":"size-test",`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":"It says hello."},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":10,"completion_tokens":4,"total_tokens":14}}`)
	}))
	defer srv.Close()
	argv := append([]string{"run", "--db", db, "--model", "openai-compatible:size-test@" + srv.URL + "/v1", "--workspace", ws, "-q"}, args...)
	code, out, errOut := keel(t, append(argv, task)...)
	if code != 0 {
		t.Fatalf("keel run = %d\n%s\n%s", code, out, errOut)
	}
	mu.Lock()
	defer mu.Unlock()
	if first == nil {
		t.Fatal("no request reached the endpoint")
	}
	return first
}
