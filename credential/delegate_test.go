package credential_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/internal/oauthtest"
	"github.com/keel-run/keel/tool"
)

// Delegation on the real OP: an assistant agent's call gets a token the
// OP issued by token exchange (RFC 8693) for the user's, limited to the
// call's scopes (requested ∩ granted ∩ the agent's allowed), never the
// user's own token; the actor chain is journaled and capped; a scope
// outside the agent's allowed is refused, one the user did not grant
// needs an authorization.
func TestDelegationNeverWidens(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	v, _ := credential.New(e.store, &credential.Options{Keys: []*credential.Key{e.key}, Clock: e.clock.Now,
		AllowedScopes: func(agent, provider string) []string { return []string{"openid", "email", "offline_access"} }})
	if _, err := v.AddProvider(ctx, &credential.ProviderParams{Name: "op", Issuer: e.op.Issuer, ClientID: oauthtest.WebClient, ClientSecret: oauthtest.WebSecret,
		Scopes: []string{"openid", "offline_access"}, Resources: []string{"http://api.test/v1"}, Delegate: true}); err != nil {
		t.Fatal(err)
	}
	pend, err := v.BeginConnect(ctx, &credential.ConnectParams{Provider: "op", Agent: "helper", User: "ann", Scopes: []string{"openid", "offline_access", "email", "profile"}, RedirectURL: oauthtest.RedirectURL})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := oauthtest.Login(ctx, pend.URL, e.op.User(), oauthtest.Password)
	if err != nil {
		t.Fatal(err)
	}
	g, err := v.CompleteConnect(ctx, credential.ResponseFrom(cb.Query()))
	if err != nil {
		t.Fatal(err)
	}
	issuedBefore := len(e.op.Issued())
	c, err := v.Credential(ctx, &credential.Request{Agent: "helper", User: "ann", Resource: "http://api.test/v1/x", Scopes: []string{"openid", "email"}, RunID: "r1", CallID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.op.Issued()) == issuedBefore || !slices.Contains(e.op.Issued()[issuedBefore:], c.Token()) {
		t.Fatalf("the credential is not a token the OP issued by exchange")
	}
	if c.TokenHash == g.TokenHash || !slices.Equal(c.Actors, []string{"helper"}) {
		t.Errorf("delegated credential %v: want a new token with actor helper", c)
	}
	if extra := slices.DeleteFunc(slices.Clone(c.Scopes), func(s string) bool { return s == "openid" || s == "email" }); len(extra) > 0 {
		t.Errorf("delegated scopes %v are wider than requested", c.Scopes)
	}
	// (The example OP makes the exchanged token's audience the RFC 8707
	// resource, so no registered client can introspect it; that the OP
	// issued it is checked above.)
	// Cached: the same call again uses the same delegated token.
	c2, _ := v.Credential(ctx, &credential.Request{Agent: "helper", User: "ann", Resource: "http://api.test/v1/x", Scopes: []string{"openid", "email"}})
	if c2 == nil || c2.Token() != c.Token() {
		t.Errorf("a second call exchanged again")
	}
	if _, err := v.Credential(ctx, &credential.Request{Agent: "helper", User: "ann", Resource: "http://api.test/v1/x", Scopes: []string{"profile"}}); !errors.Is(err, credential.ErrNotAllowed) {
		t.Errorf("a scope outside the agent's allowed: %v, want ErrNotAllowed", err)
	}
	var ar *tool.AuthRequiredError
	if _, err := v.Credential(ctx, &credential.Request{Agent: "helper", User: "ann", Resource: "http://api.test/v1/x", Scopes: []string{"openid", "offline_access", "email", "phone"}}); !errors.Is(err, credential.ErrNotAllowed) && !errors.As(err, &ar) {
		t.Errorf("an ungranted scope: %v", err)
	}
	if _, err := v.Credential(ctx, &credential.Request{Agent: "sub", User: "ann", Actors: []string{"helper", "top"}, Resource: "http://api.test/v1/x"}); !errors.Is(err, credential.ErrNotAllowed) {
		t.Errorf("a chain of 3: %v, want ErrNotAllowed (depth)", err)
	}
	evs, _ := e.store.Read(ctx, credential.StreamID, 1)
	exchanged := 0
	for _, ev := range evs {
		if ev.Type == credential.EventExchanged && strings.Contains(string(ev.Payload), `"actor":["helper"]`) {
			exchanged++
		}
		for _, tok := range e.op.Issued() {
			if strings.Contains(string(ev.Payload), tok) {
				t.Errorf("event %s holds a token", ev.Type)
			}
		}
	}
	if exchanged != 1 {
		t.Errorf("%d credential.exchanged events with the actor chain, want 1", exchanged)
	}
}
