package cli_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// wireFixture is one recorded HTTP response of a provider's testdata.
type wireFixture struct {
	Status int               `json:"status"`
	Header map[string]string `json:"header"`
	Body   json.RawMessage   `json:"body"`
}

func loadWire(t *testing.T, path string) wireFixture {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", path))
	if err != nil {
		t.Fatal(err)
	}
	var f wireFixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f wireFixture) write(w http.ResponseWriter) {
	for k, v := range f.Header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(f.Status)
	var s string
	if json.Unmarshal(f.Body, &s) == nil {
		w.Write([]byte(s))
		return
	}
	w.Write(f.Body)
}

// TestRunStreamsText: keel run against an OpenAI-compatible endpoint
// answering a rate limit, then a real recorded event stream: the retry is
// said, the model's text is printed once, as it streamed, and the run
// completes with it.
func TestRunStreamsText(t *testing.T) {
	db := setup(t)
	limited := loadWire(t, "model/openai/testdata/error_429_rate_limit.json")
	limited.Header = map[string]string{"Content-Type": "application/json", "Retry-After-Ms": "5"} // recorded: 20 s
	text := loadWire(t, "model/openai/testdata/stream_text.json")
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			limited.write(w)
			return
		}
		text.write(w)
	}))
	defer srv.Close()
	ws := t.TempDir()
	code, out, errOut := keel(t, "--db", db, "run", "--model", "openai-compatible:gpt-4o@"+srv.URL+"/v1", "--sandbox", "none", "--workspace", ws, "What's the weather like in SF?")
	if code != 0 {
		t.Fatalf("keel run = %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	const answer = "I'm unable to provide real-time weather updates. To get the current weather in San Francisco, I recommend checking a reliable weather website or a weather app."
	if got := strings.Count(errOut, answer); got != 1 {
		t.Errorf("the answer is on stderr %d times, want once (streamed):\n%s", got, errOut)
	}
	if !strings.Contains(errOut, "    "+answer+"\nstep 1 · 44 tok") {
		t.Errorf("want the streamed text, indented, before its step line:\n%s", errOut)
	}
	if !strings.Contains(errOut, "  model rate limited (HTTP 429): retrying in 5ms (attempt 2)\n") {
		t.Errorf("the retry is not said:\n%s", errOut)
	}
	if !strings.Contains(out, answer) {
		t.Errorf("stdout lacks the final answer:\n%s", out)
	}
}
