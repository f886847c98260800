package credential_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/keel-run/keel/credential"
)

// Agent credentials: signed with the agent's Ed25519 key, verified by a
// resource server against the JWKS as served over HTTP; an assistant's
// token names the user as subject and the agent as actor; after a
// rotation tokens of the previous key still verify; wrong audience,
// expiry past the leeway, a foreign key and a revoked agent are refused.
func TestAgentTokens(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	revoked := map[string]bool{}
	v, err := credential.New(e.store, &credential.Options{Keys: []*credential.Key{e.key}, Clock: e.clock.Now,
		Check: func(_ context.Context, agent, _ string) error {
			if revoked[agent] {
				return errors.New("revoked")
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(v.JWKSHandler())
	defer srv.Close()
	fetch := func() *jose.JSONWebKeySet {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var set jose.JSONWebKeySet
		if err := json.NewDecoder(resp.Body).Decode(&set); err != nil {
			t.Fatal(err)
		}
		return &set
	}
	const iss, aud = "https://keel.example/", "https://api.example/"
	tok, _, err := v.IssueAgentToken(ctx, &credential.AgentTokenParams{Issuer: iss, Agent: "ops-bot", Audience: aud})
	if err != nil {
		t.Fatal(err)
	}
	c, err := credential.VerifyAgentToken(tok, fetch(), iss, aud, e.clock.Now())
	if err != nil || c.Subject != "ops-bot" || c.Act != nil || c.ID == "" || (c.Expiry.Time().Sub(e.clock.Now())-5*time.Minute).Abs() > time.Second {
		t.Fatalf("employee token: %+v, %v", c, err)
	}
	atok, _, err := v.IssueAgentToken(ctx, &credential.AgentTokenParams{Issuer: iss, Agent: "helper", User: "ann", Audience: aud})
	if err != nil {
		t.Fatal(err)
	}
	ac, err := credential.VerifyAgentToken(atok, fetch(), iss, aud, e.clock.Now())
	if err != nil || ac.Subject != "ann" || ac.Act == nil || ac.Act.Subject != "helper" {
		t.Fatalf("assistant token: %+v, %v", ac, err)
	}
	if _, err := v.RotateAgentKey(ctx, "ops-bot"); err != nil {
		t.Fatal(err)
	}
	if _, err := credential.VerifyAgentToken(tok, fetch(), iss, aud, e.clock.Now()); err != nil {
		t.Errorf("a token of the previous key after rotation: %v", err)
	}
	tok2, _, _ := v.IssueAgentToken(ctx, &credential.AgentTokenParams{Issuer: iss, Agent: "ops-bot", Audience: aud})
	h1, _ := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.EdDSA})
	h2, _ := jwt.ParseSigned(tok2, []jose.SignatureAlgorithm{jose.EdDSA})
	if h1.Headers[0].KeyID == h2.Headers[0].KeyID {
		t.Errorf("the rotation did not change the signing key")
	}
	if _, err := credential.VerifyAgentToken(tok, fetch(), iss, "https://other/", e.clock.Now()); err == nil {
		t.Errorf("wrong audience verified")
	}
	if _, err := credential.VerifyAgentToken(tok, fetch(), iss, aud, e.clock.Now().Add(7*time.Minute)); err == nil {
		t.Errorf("an expired token verified (beyond the leeway)")
	}
	if _, err := credential.VerifyAgentToken(tok, fetch(), iss, aud, e.clock.Now().Add(5*time.Minute+30*time.Second)); err != nil {
		t.Errorf("30 s of clock skew refused: %v", err)
	}
	// A token signed by a key not in the set, under a known kid.
	_, foreign, _ := ed25519.GenerateKey(nil)
	signer, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: foreign}, (&jose.SignerOptions{}).WithHeader("kid", h2.Headers[0].KeyID))
	forged, _ := jwt.Signed(signer).Claims(jwt.Claims{Issuer: iss, Subject: "ops-bot", Audience: jwt.Audience{aud}, Expiry: jwt.NewNumericDate(e.clock.Now().Add(time.Minute))}).Serialize()
	if _, err := credential.VerifyAgentToken(forged, fetch(), iss, aud, e.clock.Now()); err == nil {
		t.Errorf("a forged token verified")
	}
	revoked["ops-bot"] = true
	if _, _, err := v.IssueAgentToken(ctx, &credential.AgentTokenParams{Issuer: iss, Agent: "ops-bot", Audience: aud}); !errors.Is(err, credential.ErrNotAllowed) {
		t.Errorf("issuance for a revoked agent: %v", err)
	}
	// The JWKS lists the current and previous key of each agent.
	if n := len(fetch().Keys); n != 3 {
		t.Errorf("JWKS has %d keys, want 3 (ops-bot's two, helper's one)", n)
	}
}
