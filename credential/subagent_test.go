package credential_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/oauthtest"
	"github.com/keel-run/keel/tool"
)

// TestSubAgentCredentials: a child agent ("helper/investigator", the
// identity a child run acts as) has no grant of its own: it uses its
// root agent's, on the real OP by token exchange with the actor chain
// (child, parent) and at most the scopes of its bound; a bound with
// nothing left, a revoked child and a chain past the cap get nothing;
// each use is journaled under the child's name with its chain.
func TestSubAgentCredentials(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	dir := identity.NewDirectory(e.store, nil)
	if _, err := dir.Create(ctx, &identity.CreateParams{Name: "helper", Kind: identity.Assistant}); err != nil {
		t.Fatal(err)
	}
	v, _ := credential.New(e.store, &credential.Options{Keys: []*credential.Key{e.key}, Clock: e.clock.Now,
		Check: func(ctx context.Context, agent, user string) error { _, err := dir.Check(ctx, agent, user); return err }})
	if _, err := v.AddProvider(ctx, &credential.ProviderParams{Name: "op", Issuer: e.op.Issuer, ClientID: oauthtest.WebClient, ClientSecret: oauthtest.WebSecret,
		Scopes: []string{"openid", "offline_access"}, Resources: []string{"http://api.test/v1"}, Delegate: true}); err != nil {
		t.Fatal(err)
	}
	pend, err := v.BeginConnect(ctx, &credential.ConnectParams{Provider: "op", Agent: "helper", User: "ann", Scopes: []string{"openid", "offline_access", "email"}, RedirectURL: oauthtest.RedirectURL})
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
	const child = "helper/investigator"
	bound := map[string][]string{"op": {"openid"}}
	c, err := v.Credential(ctx, &credential.Request{Agent: child, User: "ann", Resource: "http://api.test/v1/x", Scopes: []string{"openid", "email"},
		MaxScopes: bound, RunID: "r1.c1", CallID: "c9", Method: "GET"})
	if err != nil {
		t.Fatal(err)
	}
	if c.GrantID != g.ID || c.TokenHash == g.TokenHash || !slices.Contains(e.op.Issued(), c.Token()) {
		t.Errorf("credential %v: want a token the OP exchanged for the root's grant %s", c, g.ID)
	}
	if !slices.Equal(c.Scopes, []string{"openid"}) || !slices.Equal(c.Actors, []string{child, "helper"}) {
		t.Errorf("scopes %v, actors %v; want [openid] (the bound) and [%s helper]", c.Scopes, c.Actors, child)
	}
	// Nothing of the bound left: refused, not narrowed to nothing.
	if _, err := v.Credential(ctx, &credential.Request{Agent: child, User: "ann", Resource: "http://api.test/v1/x", Scopes: []string{"email"}, MaxScopes: bound}); !errors.Is(err, credential.ErrNotAllowed) {
		t.Errorf("a scope outside the child's bound: %v, want ErrNotAllowed", err)
	}
	if _, err := v.Credential(ctx, &credential.Request{Agent: child, User: "ann", Resource: "http://api.test/v1/x", MaxScopes: map[string][]string{"op": {}}}); !errors.Is(err, credential.ErrNotAllowed) {
		t.Errorf("a child bound to no scope of op: %v, want ErrNotAllowed", err)
	}
	// A grandchild's chain (3) is past the default cap for an exchange.
	if _, err := v.Credential(ctx, &credential.Request{Agent: child + "/x", User: "ann", Resource: "http://api.test/v1/x"}); !errors.Is(err, credential.ErrNotAllowed) {
		t.Errorf("a grandchild's exchange: %v, want ErrNotAllowed (depth)", err)
	}
	// The child of an agent with no grant waits for its root's.
	var ar *tool.AuthRequiredError
	if _, err := v.Credential(ctx, &credential.Request{Agent: child, User: "bob", Resource: "http://api.test/v1/x"}); !errors.As(err, &ar) || ar.Agent != "helper" {
		t.Errorf("no grant for bob: %v, want an authorization of helper", err)
	}
	// Revoking the child alone stops its credentials, not its parent's;
	// revoking the parent stops both.
	if _, err := dir.Revoke(ctx, child, &identity.RevokeParams{By: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Credential(ctx, &credential.Request{Agent: child, User: "ann", Resource: "http://api.test/v1/x"}); !errors.Is(err, credential.ErrNotAllowed) {
		t.Errorf("revoked child: %v, want ErrNotAllowed", err)
	}
	if _, err := v.Credential(ctx, &credential.Request{Agent: "helper/editor", User: "ann", Resource: "http://api.test/v1/x"}); err != nil {
		t.Errorf("its sibling: %v", err)
	}
	if _, err := dir.Revoke(ctx, "helper", &identity.RevokeParams{By: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Credential(ctx, &credential.Request{Agent: "helper/editor", User: "ann", Resource: "http://api.test/v1/x"}); !errors.Is(err, credential.ErrNotAllowed) {
		t.Errorf("child of a revoked agent: %v, want ErrNotAllowed", err)
	}
	evs, _ := e.store.Read(ctx, credential.StreamID, 1)
	used := 0
	for _, ev := range evs {
		if ev.Type != credential.EventUsed {
			continue
		}
		var p struct {
			Agent, Run string
			Actor      []string
			Scopes     []string
		}
		json.Unmarshal(ev.Payload, &p)
		if p.Run == "r1.c1" {
			used++
			if p.Agent != child || !slices.Equal(p.Actor, []string{child, "helper"}) || !slices.Equal(p.Scopes, []string{"openid"}) {
				t.Errorf("credential.used %s: want agent %s, actor chain and scopes [openid]", ev.Payload, child)
			}
		}
	}
	if used != 1 {
		t.Errorf("%d credential.used of the child's call, want 1", used)
	}
}
