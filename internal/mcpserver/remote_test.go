package mcpserver

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/internal/mcpcall"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
)

// /mcp answers a valid token that lacks runs:read as the API does (403,
// the scope it needs and the token's), with RFC 6750's
// insufficient_scope challenge, and keel mcp call says the server's
// words; an invalid or revoked token is 401.
func TestHandlerScopeRefusal(t *testing.T) {
	store, err := journal.Open(t.Context(), filepath.Join(t.TempDir(), "keel.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	tokens := token.New(store, nil)
	metr, err := tokens.Create(t.Context(), &token.Params{Name: "metr", Scopes: []string{api.ScopeMetricsRead}, By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	gone, err := tokens.Create(t.Context(), &token.Params{Name: "gone", Scopes: []string{api.ScopeRunsRead}, By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tokens.Revoke(t.Context(), gone.ID, "test"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Handler(tokens, "http://127.0.0.1:1"))
	defer srv.Close()
	post := func(secret string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, strings.TrimSpace(string(b))
	}
	want := "this needs the runs:read scope; token " + metr.ID + " (metr) has metrics:read"
	resp, body := post(metr.Secret)
	if resp.StatusCode != http.StatusForbidden || body != want || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="insufficient_scope"`) {
		t.Errorf("a token without runs:read = %d %q, WWW-Authenticate %q", resp.StatusCode, body, resp.Header.Get("WWW-Authenticate"))
	}
	for name, secret := range map[string]string{"revoked": gone.Secret, "bad": "keel_nope_x"} {
		if resp, _ := post(secret); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("a %s token = %d, want 401", name, resp.StatusCode)
		}
	}
	var out bytes.Buffer
	err = (&mcpcall.Call{URL: srv.URL, Token: metr.Secret, Tool: "list_approvals", Args: "{}", Stdout: &out, Stderr: &out}).Run(t.Context())
	var bad *mcpcall.BadCall
	if err == nil || errors.As(err, &bad) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "HTTP 403") {
		t.Errorf("keel mcp call with it: %v", err)
	}
}
