package credential

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/keel-run/keel/journal"
)

// Agent identity: every agent has Ed25519 signing keys held by Keel, in
// the side table (kind vault.agentkey), the private halves sealed under
// the vault key like every secret. [Vault.IssueAgentToken] signs short
// lived JWTs with the newest; [Vault.JWKS] publishes the public halves
// (keel serve serves them at /.well-known/jwks.json), so that a resource
// server verifies an agent's credential without asking Keel.

const kindAgentKey = "vault.agentkey"

// EventIssued: an agent credential (JWT) was issued. EventKeyRotated: an
// agent got a new signing key.
const (
	EventIssued     journal.Type = "credential.issued"
	EventKeyRotated journal.Type = "credential.key_rotated"
)

// keepKeys is how many of an agent's keys stay published: the current one
// and the one before it, so tokens signed just before a rotation verify
// until they expire.
const keepKeys = 2

// MaxAgentTokenTTL bounds an agent credential's lifetime.
const MaxAgentTokenTTL = time.Hour

type agentKeyRecord struct {
	Agent string          `json:"agent"`
	Keys  []agentKeyEntry `json:"keys"` // oldest first; the last signs
}

type agentKeyEntry struct {
	ID      string    `json:"kid"`
	Public  []byte    `json:"public"`
	Created time.Time `json:"created"`
	Private *sealed   `json:"private"`
}

// signingKey returns agent's current key, creating the first one.
func (v *Vault) signingKey(ctx context.Context, agent string) (*agentKeyEntry, ed25519.PrivateKey, error) {
	for attempt := 0; attempt < 5; attempt++ {
		rec, ver, err := v.readAgentKeys(ctx, agent)
		if errors.Is(err, journal.ErrNotFound) {
			if _, err := v.RotateAgentKey(ctx, agent); err != nil && !errors.Is(err, journal.ErrConflict) {
				return nil, nil, err
			}
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		_ = ver
		e := rec.Keys[len(rec.Keys)-1]
		var seed []byte
		if err := open(v.opts.Keys, kindAgentKey, agent+"/"+e.ID, e.Private, &seed); err != nil {
			return nil, nil, err
		}
		return &e, ed25519.NewKeyFromSeed(seed), nil
	}
	return nil, nil, fmt.Errorf("credential: signing key of %s: %w", agent, journal.ErrConflict)
}

func (v *Vault) readAgentKeys(ctx context.Context, agent string) (*agentKeyRecord, int64, error) {
	r, err := v.records.GetRecord(ctx, kindAgentKey, agent)
	if err != nil {
		return nil, 0, err
	}
	var rec agentKeyRecord
	if err := decodeJSON(r.Value, &rec); err != nil {
		return nil, 0, err
	}
	if len(rec.Keys) == 0 {
		return nil, 0, fmt.Errorf("credential: agent %s has an empty key record", agent)
	}
	return &rec, r.Version, nil
}

// EnsureAgentKey gives agent its first Ed25519 signing key unless it has
// one (keel agents create makes it then, not at first use), and returns
// the current key id. It is [ErrNoKey] without a vault key.
func (v *Vault) EnsureAgentKey(ctx context.Context, agent string) (string, error) {
	for attempt := 0; attempt < 5; attempt++ {
		rec, _, err := v.readAgentKeys(ctx, agent)
		if err == nil {
			return rec.Keys[len(rec.Keys)-1].ID, nil
		}
		if !errors.Is(err, journal.ErrNotFound) {
			return "", err
		}
		kid, err := v.RotateAgentKey(ctx, agent)
		if errors.Is(err, journal.ErrConflict) {
			continue // made concurrently
		}
		return kid, err
	}
	return "", fmt.Errorf("credential: signing key of %s: %w", agent, journal.ErrConflict)
}

// RotateAgentKey gives agent a new Ed25519 signing key (its first, if it
// has none) and returns its key id; the previous key stays published
// ([Vault.JWKS]) until the next rotation. It journals
// credential.key_rotated (key ids only).
func (v *Vault) RotateAgentKey(ctx context.Context, agent string) (string, error) {
	if agent == "" || strings.ContainsAny(agent, "/ \x00") {
		return "", fmt.Errorf("%w: agent name %q", ErrInvalid, agent)
	}
	if len(v.opts.Keys) == 0 {
		return "", fmt.Errorf("%w: an agent's private key is sealed under the vault key", ErrNoKey)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	b := make([]byte, 6)
	rand.Read(b)
	kid := agent + "." + hex.EncodeToString(b)
	s, err := v.opts.Keys[0].seal(kindAgentKey, agent+"/"+kid, priv.Seed())
	if err != nil {
		return "", err
	}
	entry := agentKeyEntry{ID: kid, Public: pub, Created: v.now(), Private: s}
	rec, ver, err := v.readAgentKeys(ctx, agent)
	switch {
	case errors.Is(err, journal.ErrNotFound):
		rec, ver = &agentKeyRecord{Agent: agent}, 0
	case err != nil:
		return "", err
	}
	old := ""
	if n := len(rec.Keys); n > 0 {
		old = rec.Keys[n-1].ID
	}
	rec.Keys = append(rec.Keys, entry)
	if len(rec.Keys) > keepKeys {
		rec.Keys = rec.Keys[len(rec.Keys)-keepKeys:]
	}
	val, err := jsonMarshal(rec)
	if err != nil {
		return "", err
	}
	if _, err := v.records.PutRecord(ctx, kindAgentKey, agent, val, ver); err != nil {
		return "", err
	}
	v.audit(ctx, EventKeyRotated, map[string]string{"agent": agent, "kid": kid, "previous": old})
	return kid, nil
}

// JWKS returns the public keys of every agent (the current and the
// previous one each) as a JSON Web Key Set (RFC 7517).
func (v *Vault) JWKS(ctx context.Context) (*jose.JSONWebKeySet, error) {
	recs, err := v.records.ListRecords(ctx, kindAgentKey)
	if err != nil {
		return nil, err
	}
	set := &jose.JSONWebKeySet{Keys: []jose.JSONWebKey{}}
	for _, r := range recs {
		var rec agentKeyRecord
		if err := decodeJSON(r.Value, &rec); err != nil {
			return nil, err
		}
		for _, k := range rec.Keys {
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: ed25519.PublicKey(k.Public), KeyID: k.ID, Algorithm: string(jose.EdDSA), Use: "sig"})
		}
	}
	return set, nil
}

// JWKSHandler serves [Vault.JWKS] (GET, application/json, cacheable for
// a minute).
func (v *Vault) JWKSHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		set, err := v.JWKS(r.Context())
		if err != nil {
			http.Error(w, "keys unavailable", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "public, max-age=60")
		json.NewEncoder(w).Encode(set)
	})
}

// AgentTokenParams describe an agent credential to issue.
type AgentTokenParams struct {
	// Issuer is the Keel deployment's URL (the iss claim).
	Issuer string
	// Agent is the principal; User, for an assistant agent, the user it
	// acts for: the subject is then the user and the agent the actor
	// (RFC 8693 §4.1 act claim).
	Agent, User string
	// Audience is the resource the token is for (the aud claim).
	Audience string
	// TTL is the lifetime; default 5 minutes, at most [MaxAgentTokenTTL].
	TTL time.Duration
	// RunID and CallID, when set, are journaled with the issuance.
	RunID, CallID string
}

// AgentClaims are the claims of an agent credential.
type AgentClaims struct {
	jwt.Claims
	// Act is the actor when an agent acts for a user (RFC 8693 §4.1).
	Act *Actor `json:"act,omitempty"`
	// AgentKind is "employee" or "assistant".
	AgentKind string `json:"keel_agent_kind,omitempty"`
}

// Actor is an RFC 8693 act claim; nested actors form the delegation
// chain, the outermost the current actor.
type Actor struct {
	Subject string `json:"sub"`
	Act     *Actor `json:"act,omitempty"`
}

// IssueAgentToken signs a short-lived JWT for an agent with its current
// key (creating one on first use): iss, sub (the agent, or the user it
// acts for with act.sub the agent), aud, iat, nbf, exp and a random jti.
// It refuses a revoked agent (the vault's Check: [ErrNotAllowed]) and
// journals credential.issued (agent, user, audience, jti, expiry, key
// id). The token is a secret of the caller's.
func (v *Vault) IssueAgentToken(ctx context.Context, p *AgentTokenParams) (string, *AgentClaims, error) {
	if p.Issuer == "" || p.Audience == "" || p.Agent == "" {
		return "", nil, fmt.Errorf("%w: an agent credential needs an issuer, an agent and an audience", ErrInvalid)
	}
	if v.opts.Check != nil {
		if err := v.opts.Check(ctx, p.Agent, p.User); err != nil {
			return "", nil, fmt.Errorf("%w: %w", ErrNotAllowed, err)
		}
	}
	ttl := p.TTL
	if ttl <= 0 {
		ttl = 5 * time.Minute
	}
	ttl = min(ttl, MaxAgentTokenTTL)
	entry, priv, err := v.signingKey(ctx, p.Agent)
	if err != nil {
		return "", nil, err
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: priv},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader(jose.HeaderKey("kid"), entry.ID))
	if err != nil {
		return "", nil, err
	}
	now := v.now()
	jti := make([]byte, 16)
	rand.Read(jti)
	c := &AgentClaims{Claims: jwt.Claims{Issuer: p.Issuer, Subject: p.Agent, Audience: jwt.Audience{p.Audience},
		IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(ttl)),
		ID: hex.EncodeToString(jti)}, AgentKind: "employee"}
	if p.User != "" {
		c.Subject, c.Act, c.AgentKind = p.User, &Actor{Subject: p.Agent}, "assistant"
	}
	tok, err := jwt.Signed(signer).Claims(c).Serialize()
	if err != nil {
		return "", nil, err
	}
	err = v.audit(ctx, EventIssued, map[string]any{"agent": p.Agent, "user": p.User, "audience": p.Audience, "jti": c.ID,
		"expiry": now.Add(ttl), "kid": entry.ID, "run": p.RunID, "call": p.CallID, "token_hash": TokenHash(tok)})
	if err != nil {
		return "", nil, err
	}
	return tok, c, nil
}

// VerifyAgentToken checks an agent credential against a key set (as a
// resource server does with Keel's JWKS): signature (EdDSA, by kid),
// issuer, audience and time (with one minute of leeway for clock skew).
func VerifyAgentToken(token string, keys *jose.JSONWebKeySet, issuer, audience string, now time.Time) (*AgentClaims, error) {
	t, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		return nil, fmt.Errorf("credential: agent token: %w", err)
	}
	if len(t.Headers) != 1 {
		return nil, errors.New("credential: agent token: want one signature")
	}
	ks := keys.Key(t.Headers[0].KeyID)
	if len(ks) == 0 {
		return nil, fmt.Errorf("credential: agent token: unknown key %q", t.Headers[0].KeyID)
	}
	var c AgentClaims
	if err := t.Claims(ks[0].Key, &c); err != nil {
		return nil, fmt.Errorf("credential: agent token: %w", err)
	}
	if err := c.Claims.ValidateWithLeeway(jwt.Expected{Issuer: issuer, AnyAudience: jwt.Audience{audience}, Time: now}, time.Minute); err != nil {
		return nil, fmt.Errorf("credential: agent token: %w", err)
	}
	if c.Act != nil && !slices.Contains([]string{"assistant"}, c.AgentKind) {
		return nil, errors.New("credential: agent token: an act claim on a non-assistant token")
	}
	return &c, nil
}

// SignAsAgent signs msg with agent's current Ed25519 key (making its
// first one if it has none) and returns the key id and the signature.
// Keel signs what it vouches for as an agent this way (an approved
// skill, docs/skills.md); [AgentPublicKey] verifies it.
func (v *Vault) SignAsAgent(ctx context.Context, agent string, msg []byte) (string, []byte, error) {
	e, priv, err := v.signingKey(ctx, agent)
	if err != nil {
		return "", nil, err
	}
	return e.ID, ed25519.Sign(priv, msg), nil
}

// AgentPublicKey returns the public half of agent's key kid from the
// journal's records while it is published (the current key and the one
// before it), or an error wrapping [journal.ErrNotFound]. It needs no
// vault key.
func AgentPublicKey(ctx context.Context, records journal.Records, agent, kid string) (ed25519.PublicKey, error) {
	r, err := records.GetRecord(ctx, kindAgentKey, agent)
	if err != nil {
		return nil, err
	}
	var rec agentKeyRecord
	if err := decodeJSON(r.Value, &rec); err != nil {
		return nil, err
	}
	for _, k := range rec.Keys {
		if k.ID == kid {
			return ed25519.PublicKey(k.Public), nil
		}
	}
	return nil, fmt.Errorf("credential: key %s of agent %s is not published (rotated out): %w", kid, agent, journal.ErrNotFound)
}
