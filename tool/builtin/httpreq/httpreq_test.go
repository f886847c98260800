package httpreq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/internal/oauthtest"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/egress"
	"github.com/keel-run/keel/sandbox/egress/egresstest"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin/httpreq"
)

// A request to a provider's resource gets the vault's token (checked by
// the resource server by introspection at the real OP), the tool says
// which authorization is missing before that, an echoed token never
// reaches the result, and a resource the provider does not name gets no
// credential.
func TestHTTPRequestInjectsCredential(t *testing.T) {
	ctx := t.Context()
	op := oauthtest.Start(t)
	var echoed []string
	rs := httptest.NewServer(op.ResourceServer(func(w http.ResponseWriter, r *http.Request, in *oauthtest.Introspection) {
		// A hostile resource echoes the Authorization header.
		echoed = append(echoed, r.Header.Get("Authorization"))
		fmt.Fprintf(w, `{"user":%q,"scope":%q,"echo":%q,"method":%q}`, in.Username, in.Scope, r.Header.Get("Authorization"), r.Method)
	}))
	defer rs.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(rs.URL, "http://"))
	base := "http://localhost:" + port

	s, err := sqlite.Open(filepath.Join(t.TempDir(), "keel.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key, _ := credential.ParseKey(credential.GenerateKey())
	v, _ := credential.New(s, &credential.Options{Keys: []*credential.Key{key}})
	if _, err := v.AddProvider(ctx, &credential.ProviderParams{Name: "op", Issuer: op.Issuer, ClientID: oauthtest.NativeClient,
		Scopes: []string{"openid", "offline_access"}, Resources: []string{base + "/api"}}); err != nil {
		t.Fatal(err)
	}
	tl, h := httpreq.New(&httpreq.Options{Vault: v})
	env := &tool.Env{Network: sandbox.Network{Allow: []string{"localhost:" + port}}}
	req := func(args string) *tool.Request {
		return &tool.Request{RunID: "run1", CallID: "c1", Arguments: json.RawMessage(args), Principal: "helper", OnBehalfOf: "ann", Env: env}
	}
	call := req(`{"method":"POST","url":"` + base + `/api/items","body":"{}"}`)

	if u := tl.Credential(ctx, call); u == nil || u.Provider != "op" || u.Method != "POST" {
		t.Errorf("Credential hook = %+v", u)
	}
	var ar *tool.AuthRequiredError
	if err := tl.Authorize(ctx, call); !errors.As(err, &ar) || ar.Provider != "op" || ar.User != "ann" || !strings.Contains(ar.Hint, "keel auth connect op") {
		t.Fatalf("Authorize before consent = %v", err)
	}
	pend, _ := v.BeginConnect(ctx, &credential.ConnectParams{Provider: "op", Agent: "helper", User: "ann", RedirectURL: oauthtest.RedirectURL})
	cb, err := oauthtest.Login(ctx, pend.URL, op.User(), oauthtest.Password)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.CompleteConnect(ctx, credential.ResponseFrom(cb.Query())); err != nil {
		t.Fatal(err)
	}
	if err := tl.Authorize(ctx, call); err != nil {
		t.Fatalf("Authorize after consent = %v", err)
	}
	res, err := h(ctx, call)
	if err != nil || res.IsError {
		t.Fatalf("http_request = %+v, %v", res, err)
	}
	if !strings.Contains(res.Content, `"scope":"offline_access openid"`) || !strings.Contains(res.Content, "[REDACTED]") {
		t.Errorf("result does not show the resource server's answer with the echo redacted:\n%s", res.Content)
	}
	if len(echoed) != 1 || !strings.HasPrefix(echoed[0], "Bearer ") {
		t.Fatalf("resource server saw %q", echoed)
	}
	if strings.Contains(res.Content, strings.TrimPrefix(echoed[0], "Bearer ")) {
		t.Errorf("the token reached the result")
	}
	// The model may not set the Authorization header for a provider's resource.
	res, _ = h(ctx, req(`{"url":"`+base+`/api/x","headers":["authorization: Bearer mine"]}`))
	if !res.IsError || !strings.Contains(res.Content, "Keel adds the credential") {
		t.Errorf("model-set Authorization: %+v", res)
	}
	// Outside the provider's resources: no credential, the resource server refuses.
	res, _ = h(ctx, req(`{"url":"`+base+`/other"}`))
	if !res.IsError || !strings.Contains(res.Content, "401") {
		t.Errorf("request outside the resources: %+v", res)
	}
	// A path that only seems to lie under the resource (a dot segment the
	// server resolves, in any spelling) gets no credential either.
	for _, p := range []string{"/api/../other", "/api/%2e%2e/other", "/api/%2E%2e%2fother", "/api/..;/other"} {
		call := req(`{"url":"` + base + p + `"}`)
		if u := tl.Credential(ctx, call); u != nil {
			t.Errorf("%s: Credential hook = %+v, want none", p, u)
		}
		res, _ = h(ctx, call)
		if !res.IsError || !strings.Contains(res.Content, "401") || strings.Contains(res.Content, "credential of") {
			t.Errorf("%s: %+v", p, res)
		}
	}
	if len(echoed) != 1 {
		t.Errorf("the resource server saw %d credentialed requests, want 1", len(echoed))
	}
	// Outside the allowlist: refused before anything.
	res, _ = h(ctx, req(`{"url":"http://elsewhere.test/api"}`))
	if !res.IsError || !strings.Contains(res.Content, "refused") {
		t.Errorf("host outside the allowlist: %+v", res)
	}
	// The use was journaled with the call id and no token.
	evs, err := s.Read(ctx, credential.StreamID, 1)
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimPrefix(echoed[0], "Bearer ")
	used := 0
	for _, e := range evs {
		if strings.Contains(string(e.Payload), tok) {
			t.Errorf("event %s contains the token", e.Type)
		}
		if e.Type == credential.EventUsed && strings.Contains(string(e.Payload), `"call":"c1"`) {
			used++
		}
	}
	if used != 1 {
		t.Errorf("%d credential.used events for call c1, want 1", used)
	}
	_ = io.Discard
	_ = context.Background
}

// An allowed name that resolves to a loopback or private address is not
// reached; the address itself, named in the allowlist, is.
func TestHTTPRequestNonPublicName(t *testing.T) {
	var hits int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++; w.Write([]byte("reached")) }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	res := egresstest.Resolver(t, map[string]string{"evil.test": "127.0.0.1"})
	_, h := httpreq.New(&httpreq.Options{Transport: (&egress.Dialer{Resolver: res}).Transport()})
	env := &tool.Env{Network: sandbox.Network{Allow: []string{"evil.test:" + port, "127.0.0.1:" + port}}}
	call := func(u string) *tool.Result {
		r, err := h(t.Context(), &tool.Request{RunID: "r", CallID: "c", Arguments: json.RawMessage(`{"method":"POST","url":"` + u + `","body":"x"}`), Env: env})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := call("http://evil.test:" + port + "/"); !r.IsError || !strings.Contains(r.Content, "non-public address") || hits != 0 {
		t.Errorf("evil.test = %q (server hit %d times)", r.Content, hits)
	}
	if r := call("http://127.0.0.1:" + port + "/"); r.IsError || !strings.Contains(r.Content, "reached") {
		t.Errorf("127.0.0.1 = %q", r.Content)
	}
}
