package cli_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// An Anthropic-compatible endpoint is reached by anthropic:MODEL@URL or by
// ANTHROPIC_BASE_URL (the SDK's variable); openai:MODEL@URL is refused
// with the spec to use instead.
func TestModelEndpoints(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "model", "anthropic", "testdata", "text_cache_write.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cassette struct {
		Body json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal(raw, &cassette); err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path != "/v1/messages" {
			http.NotFound(w, r)
			return
		}
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write(cassette.Body)
	}))
	t.Cleanup(srv.Close)
	for _, tt := range []struct {
		name, spec, env string
	}{
		{"spec", "anthropic:claude-sonnet-4@" + srv.URL, ""},
		{"environment", "anthropic:claude-sonnet-4", srv.URL},
	} {
		t.Run(tt.name, func(t *testing.T) {
			setup(t)
			t.Setenv("ANTHROPIC_API_KEY", "sk-ant-test")
			t.Setenv("GATEWAY_KEY", "sk-gateway")
			t.Setenv("ANTHROPIC_BASE_URL", tt.env)
			before := hits.Load()
			args := []string{"run", "--sandbox", "none", "--model", tt.spec, "--workspace", t.TempDir(), "say hi"}
			if tt.env == "" {
				// A spec's endpoint gets the variable named for it, never
				// ANTHROPIC_API_KEY (TestModelKeyNotLeakedToEndpoints).
				args = append(args, "--api-key-env", "GATEWAY_KEY")
			}
			code, out, errOut := keel(t, args...)
			if code != 0 || !strings.Contains(out, "Hi! My name is Claude.") || hits.Load() != before+1 {
				t.Errorf("keel run = %d, %d requests\nstdout: %s\nstderr: %s", code, hits.Load()-before, out, errOut)
			}
		})
	}
	setup(t)
	code, _, errOut := keel(t, "run", "--model", "openai:gpt-4o@"+srv.URL+"/v1", "--workspace", t.TempDir(), "x")
	if code != 2 || !strings.Contains(errOut, "openai-compatible:gpt-4o@") {
		t.Errorf("openai:MODEL@URL = %d %q", code, errOut)
	}
}
