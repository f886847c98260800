package cli_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/keel-run/keel/model/replay"
)

// An openai-compatible (or anthropic@URL) endpoint never gets
// OPENAI_API_KEY or ANTHROPIC_API_KEY implicitly: its key comes from the
// variable --api-key-env or its [endpoints."URL"] api_key_env names; with
// neither, a local server gets a placeholder. The canary provider key
// is never sent, and a named variable that is unset is refused.
func TestModelKeyNotLeakedToEndpoints(t *testing.T) {
	tr, err := replay.Load(trajectory)
	if err != nil {
		t.Fatal(err)
	}
	const canary = "sk-CANARY-openai-key-7d1f"
	var mu sync.Mutex
	var auth []string
	h := replay.NewHandler(tr)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization")+" "+r.Header.Get("X-Api-Key"))
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	base := srv.URL + "/v1"
	for _, tt := range []struct {
		name     string
		config   string
		args     []string
		env      map[string]string
		code     int
		wantAuth string // the Authorization header every request carried
		wantErr  string
	}{
		{name: "no key named", code: 1, wantAuth: "Bearer keel-no-key"},
		{name: "flag", args: []string{"--api-key-env", "GATEWAY_KEY"}, env: map[string]string{"GATEWAY_KEY": "gw-1"}, code: 1, wantAuth: "Bearer gw-1"},
		{name: "config", config: "[endpoints.\"" + base + "/\"]\napi_key_env = \"GATEWAY_KEY\"\n", env: map[string]string{"GATEWAY_KEY": "gw-2"}, code: 1, wantAuth: "Bearer gw-2"},
		{name: "flag over config", config: "[endpoints.\"" + base + "\"]\napi_key_env = \"GATEWAY_KEY\"\n", args: []string{"--api-key-env", "OTHER_KEY"},
			env: map[string]string{"GATEWAY_KEY": "gw-3", "OTHER_KEY": "other"}, code: 1, wantAuth: "Bearer other"},
		{name: "flag names an unset variable", args: []string{"--api-key-env", "UNSET_KEY"}, code: 2, wantErr: "--api-key-env names UNSET_KEY, which is not set"},
		{name: "config names an unset variable", config: "[endpoints.\"" + base + "\"]\napi_key_env = \"UNSET_KEY\"\n", code: 2, wantErr: "names UNSET_KEY, which is not set"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			setup(t)
			t.Setenv("OPENAI_API_KEY", canary)
			t.Setenv("UNSET_KEY", "")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			if tt.config != "" {
				if err := os.WriteFile(filepath.Join(os.Getenv("KEEL_HOME"), "config.toml"), []byte(tt.config), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			mu.Lock()
			auth = nil
			mu.Unlock()
			args := append([]string{"run", "--model", "openai-compatible:deepseek-chat@" + base, "--workspace", t.TempDir(), "-q",
				"--max-steps", "2", "--sandbox", "none"}, tt.args...)
			code, out, errOut := keel(t, append(args, tr.Task())...)
			if code != tt.code || !strings.Contains(errOut, tt.wantErr) {
				t.Fatalf("run = %d, want %d and %q\n%s", code, tt.code, tt.wantErr, errOut)
			}
			if strings.Contains(out+errOut, canary) {
				t.Errorf("the canary key is in the output:\n%s%s", out, errOut)
			}
			mu.Lock()
			defer mu.Unlock()
			if tt.wantAuth != "" && len(auth) == 0 {
				t.Fatal("no request reached the endpoint")
			}
			for _, a := range auth {
				if strings.Contains(a, canary) {
					t.Fatalf("OPENAI_API_KEY was sent to %s: %q", base, a)
				}
				if strings.TrimSpace(a) != tt.wantAuth {
					t.Errorf("a request carried %q, want %q", a, tt.wantAuth)
				}
			}
		})
	}
	// A project's file cannot bind an endpoint to a variable.
	setup(t)
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, ".keel"), 0o755)
	os.WriteFile(filepath.Join(ws, ".keel", "config.toml"), []byte("[endpoints.\""+base+"\"]\napi_key_env = \"OPENAI_API_KEY\"\n"), 0o644)
	if code, _, errOut := keel(t, "run", "--model", "openai-compatible:deepseek-chat@"+base, "--workspace", ws, "--sandbox", "none", "x"); code != 2 || !strings.Contains(errOut, "not a project setting") {
		t.Errorf("project file with [endpoints] = %d\n%s", code, errOut)
	}
	// An anthropic@URL endpoint is refused without a named key, and the
	// [run] table cannot name one.
	setup(t)
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-CANARY")
	if code, _, errOut := keel(t, "run", "--model", "anthropic:claude-sonnet-4@"+srv.URL, "--workspace", t.TempDir(), "--sandbox", "none", "x"); code != 2 || !strings.Contains(errOut, "--api-key-env") {
		t.Errorf("anthropic@URL without a named key = %d\n%s", code, errOut)
	}
	os.WriteFile(filepath.Join(os.Getenv("KEEL_HOME"), "config.toml"), []byte("[run]\napi_key_env = \"X\"\n"), 0o600)
	if code, _, errOut := keel(t, "run", "--model", "openai-compatible:m@"+base, "--workspace", t.TempDir(), "--sandbox", "none", "x"); code != 2 || !strings.Contains(errOut, "api-key-env") {
		t.Errorf("[run] api_key_env = %d\n%s", code, errOut)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, a := range auth {
		if strings.Contains(a, "CANARY") {
			t.Errorf("a provider key was sent: %q", a)
		}
	}
}
