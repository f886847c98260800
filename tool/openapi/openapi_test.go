package openapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/openapi"
)

// Keel's own API document: every operation becomes a tool whose schema
// compiles; GET is read-only, writes are held (ask) unless the policy
// decides them.
func TestKeelDocument(t *testing.T) {
	a, err := openapi.Load(context.Background(), openapi.Options{Name: "keelapi", Document: "../../server/openapi.json", BaseURL: "http://keel.test:8420/"})
	if err != nil {
		t.Fatal(err)
	}
	r := tool.NewRegistry()
	if notes := a.Register(r, nil); len(notes) > 0 {
		t.Fatalf("notes: %v", notes)
	}
	if n := len(r.Names()); n < 15 {
		t.Fatalf("%d tools: %v", n, r.Names())
	}
	get, create := r.Tool("keelapi__getRun"), r.Tool("keelapi__createRun")
	if get == nil || create == nil {
		t.Fatalf("tools: %v", r.Names())
	}
	if get.Effect != tool.ReadOnly || get.Hold() != "" {
		t.Errorf("getRun: %v, held %q", get.Effect, get.Hold())
	}
	if create.Effect != tool.External || !strings.Contains(create.Hold(), "writes ask") {
		t.Errorf("createRun: %v, held %q", create.Effect, create.Hold())
	}
	if _, bad := r.Validate(model.ToolCall{Name: "keelapi__getRun", Arguments: `{}`}); bad == nil {
		t.Error("getRun without its path parameter passed validation")
	}
	if _, bad := r.Validate(model.ToolCall{Name: "keelapi__createRun", Arguments: `{"body":{"task":"x","workspace":"/w","model":"replay:x"}}`}); bad != nil {
		t.Errorf("createRun: %s", bad.Content)
	}
	// A changed definition (another pin at run creation) is held.
	r2 := tool.NewRegistry()
	a.Register(r2, map[string]string{"keelapi__getRun": "0123456789abcdef"})
	if !strings.Contains(r2.Tool("keelapi__getRun").Hold(), "changed since the run was created") {
		t.Error("a changed operation is not held")
	}
}

func TestBadDocuments(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.json")
	os.WriteFile(big, []byte(`{"openapi":"3.0.0","x":"`+strings.Repeat("a", openapi.MaxDocumentBytes)+`"}`), 0o644)
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"openapi":"3.0.0","info":{"title":"x","version":"1"},"paths":{"/a":{"get":{"responses":{"200":{"description":"ok"}},"parameters":[{"name":"p","in":"nowhere"}]}}}}`), 0o644)
	notJSON := filepath.Join(dir, "not.json")
	os.WriteFile(notJSON, []byte("this is not a document"), 0o644)
	for _, doc := range []string{big, bad, notJSON, filepath.Join(dir, "missing.json"), "http://example.com/openapi.json"} {
		if _, err := openapi.Load(context.Background(), openapi.Options{Name: "x", Document: doc, BaseURL: "http://x.test/"}); err == nil {
			t.Errorf("%s loaded", doc)
		} else {
			t.Logf("%s: %.200v", filepath.Base(doc), err)
		}
	}
}

// Calls go to the server with the token; the allowlist is checked.
func TestCall(t *testing.T) {
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": strings.TrimPrefix(r.URL.Path, "/v1/runs/"), "status": "completed"})
	}))
	defer srv.Close()
	base := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	host := strings.TrimPrefix(base, "http://")
	a, err := openapi.Load(context.Background(), openapi.Options{Name: "keelapi", Document: "../../server/openapi.json", BaseURL: base,
		Token: func() string { return "tok-canary" }, Network: sandbox.Network{Allow: []string{host}}, Operations: []string{"getRun"}})
	if err != nil {
		t.Fatal(err)
	}
	r := tool.NewRegistry()
	a.Register(r, nil)
	if len(r.Names()) != 1 {
		t.Fatalf("filtered tools: %v", r.Names())
	}
	args, bad := r.Validate(model.ToolCall{Name: "keelapi__getRun", Arguments: `{"id":"run 1/2"}`})
	if bad != nil {
		t.Fatal(bad.Content)
	}
	res, err := r.Run(context.Background(), "keelapi__getRun", &tool.Request{RunID: "r", CallID: "c", Arguments: args, Env: &tool.Env{}})
	if err != nil || res.IsError || !strings.Contains(res.Content, "HTTP 200") || !strings.Contains(res.Content, "completed") {
		t.Fatalf("%v %+v", err, res)
	}
	if got.Header.Get("Authorization") != "Bearer tok-canary" || got.URL.EscapedPath() != "/v1/runs/run%201%2F2" {
		t.Errorf("request: %s %s", got.Header.Get("Authorization"), got.URL.EscapedPath())
	}
	if strings.Contains(res.Content, "tok-canary") {
		t.Error("the token is in the result")
	}
}
