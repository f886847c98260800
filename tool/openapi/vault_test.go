package openapi_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/internal/oauthtest"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/openapi"
)

const profileDoc = `{"openapi":"3.0.3","info":{"title":"profiles","version":"1"},
"paths":{
 "/api/me":{"get":{"operationId":"getMe","responses":{"200":{"description":"ok"}}}},
 "/api/moved":{"get":{"operationId":"getMoved","responses":{"302":{"description":"elsewhere"}}}}}}`

// An API's calls take their tokens from the vault: the provider whose
// resources cover the API (the real zitadel OP; the API checks tokens
// by introspection), a missing grant is an auth.required wait, the
// token goes nowhere else (not to a redirect, not to a URL of another
// provider), an echoed token is redacted, and no token is in the journal.
func TestVaultTokens(t *testing.T) {
	ctx := context.Background()
	op := oauthtest.Start(t)
	var elsewhere []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere = append(elsewhere, r.Header.Get("Authorization"))
	}))
	defer other.Close()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/openapi.json" {
			w.Write([]byte(profileDoc))
			return
		}
		op.ResourceServer(func(w http.ResponseWriter, r *http.Request, in *oauthtest.Introspection) {
			if r.URL.Path == "/api/moved" {
				http.Redirect(w, r, other.URL+"/steal", http.StatusFound)
				return
			}
			fmt.Fprintf(w, `{"scope":%q,"echo":%q}`, in.Scope, r.Header.Get("Authorization"))
		}).ServeHTTP(w, r)
	}))
	defer api.Close()
	base := strings.Replace(api.URL, "127.0.0.1", "localhost", 1)
	host := strings.TrimPrefix(base, "http://")

	dbPath := filepath.Join(t.TempDir(), "keel.db")
	store, err := sqlite.Open(dbPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	key, _ := credential.ParseKey(credential.GenerateKey())
	v, err := credential.New(store, &credential.Options{Keys: []*credential.Key{key}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.AddProvider(ctx, &credential.ProviderParams{Name: "profiles", Issuer: op.Issuer, ClientID: oauthtest.NativeClient,
		Scopes: []string{"openid"}, Resources: []string{base + "/api"}}); err != nil {
		t.Fatal(err)
	}
	load := func(provider string) *tool.Registry {
		t.Helper()
		a, err := openapi.Load(ctx, openapi.Options{Name: "profiles", Document: base + "/openapi.json", Vault: v, Provider: provider, Agent: "helper", User: "ann",
			Network: sandbox.Network{Allow: []string{host}}})
		if err != nil {
			t.Fatal(err)
		}
		r := tool.NewRegistry()
		a.Register(r, nil)
		return r
	}
	r := load("")
	ws, _ := tool.NewWorkspace(t.TempDir(), "/workspace", nil)
	defer ws.Close()
	call := func(r *tool.Registry, id, name string) (*tool.Result, error) {
		t.Helper()
		args, bad := r.Validate(model.ToolCall{ID: id, Name: name, Arguments: `{}`})
		if bad != nil {
			t.Fatal(bad.Content)
		}
		req := &tool.Request{RunID: "run1", CallID: id, Arguments: args, Principal: "helper", OnBehalfOf: "ann", Env: &tool.Env{Workspace: ws}}
		if cu := r.Tool(name).Credential(ctx, req); cu == nil || cu.Provider != "profiles" {
			t.Errorf("%s: the gate is told of credential %+v", name, cu)
		}
		if err := r.Tool(name).Authorize(ctx, req); err != nil {
			return nil, err
		}
		res, err := r.Run(ctx, name, req)
		if err != nil {
			t.Fatal(err)
		}
		return res, nil
	}
	var ar *tool.AuthRequiredError
	if _, err := call(r, "c1", "profiles__getMe"); !errors.As(err, &ar) || ar.Provider != "profiles" || ar.User != "ann" || ar.Reason != "missing" {
		t.Fatalf("before a grant: %v", err)
	}
	pend, err := v.BeginConnect(ctx, &credential.ConnectParams{Provider: "profiles", Agent: "helper", User: "ann", RedirectURL: oauthtest.RedirectURL})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := oauthtest.Login(ctx, pend.URL, op.User(), oauthtest.Password)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.CompleteConnect(ctx, credential.ResponseFrom(cb.Query())); err != nil {
		t.Fatal(err)
	}
	res, err := call(r, "c2", "profiles__getMe")
	if err != nil || res.IsError || !strings.Contains(res.Content, `"scope":"openid"`) || !strings.Contains(res.Content, "credential of profiles") {
		t.Fatalf("with a grant: %v %+v", err, res)
	}
	if !strings.Contains(res.Content, "[REDACTED]") {
		t.Errorf("the echoed token is not redacted: %s", res.Content)
	}
	res, err = call(r, "c3", "profiles__getMoved")
	if err != nil || !strings.Contains(res.Content, "302") || !strings.Contains(res.Content, "not followed") || len(elsewhere) != 0 {
		t.Fatalf("redirect: %v %+v; the other host got %d requests", err, res, len(elsewhere))
	}
	// Named a provider that does not cover the API: no token is sent.
	if _, err := v.AddProvider(ctx, &credential.ProviderParams{Name: "wrong", Issuer: op.Issuer, ClientID: oauthtest.NativeClient, Resources: []string{"http://else.test/"}}); err != nil {
		t.Fatal(err)
	}
	r2 := load("wrong")
	args, _ := r2.Validate(model.ToolCall{ID: "c4", Name: "profiles__getMe", Arguments: `{}`})
	res, err = r2.Run(ctx, "profiles__getMe", &tool.Request{RunID: "run1", CallID: "c4", Arguments: args, Principal: "helper", OnBehalfOf: "ann", Env: &tool.Env{Workspace: ws}})
	if err != nil || !res.IsError || !strings.Contains(res.Content, "is a resource of provider profiles, not of wrong") {
		t.Fatalf("wrong provider: %v %+v", err, res)
	}
	store.Close()
	for _, tok := range op.Issued() {
		for _, f := range []string{dbPath, dbPath + "-wal"} {
			b, _ := os.ReadFile(f)
			if strings.Contains(string(b), tok) {
				t.Errorf("a token is in %s", f)
			}
		}
		if strings.Contains(res.Content, tok) {
			t.Error("a token is in a result")
		}
	}
}
