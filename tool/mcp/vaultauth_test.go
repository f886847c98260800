package mcp_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/internal/oauthtest"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/mcp"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type vaultEnv struct {
	op    *oauthtest.OP
	path  string
	store journal.Store
	vault *credential.Vault
	clock *clock
}

func newVaultEnv(t *testing.T) *vaultEnv { return newVaultEnvTB(t) }

func newVaultEnvTB(t testing.TB) *vaultEnv {
	t.Helper()
	e := &vaultEnv{op: oauthtest.Start(t), path: filepath.Join(t.TempDir(), "keel.db"), clock: &clock{t: time.Now()}}
	var err error
	if e.store, err = sqlite.Open(e.path, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.store.Close() })
	key, err := credential.ParseKey(credential.GenerateKey())
	if err != nil {
		t.Fatal(err)
	}
	if e.vault, err = credential.New(e.store, &credential.Options{Keys: []*credential.Key{key}, Clock: e.clock.now}); err != nil {
		t.Fatal(err)
	}
	return e
}

// connect lets the test user authorize provider for agent, as keel auth
// connect does: the vault's authorization URL (PKCE, resource), the OP's
// real login page, the vault's redemption with the iss check.
func (e *vaultEnv) connect(t *testing.T, provider, agent, user, wantResource string) *credential.Grant {
	t.Helper()
	return e.connectTB(t, provider, agent, user, wantResource)
}

func (e *vaultEnv) connectTB(t testing.TB, provider, agent, user string, wantResource ...string) *credential.Grant {
	t.Helper()
	ctx := context.Background()
	pend, err := e.vault.BeginConnect(ctx, &credential.ConnectParams{Provider: provider, Agent: agent, User: user, RedirectURL: oauthtest.RedirectURL})
	if err != nil {
		t.Fatal(err)
	}
	au, _ := url.Parse(pend.URL)
	if got := au.Query().Get("resource"); len(wantResource) > 0 && got != wantResource[0] {
		t.Errorf("authorization URL resource = %q, want %q (RFC 8707)", got, wantResource[0])
	}
	if au.Query().Get("code_challenge_method") != "S256" {
		t.Errorf("authorization URL without PKCE S256: %s", pend.URL)
	}
	cb, err := oauthtest.Login(ctx, pend.URL, e.op.User(), oauthtest.Password)
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.vault.CompleteConnect(ctx, credential.ResponseFrom(cb.Query()))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func runCall(t *testing.T, r *tool.Registry, env *tool.Env, id, name, args, agent, user string) (*tool.Result, error) {
	t.Helper()
	a, bad := r.Validate(model.ToolCall{ID: id, Name: name, Arguments: args})
	if bad != nil {
		t.Fatalf("validate %s: %s", name, bad.Content)
	}
	req := &tool.Request{RunID: "run-a", CallID: id, Arguments: a, Principal: agent, OnBehalfOf: user, Env: env}
	if at := r.Tool(name).Authorize; at != nil {
		if err := at(context.Background(), req); err != nil {
			return nil, err
		}
	}
	res, err := r.Run(context.Background(), name, req)
	if err != nil {
		t.Fatal(err)
	}
	return res, nil
}

// TestVaultAuthorizedServer: a protected server's first contact registers
// its authorization server as a vault provider bound to it and waits for
// a grant; once a person connected, calls carry the vault's token (and
// only to that server), refresh goes through the vault, and a revoked
// grant makes the next call wait again, with the tools pinned by the run.
func TestVaultAuthorizedServer(t *testing.T) {
	e := newVaultEnv(t)
	srv := oauthtest.StartMCP(t, e.op)
	ctx := context.Background()
	dir := t.TempDir()
	ws, err := tool.NewWorkspace(dir, "/workspace", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	network := sandbox.Network{Allow: []string{srv.Host}}
	env := &tool.Env{Workspace: ws, Network: network}
	opts := &mcp.Options{Network: network, Auth: &mcp.Auth{Vault: e.vault, Agent: "helper", User: "ann", ClientID: oauthtest.NativeClient}}

	// First contact: no grant yet.
	c, err := mcp.Connect(ctx, mcp.Server{Name: "tickets", URL: srv.URL}, opts)
	if err != nil {
		t.Fatal(err)
	}
	ar := c.AuthRequired()
	if ar == nil || ar.Provider != "mcp-tickets" || ar.Reason != tool.AuthMissing || ar.Agent != "helper" || ar.User != "ann" || ar.Resource != srv.URL {
		t.Fatalf("AuthRequired = %+v", ar)
	}
	if !strings.Contains(ar.Hint, "keel auth connect mcp-tickets --agent helper --user ann") {
		t.Errorf("hint %q", ar.Hint)
	}
	p, err := e.vault.Provider(ctx, "mcp-tickets")
	if err != nil {
		t.Fatal(err)
	}
	if p.Issuer != e.op.Issuer || len(p.Resources) != 1 || p.Resources[0] != srv.URL || p.ClientID != oauthtest.NativeClient {
		t.Fatalf("provider registered on first contact: %+v", p)
	}
	reg := tool.NewRegistry()
	if got, _ := c.Register(reg, nil); len(got) != 0 {
		t.Fatalf("tools registered without a grant or pins: %v", got)
	}
	c.Close()

	// A person connects; the server's tools are listed with the token.
	e.connect(t, "mcp-tickets", "helper", "ann", srv.URL)
	c, err = mcp.Connect(ctx, mcp.Server{Name: "tickets", URL: srv.URL}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.AuthRequired() != nil {
		t.Fatalf("still waiting after connect: %+v", c.AuthRequired())
	}
	got, notes := c.Register(reg, nil)
	if len(got) != 1 || got[0].Name != "tickets__whoami" {
		t.Fatalf("registered %v %v", got, notes)
	}
	res, err := runCall(t, reg, env, "c1", "tickets__whoami", `{}`, "helper", "ann")
	if err != nil || res.IsError || !strings.HasPrefix(res.Content, "you are ") || len(strings.TrimSpace(res.Content)) <= len("you are") {
		t.Fatalf("call: %v %+v", err, res)
	}

	// The use is journaled with the run and call, without the token.
	used := credentialEvents(t, e.store, credential.EventUsed)
	if !strings.Contains(used, `"run":"run-a"`) || !strings.Contains(used, `"call":"c1"`) || !strings.Contains(used, srv.URL) {
		t.Errorf("credential.used events: %s", used)
	}

	// Refresh as the vault does: past the access token's expiry the
	// vault refreshes at the OP (which rotates the refresh token) and the
	// server accepts the new token.
	before := len(e.op.Issued())
	e.clock.add(6 * time.Minute)
	res, err = runCall(t, reg, env, "c2", "tickets__whoami", `{}`, "helper", "ann")
	if err != nil || res.IsError {
		t.Fatalf("call after expiry: %v %+v", err, res)
	}
	if len(e.op.Issued()) <= before {
		t.Error("no new token issued after the expiry")
	}
	if !strings.Contains(credentialEvents(t, e.store, credential.EventRefreshed), `"rotated":true`) {
		t.Error("no rotating refresh journaled")
	}

	// Revoked: the next call waits (auth.required), it does not fail.
	gs, _ := e.vault.Grants(ctx)
	if _, err := e.vault.Revoke(ctx, credential.Selector{GrantID: gs[0].ID}, &credential.RevokeParams{By: "test"}); err != nil {
		t.Fatal(err)
	}
	n := srv.Requests()
	_, err = runCall(t, reg, env, "c3", "tickets__whoami", `{}`, "helper", "ann")
	var tar *tool.AuthRequiredError
	if !errors.As(err, &tar) || tar.Reason != tool.AuthRevoked || tar.Provider != "mcp-tickets" {
		t.Fatalf("after revocation: %v", err)
	}
	if srv.Requests() != n {
		t.Error("the revoked call reached the server")
	}

	// Another agent has no grant of its own: it waits too; the
	// helper's token is never lent to it.
	if _, err := runCall(t, reg, env, "c4", "tickets__whoami", `{}`, "other", ""); !errors.As(err, &tar) || tar.Agent != "other" {
		t.Fatalf("other agent: %v", err)
	}

	// Canary: every token the OP issued reached only this server, and
	// none is in the journal database, its WAL or the workspace.
	issued := e.op.Issued()
	if len(issued) < 3 {
		t.Fatalf("only %d tokens issued", len(issued))
	}
	assertNoTokens(t, issued, e.path, e.path+"-wal", dir)
}

// TestVaultAuthorizedPinnedToolsWait: a run whose server needs an
// authorization it does not have (here: revoked since the tools were
// pinned) is offered the pinned tools; their calls wait, and run once a
// person connected.
func TestVaultAuthorizedPinnedToolsWait(t *testing.T) {
	e := newVaultEnv(t)
	srv := oauthtest.StartMCP(t, e.op)
	ctx := context.Background()
	network := sandbox.Network{Allow: []string{srv.Host}}
	opts := &mcp.Options{Network: network, Auth: &mcp.Auth{Vault: e.vault, Agent: "helper", ClientID: oauthtest.NativeClient}}
	c, err := mcp.Connect(ctx, mcp.Server{Name: "tickets", URL: srv.URL}, opts)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	g := e.connect(t, "mcp-tickets", "helper", "", srv.URL)
	c, err = mcp.Connect(ctx, mcp.Server{Name: "tickets", URL: srv.URL}, opts)
	if err != nil {
		t.Fatal(err)
	}
	first := tool.NewRegistry()
	c.Register(first, nil)
	c.Close()
	pinned := map[string]mcp.Pinned{}
	for _, s := range first.Specs() {
		kt := first.Tool(s.Name)
		pinned[s.Name] = mcp.Pinned{Pin: kt.Pin, Description: kt.Description, InputSchema: kt.InputSchema}
	}
	if _, err := e.vault.Revoke(ctx, credential.Selector{GrantID: g.ID}, &credential.RevokeParams{By: "test"}); err != nil {
		t.Fatal(err)
	}

	// The resumed run: no grant, the pinned tools are offered.
	c, err = mcp.Connect(ctx, mcp.Server{Name: "tickets", URL: srv.URL}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.AuthRequired() == nil {
		t.Fatal("no authorization wait")
	}
	reg := tool.NewRegistry()
	got, notes := c.Register(reg, pinned)
	if len(got) != 1 || got[0].Name != "tickets__whoami" || got[0].Pin != pinned["tickets__whoami"].Pin {
		t.Fatalf("registered from pins: %v %v", got, notes)
	}
	ws, _ := tool.NewWorkspace(t.TempDir(), "/workspace", nil)
	defer ws.Close()
	env := &tool.Env{Workspace: ws, Network: network}
	var tar *tool.AuthRequiredError
	if _, err := runCall(t, reg, env, "c1", "tickets__whoami", `{}`, "helper", ""); !errors.As(err, &tar) || tar.Reason != tool.AuthRevoked {
		t.Fatalf("pinned tool before authorization: %v", err)
	}
	e.connect(t, "mcp-tickets", "helper", "", srv.URL)
	res, err := runCall(t, reg, env, "c1", "tickets__whoami", `{}`, "helper", "")
	if err != nil || res.IsError || !strings.Contains(res.Content, "you are") {
		t.Fatalf("pinned tool after authorization: %v %+v", err, res)
	}
	if c.AuthRequired() != nil {
		t.Error("still waiting after the call connected")
	}
}

// TestVaultAuthorizationRefusals: tokens are never sent where their
// provider does not belong.
func TestVaultAuthorizationRefusals(t *testing.T) {
	e := newVaultEnv(t)
	ctx := context.Background()
	good := oauthtest.StartMCP(t, e.op)
	opts := func(p *oauthtest.MCPServer, a *mcp.Auth) *mcp.Options {
		a.Vault, a.Agent = e.vault, "helper"
		return &mcp.Options{Network: sandbox.Network{Allow: []string{p.Host}}, Auth: a}
	}
	c, err := mcp.Connect(ctx, mcp.Server{Name: "good", URL: good.URL}, opts(good, &mcp.Auth{ClientID: oauthtest.NativeClient}))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	e.connect(t, "mcp-good", "helper", "", good.URL)

	// A second server that names the same authorization server: it
	// gets a provider of its own, never good's token.
	other := oauthtest.StartMCP(t, e.op)
	c, err = mcp.Connect(ctx, mcp.Server{Name: "other", URL: other.URL}, opts(other, &mcp.Auth{ClientID: oauthtest.NativeClient}))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if ar := c.AuthRequired(); ar == nil || ar.Provider != "mcp-other" {
		t.Fatalf("second server: %+v", ar)
	}
	// Told to use good's provider, it is refused: the provider's
	// resources do not cover it.
	_, err = mcp.Connect(ctx, mcp.Server{Name: "other2", URL: other.URL}, opts(other, &mcp.Auth{Provider: "mcp-good"}))
	if err == nil || !strings.Contains(err.Error(), "do not cover") {
		t.Fatalf("other server with good's provider: %v", err)
	}
	// A server whose metadata names another authorization server than
	// the provider's issuer (a mix-up) is refused.
	mixed := oauthtest.StartMCP(t, e.op, "https://as.example.com/")
	_, err = mcp.Connect(ctx, mcp.Server{Name: "mixed", URL: mixed.URL}, opts(mixed, &mcp.Auth{Provider: "mcp-good"}))
	if err == nil || !strings.Contains(err.Error(), "is not an authorization server of") {
		t.Fatalf("mix-up: %v", err)
	}
	// No client configured: a clear error naming what to configure.
	fresh := oauthtest.StartMCP(t, e.op)
	_, err = mcp.Connect(ctx, mcp.Server{Name: "noclient", URL: fresh.URL}, opts(fresh, &mcp.Auth{}))
	if err == nil || !strings.Contains(err.Error(), "keel auth providers add mcp-noclient") {
		t.Fatalf("no client: %v", err)
	}
	for _, tok := range e.op.Issued() {
		for _, got := range append(other.Received(), mixed.Received()...) {
			if got == tok {
				t.Fatal("a token of good's grant reached another server")
			}
		}
	}
}

func credentialEvents(t *testing.T, s journal.Store, typ journal.Type) string {
	t.Helper()
	evs, err := s.Read(context.Background(), credential.StreamID, 1)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type == typ {
			b.Write(ev.Payload)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// assertNoTokens fails if any token occurs in the files (or the files of
// the directories) named.
func assertNoTokens(t *testing.T, tokens []string, paths ...string) {
	t.Helper()
	n := 0
	for _, p := range paths {
		filepath.Walk(p, func(path string, fi os.FileInfo, err error) error {
			if err != nil || fi.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(path)
			n++
			for _, tok := range tokens {
				if strings.Contains(string(b), tok) {
					t.Errorf("a token is in %s", path)
				}
			}
			return nil
		})
	}
	if n == 0 {
		t.Error("no file searched")
	}
}
