package credential_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/internal/oauthtest"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/tool"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type env struct {
	op    *oauthtest.OP
	store journal.Store
	path  string
	key   *credential.Key
	clock *fakeClock
	vault *credential.Vault
}

func newEnv(t *testing.T) *env { return newEnvTB(t) }

// newEnvB is newEnv for a benchmark, with a grant of helper for ann.
func newEnvB(b *testing.B) *env {
	e := newEnvTB(b)
	e.addProvider(b, e.vault)
	e.connect(b, e.vault, "helper", "ann")
	return e
}

func newEnvTB(t testing.TB) *env {
	t.Helper()
	e := &env{op: oauthtest.Start(t), path: filepath.Join(t.TempDir(), "keel.db"), clock: &fakeClock{t: time.Now()}}
	var err error
	if e.key, err = credential.ParseKey(credential.GenerateKey()); err != nil {
		t.Fatal(err)
	}
	e.store = e.open(t)
	e.vault = e.newVault(t, e.store)
	return e
}

func (e *env) open(t testing.TB) journal.Store {
	s, err := sqlite.Open(e.path, nil)
	if err != nil {
		panic(err)
	}
	if t != nil {
		t.Cleanup(func() { s.Close() })
	}
	return s
}

func (e *env) newVault(_ testing.TB, s journal.Store) *credential.Vault {
	v, err := credential.New(s, &credential.Options{Keys: []*credential.Key{e.key}, Clock: e.clock.Now})
	if err != nil {
		panic(err)
	}
	return v
}

// addProvider registers the OP as provider "op" with the web client, for
// resource http://api.test/.
func (e *env) addProvider(t testing.TB, v *credential.Vault) *credential.Provider {
	t.Helper()
	p, err := v.AddProvider(t.Context(), &credential.ProviderParams{Name: "op", Issuer: e.op.Issuer, ClientID: oauthtest.NativeClient,
		Scopes: []string{"openid", "offline_access"}, Resources: []string{"http://api.test/v1"}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// connect runs authorization code + PKCE for agent acting for the OP's
// admin user and returns the grant.
func (e *env) connect(t testing.TB, v *credential.Vault, agent, user string, scopes ...string) *credential.Grant {
	t.Helper()
	pend, err := v.BeginConnect(t.Context(), &credential.ConnectParams{Provider: "op", Agent: agent, User: user, Scopes: scopes,
		RedirectURL: "http://127.0.0.1:49152/callback", RunID: "run1", CallID: "call1"})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := oauthtest.Login(t.Context(), pend.URL, e.op.User(), oauthtest.Password)
	if err != nil {
		t.Fatal(err)
	}
	g, err := v.CompleteConnect(t.Context(), credential.ResponseFrom(cb.Query()))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestAuthRequiredThenConnect(t *testing.T) {
	e := newEnv(t)
	e.addProvider(t, e.vault)
	ctx := t.Context()
	req := &credential.Request{Agent: "helper", User: "ann", Resource: "http://api.test/v1/items?x=1", RunID: "run1", CallID: "c1", Method: "GET"}

	_, err := e.vault.Credential(ctx, req)
	var ar *tool.AuthRequiredError
	if !errors.As(err, &ar) || ar.Reason != tool.AuthMissing || ar.Provider != "op" {
		t.Fatalf("Credential before any grant = %v, want auth required (missing)", err)
	}
	if _, err := e.vault.Credential(ctx, &credential.Request{Agent: "helper", User: "ann", Resource: "http://api.test/v2"}); !errors.Is(err, credential.ErrNoProvider) {
		t.Errorf("Credential for an uncovered resource = %v, want ErrNoProvider", err)
	}
	if _, err := e.vault.Credential(ctx, &credential.Request{Agent: "helper", User: "ann", Resource: "http://api.test/v10"}); !errors.Is(err, credential.ErrNoProvider) {
		t.Errorf("Credential for /v10 (not under /v1) = %v, want ErrNoProvider", err)
	}

	g := e.connect(t, e.vault, "helper", "ann")
	c, err := e.vault.Credential(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if c.GrantID != g.ID || c.Token() == "" || !strings.HasPrefix(c.Header(), "Bearer ") {
		t.Fatalf("credential = %v, want grant %s with a bearer token", c, g.ID)
	}
	in, err := e.op.Introspect(ctx, c.Token())
	if err != nil || !in.Active {
		t.Fatalf("introspection of the vault's token = %+v, %v; want active", in, err)
	}
	// Another user has no grant; an unknown scope needs a new consent.
	if _, err := e.vault.Credential(ctx, &credential.Request{Agent: "helper", User: "bob", Resource: req.Resource}); !errors.As(err, &ar) {
		t.Errorf("Credential for another user = %v, want auth required", err)
	}
	_, err = e.vault.Credential(ctx, &credential.Request{Agent: "helper", User: "ann", Resource: req.Resource, Scopes: []string{"email"}})
	if !errors.As(err, &ar) || ar.Reason != tool.AuthScope || len(ar.Missing) != 1 || ar.Missing[0] != "email" {
		t.Errorf("Credential with an ungranted scope = %v, want auth required (scope email)", err)
	}
}

func TestStateIsSingleUseAndBound(t *testing.T) {
	e := newEnv(t)
	e.addProvider(t, e.vault)
	ctx := t.Context()
	pend, err := e.vault.BeginConnect(ctx, &credential.ConnectParams{Provider: "op", Agent: "helper", User: "ann", RedirectURL: "http://127.0.0.1:5/callback"})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := oauthtest.Login(ctx, pend.URL, e.op.User(), oauthtest.Password)
	if err != nil {
		t.Fatal(err)
	}
	q := cb.Query()
	for _, tt := range []struct {
		name string
		r    credential.Response
		want error
	}{
		{"forged state", credential.Response{State: "forged", Code: q.Get("code")}, credential.ErrBadState},
		{"no state", credential.Response{Code: q.Get("code")}, credential.ErrBadState},
	} {
		if _, err := e.vault.CompleteConnect(ctx, &tt.r); !errors.Is(err, tt.want) {
			t.Errorf("%s: CompleteConnect = %v, want %v", tt.name, err, tt.want)
		}
	}
	// A response from another issuer (a mix-up) consumes the state and
	// redeems nothing.
	mixed := credential.ResponseFrom(q)
	mixed.Iss = "https://evil.example/"
	if _, err := e.vault.CompleteConnect(ctx, mixed); !errors.Is(err, credential.ErrIssuerMismatch) {
		t.Fatalf("CompleteConnect with a foreign iss = %v, want ErrIssuerMismatch", err)
	}
	if _, err := e.vault.CompleteConnect(ctx, credential.ResponseFrom(q)); !errors.Is(err, credential.ErrBadState) {
		t.Errorf("CompleteConnect replayed = %v, want ErrBadState", err)
	}
	if gs, _ := e.vault.Grants(ctx); len(gs) != 0 {
		t.Errorf("grants after refused responses: %+v", gs)
	}
	// Consent denied.
	pend, _ = e.vault.BeginConnect(ctx, &credential.ConnectParams{Provider: "op", Agent: "helper", User: "ann", RedirectURL: "http://127.0.0.1:5/callback"})
	if _, err := e.vault.CompleteConnect(ctx, &credential.Response{State: pend.State, Error: "access_denied"}); !errors.Is(err, credential.ErrDenied) {
		t.Errorf("CompleteConnect of a denial = %v, want ErrDenied", err)
	}
}

func TestRefreshRotatesAndRevoke(t *testing.T) {
	e := newEnv(t)
	e.addProvider(t, e.vault)
	ctx := t.Context()
	g := e.connect(t, e.vault, "helper", "ann")
	req := &credential.Request{Agent: "helper", User: "ann", Resource: "http://api.test/v1/x", RunID: "r", CallID: "c"}
	c1, err := e.vault.Credential(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Add(5 * time.Minute) // the OP's access tokens live 5 minutes
	c2, err := e.vault.Credential(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if c2.Token() == c1.Token() || c2.GrantID != g.ID {
		t.Fatalf("after expiry the token was not refreshed (%s, %s)", c1.TokenHash, c2.TokenHash)
	}
	gs, _ := e.vault.Grants(ctx)
	if len(gs) != 1 || gs[0].Refreshes != 1 || gs[0].Rotations != 1 {
		t.Fatalf("grants after a refresh = %+v, want 1 refresh, 1 rotation", gs)
	}
	if in, err := e.op.Introspect(ctx, c2.Token()); err != nil || !in.Active {
		t.Errorf("refreshed token is not active at the OP")
	}

	revoked, err := e.vault.Revoke(ctx, credential.Selector{Agent: "helper"}, &credential.RevokeParams{By: "test", Reason: "done"})
	if err != nil || len(revoked) != 1 {
		t.Fatalf("Revoke = %v, %v", revoked, err)
	}
	var ar *tool.AuthRequiredError
	if _, err := e.vault.Credential(ctx, req); !errors.As(err, &ar) || ar.Reason != tool.AuthRevoked {
		t.Errorf("Credential after revocation = %v, want auth required (revoked)", err)
	}
	if in, err := e.op.Introspect(ctx, c2.Token()); err == nil && in.Active {
		t.Errorf("the access token is still active at the OP after revocation (RFC 7009)")
	}
	if _, err := e.vault.Revoke(ctx, credential.Selector{GrantID: "grant_nope"}, nil); !errors.Is(err, credential.ErrUnknownGrant) {
		t.Errorf("Revoke of an unknown grant = %v", err)
	}
}

// TestRefreshContention: 50 goroutines over five Vaults on five
// connections to one database share one rotating grant through several
// expiries; every call gets a token the OP accepts, no refresh is
// refused (invalid_grant would turn the grant expired), and each expiry
// costs one refresh.
func TestRefreshContention(t *testing.T) {
	e := newEnv(t)
	e.addProvider(t, e.vault)
	ctx := t.Context()
	e.connect(t, e.vault, "helper", "ann")
	var vaults []*credential.Vault
	for range 5 {
		vaults = append(vaults, e.newVault(t, e.open(t)))
	}
	req := credential.Request{Agent: "helper", User: "ann", Resource: "http://api.test/v1/x"}
	const rounds = 3
	var bad atomic.Int64
	for round := range rounds {
		e.clock.Add(5 * time.Minute)
		var wg sync.WaitGroup
		tokens := make([]string, 50)
		for i := range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := vaults[i%len(vaults)].Credential(ctx, &req)
				if err != nil {
					t.Errorf("round %d goroutine %d: %v", round, i, err)
					bad.Add(1)
					return
				}
				tokens[i] = c.Token()
			}()
		}
		wg.Wait()
		for i, tok := range tokens {
			if tok != tokens[0] {
				t.Errorf("round %d: goroutine %d got another token than goroutine 0", round, i)
			}
		}
		if in, err := e.op.Introspect(ctx, tokens[0]); err != nil || !in.Active {
			t.Errorf("round %d: token not active at the OP", round)
		}
	}
	gs, _ := e.vault.Grants(ctx)
	if len(gs) != 1 || gs[0].Status != "active" || gs[0].Refreshes != rounds || gs[0].Rotations != rounds {
		t.Errorf("grant after contention = %+v, want active with %d refreshes and rotations", gs, rounds)
	}
	if bad.Load() != 0 {
		t.Errorf("%d calls failed", bad.Load())
	}
}

func TestWrongKey(t *testing.T) {
	e := newEnv(t)
	e.addProvider(t, e.vault)
	e.connect(t, e.vault, "helper", "ann")
	other, _ := credential.ParseKey(credential.GenerateKey())
	for _, tt := range []struct {
		name string
		keys []*credential.Key
		want error
	}{
		{"no key", nil, credential.ErrNoKey},
		{"wrong key", []*credential.Key{other}, credential.ErrWrongKey},
	} {
		v, _ := credential.New(e.store, &credential.Options{Keys: tt.keys, Clock: e.clock.Now})
		_, err := v.Credential(t.Context(), &credential.Request{Agent: "helper", User: "ann", Resource: "http://api.test/v1"})
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: Credential = %v, want %v", tt.name, err, tt.want)
		}
		if gs, err := v.Grants(t.Context()); err != nil || len(gs) != 1 {
			t.Errorf("%s: Grants = %v, %v; listing needs no key", tt.name, gs, err)
		}
	}
}

func TestClientCredentialsForEmployeeAgent(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	_, err := e.vault.AddProvider(ctx, &credential.ProviderParams{Name: "svc", Issuer: e.op.Issuer, ClientID: oauthtest.ServiceClient,
		ClientSecret: oauthtest.ServiceSecret, Resources: []string{"http://svc.test/"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := e.vault.Credential(ctx, &credential.Request{Agent: "ops-bot", Resource: "http://svc.test/jobs"})
	if err != nil {
		t.Fatal(err)
	}
	// The example OP introspects only for registered clients, which its
	// service user is not; what is checked is that the token came from
	// its token endpoint once and is reused.
	if c.Token() == "" || e.op.Requests("/oauth/token") != 1 {
		t.Fatalf("client credentials: token %q, %d token requests", c.TokenHash, e.op.Requests("/oauth/token"))
	}
	c2, err := e.vault.Credential(ctx, &credential.Request{Agent: "ops-bot", Resource: "http://svc.test/jobs"})
	if err != nil || c2.Token() != c.Token() || e.op.Requests("/oauth/token") != 1 {
		t.Errorf("second call: %v, %v, %d token requests; want the same token", c2, err, e.op.Requests("/oauth/token"))
	}
}

func TestProviderBadInput(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("<html>not json")) }))
	defer garbage.Close()
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	for _, tt := range []struct{ name, issuer string }{
		{"garbage", garbage.URL + "/"},
		{"down", down.URL + "/"},
		{"not https", "http://example.com/"},
		{"issuer mismatch", strings.Replace(e.op.Issuer, "127.0.0.1", "localhost", 1)},
	} {
		if _, err := e.vault.AddProvider(ctx, &credential.ProviderParams{Name: "p", Issuer: tt.issuer, ClientID: "x"}); err == nil {
			t.Errorf("%s: AddProvider(%s) succeeded", tt.name, tt.issuer)
		}
	}
	if ps, _ := e.vault.Providers(ctx); len(ps) != 0 {
		t.Errorf("providers after bad input: %+v", ps)
	}
	_ = context.Background
}

// Rekey: every secret (client secret, grant tokens, agent keys) opens
// with the new key alone afterwards, and not with the old one.
func TestRekey(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	if _, err := e.vault.AddProvider(ctx, &credential.ProviderParams{Name: "svc", Issuer: e.op.Issuer, ClientID: oauthtest.ServiceClient,
		ClientSecret: oauthtest.ServiceSecret, Resources: []string{"http://svc.test/"}}); err != nil {
		t.Fatal(err)
	}
	e.addProvider(t, e.vault)
	e.connect(t, e.vault, "helper", "ann")
	if _, _, err := e.vault.IssueAgentToken(ctx, &credential.AgentTokenParams{Issuer: "urn:keel:test", Agent: "helper", User: "ann", Audience: "x"}); err != nil {
		t.Fatal(err)
	}
	nk, _ := credential.ParseKey(credential.GenerateKey())
	n, err := e.vault.Rekey(ctx, nk)
	if err != nil || n != 3 {
		t.Fatalf("Rekey = %d, %v; want 3 secrets (client secret, grant, agent key)", n, err)
	}
	fresh, _ := credential.New(e.store, &credential.Options{Keys: []*credential.Key{nk}, Clock: e.clock.Now})
	if _, err := fresh.Credential(ctx, &credential.Request{Agent: "helper", User: "ann", Resource: "http://api.test/v1"}); err != nil {
		t.Errorf("grant under the new key: %v", err)
	}
	if _, err := fresh.Credential(ctx, &credential.Request{Agent: "ops", Resource: "http://svc.test/x"}); err != nil {
		t.Errorf("client secret under the new key: %v", err)
	}
	if _, _, err := fresh.IssueAgentToken(ctx, &credential.AgentTokenParams{Issuer: "urn:keel:test", Agent: "helper", User: "ann", Audience: "x"}); err != nil {
		t.Errorf("agent key under the new key: %v", err)
	}
	old, _ := credential.New(e.store, &credential.Options{Keys: []*credential.Key{e.key}, Clock: e.clock.Now})
	if _, err := old.Credential(ctx, &credential.Request{Agent: "helper", User: "ann", Resource: "http://api.test/v1"}); !errors.Is(err, credential.ErrWrongKey) {
		t.Errorf("old key after rotation: %v, want ErrWrongKey", err)
	}
}
