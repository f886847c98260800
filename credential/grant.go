package credential

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	"golang.org/x/oauth2"

	"github.com/keel-run/keel/journal"
)

// Grant statuses.
const (
	statusActive  = "active"
	statusRevoked = "revoked"
	statusExpired = "expired" // refresh refused: a person must authorize again
)

// Grant is what a listing shows of a grant: never a token.
type Grant struct {
	ID       string    `json:"id"`
	Agent    string    `json:"agent"`
	User     string    `json:"user,omitempty"`
	Provider string    `json:"provider"`
	Scopes   []string  `json:"scopes"`
	Status   string    `json:"status"`
	Created  time.Time `json:"created"`
	// Refreshed is the newest refresh; Expiry the access token's expiry.
	Refreshed time.Time `json:"refreshed,omitzero"`
	Expiry    time.Time `json:"expiry,omitzero"`
	// TokenHash and RefreshHash name the current tokens ([TokenHash]).
	TokenHash   string `json:"token_hash,omitempty"`
	RefreshHash string `json:"refresh_hash,omitempty"`
	// Refreshes counts refreshes; Rotations those that rotated the
	// refresh token.
	Refreshes int `json:"refreshes,omitempty"`
	Rotations int `json:"rotations,omitempty"`
	// Via is how it was obtained: "authorization_code", "device_code",
	// "client_credentials", "token_exchange".
	Via string `json:"via,omitempty"`
	// RevokedBy and RevokeReason say who revoked it and why.
	RevokedBy    string `json:"revoked_by,omitempty"`
	RevokeReason string `json:"revoke_reason,omitempty"`
}

// grant is the stored record: the public part and the sealed tokens.
type grant struct {
	Grant
	// Lease: the owner refreshing the grant, until when.
	LeaseOwner string    `json:"lease_owner,omitempty"`
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	Secret     *sealed   `json:"secret,omitempty"`
}

// grantSecret is what is sealed.
type grantSecret struct {
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token,omitempty"`
	TokenType    string `json:"token_type,omitempty"`
}

// readGrant reads and opens the grant of key.
func (v *Vault) readGrant(ctx context.Context, key string) (*grant, *grantSecret, int64, error) {
	rec, err := v.records.GetRecord(ctx, kindGrant, key)
	if err != nil {
		return nil, nil, 0, err
	}
	g := &grant{}
	if err := decodeJSON(rec.Value, g); err != nil {
		return nil, nil, 0, err
	}
	sec := &grantSecret{}
	if g.Status == statusActive {
		if err := open(v.opts.Keys, kindGrant, key, g.Secret, sec); err != nil {
			return nil, nil, 0, err
		}
	}
	return g, sec, rec.Version, nil
}

// writeGrant seals sec into g and stores it over version ver (0: new).
func (v *Vault) writeGrant(ctx context.Context, key string, g *grant, sec *grantSecret, ver int64) (int64, error) {
	if sec != nil {
		if len(v.opts.Keys) == 0 {
			return 0, fmt.Errorf("%w: cannot store grant %s", ErrNoKey, g.ID)
		}
		s, err := v.opts.Keys[0].seal(kindGrant, key, sec)
		if err != nil {
			return 0, err
		}
		g.Secret = s
	}
	b, err := jsonMarshal(g)
	if err != nil {
		return 0, err
	}
	return v.records.PutRecord(ctx, kindGrant, key, b, ver)
}

// storeToken makes tok the current grant of (agent, user, provider),
// replacing any earlier grant (which the caller revoked or which
// expired), and journals credential.granted.
func (v *Vault) storeToken(ctx context.Context, p *Provider, agent, user string, requested []string, tok *oauth2.Token, via, run, call string) (*Grant, error) {
	key := grantKey(agent, user, p.Name)
	now := v.now()
	g := &grant{Grant: Grant{ID: "grant_" + strings.ToLower(ulid.Make().String()), Agent: agent, User: user, Provider: p.Name,
		Scopes: grantedScopes(tok, requested), Status: statusActive, Created: now, Expiry: v.expiry(tok),
		TokenHash: TokenHash(tok.AccessToken), RefreshHash: TokenHash(tok.RefreshToken), Via: via}}
	sec := &grantSecret{AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken, TokenType: tok.TokenType}
	if tok.AccessToken == "" {
		return nil, fmt.Errorf("credential: provider %s answered without an access token", p.Name)
	}
	for attempt := 0; ; attempt++ {
		var ver int64
		old, _, oldVer, err := v.readGrant(ctx, key)
		switch {
		case errors.Is(err, journal.ErrNotFound):
		case err != nil && old == nil:
			return nil, err
		default:
			ver = oldVer
		}
		if _, err := v.writeGrant(ctx, key, g, sec, ver); err != nil {
			if errors.Is(err, journal.ErrConflict) && attempt < 10 {
				continue
			}
			return nil, err
		}
		if old != nil && old.Status == statusActive {
			v.audit(ctx, EventReplaced, &revokedPayload{Grant: old.ID, Provider: p.Name, Agent: agent, User: user, Reason: "replaced by " + g.ID})
		}
		break
	}
	v.audit(ctx, EventGranted, &grantedPayload{Grant: g.ID, Provider: p.Name, Issuer: p.Issuer, Agent: agent, User: user,
		Scopes: g.Scopes, Via: via, Run: run, Call: call, TokenHash: g.TokenHash, RefreshHash: g.RefreshHash, Expiry: g.Expiry})
	out := g.Grant
	return &out, nil
}

// expiry computes a token's expiry on the vault's clock (x/oauth2 uses
// the wall clock).
func (v *Vault) expiry(tok *oauth2.Token) time.Time {
	if tok.ExpiresIn > 0 {
		return v.now().Add(time.Duration(tok.ExpiresIn) * time.Second)
	}
	if !tok.Expiry.IsZero() {
		return v.now().Add(time.Until(tok.Expiry))
	}
	return time.Time{}
}

// grantedScopes are the scopes the server says it granted (RFC 6749
// §5.1: when absent, those requested).
func grantedScopes(tok *oauth2.Token, requested []string) []string {
	if s, ok := tok.Extra("scope").(string); ok && s != "" {
		return normScopes([]string{s})
	}
	return normScopes(requested)
}

// refresh refreshes the grant of key, single-flight across processes: it
// takes the grant's lease by compare-and-swap, or waits for whoever holds
// it and uses their result.
func (v *Vault) refresh(ctx context.Context, p *Provider, key string) (*grant, *grantSecret, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*v.opts.Lease)
	defer cancel()
	wait := 5 * time.Millisecond
	for {
		g, sec, ver, err := v.readGrant(ctx, key)
		if err != nil {
			return nil, nil, err
		}
		if g.Status != statusActive || !v.due(g) {
			return g, sec, nil // someone else refreshed (or revoked)
		}
		now := v.now()
		if g.LeaseOwner != "" && g.LeaseOwner != v.owner && now.Before(g.LeaseUntil) {
			// Another process refreshes: wait for its result.
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, nil, fmt.Errorf("credential: waiting for another process to refresh grant %s: %w", g.ID, ctx.Err())
			case <-t.C:
			}
			wait = min(wait*2, 200*time.Millisecond)
			continue
		}
		if sec.RefreshToken == "" {
			if now.Before(g.Expiry) {
				return g, sec, nil // still valid; nothing to refresh with
			}
			return v.expire(ctx, key, g, ver, "the access token expired and the grant has no refresh token")
		}
		g.LeaseOwner, g.LeaseUntil = v.owner, now.Add(v.opts.Lease)
		ver, err = v.writeGrant(ctx, key, g, nil, ver)
		if errors.Is(err, journal.ErrConflict) {
			continue // someone else took it first
		}
		if err != nil {
			return nil, nil, err
		}
		tok, err := p.oauth(v, "", nil).TokenSource(v.httpCtx(ctx), &oauth2.Token{RefreshToken: sec.RefreshToken}).Token()
		if err != nil {
			var re *oauth2.RetrieveError
			if errors.As(err, &re) && (re.ErrorCode == "invalid_grant" || re.ErrorCode == "unauthorized_client") {
				v.log.Warn("refresh refused", "grant", g.ID, "error", re.ErrorCode)
				g.LeaseOwner, g.LeaseUntil = "", time.Time{}
				return v.expire(ctx, key, g, ver, "the provider refused the refresh token ("+re.ErrorCode+")")
			}
			// A provider that is down: release the lease; the old token
			// serves while it lasts.
			g.LeaseOwner, g.LeaseUntil = "", time.Time{}
			v.writeGrant(ctx, key, g, nil, ver)
			if now.Before(g.Expiry) {
				return g, sec, nil
			}
			return nil, nil, fmt.Errorf("credential: refresh grant %s at provider %s: %w", g.ID, p.Name, safeErr(err))
		}
		rotated := tok.RefreshToken != "" && tok.RefreshToken != sec.RefreshToken
		nsec := &grantSecret{AccessToken: tok.AccessToken, RefreshToken: sec.RefreshToken, TokenType: tok.TokenType}
		if tok.RefreshToken != "" {
			nsec.RefreshToken = tok.RefreshToken
		}
		if nsec.TokenType == "" {
			nsec.TokenType = sec.TokenType
		}
		g.LeaseOwner, g.LeaseUntil = "", time.Time{}
		g.Expiry, g.Refreshed = v.expiry(tok), now
		g.TokenHash, g.RefreshHash = TokenHash(nsec.AccessToken), TokenHash(nsec.RefreshToken)
		g.Refreshes++
		if rotated {
			g.Rotations++
		}
		if s, ok := tok.Extra("scope").(string); ok && s != "" {
			g.Scopes = normScopes([]string{s})
		}
		if _, err := v.writeGrant(ctx, key, g, nsec, ver); err != nil {
			// Only a revocation writes over a held lease.
			return nil, nil, fmt.Errorf("credential: store refreshed grant %s: %w", g.ID, err)
		}
		v.audit(ctx, EventRefreshed, &refreshedPayload{Grant: g.ID, Provider: p.Name, Agent: g.Agent, User: g.User,
			TokenHash: g.TokenHash, RefreshHash: g.RefreshHash, Rotated: rotated, Expiry: g.Expiry, Scopes: g.Scopes})
		return g, nsec, nil
	}
}

// expire marks the grant as needing a new authorization.
func (v *Vault) expire(ctx context.Context, key string, g *grant, ver int64, why string) (*grant, *grantSecret, error) {
	g.Status, g.Secret = statusExpired, nil
	if _, err := v.writeGrant(ctx, key, g, nil, ver); err != nil && !errors.Is(err, journal.ErrConflict) {
		return nil, nil, err
	}
	v.audit(ctx, EventExpired, &revokedPayload{Grant: g.ID, Provider: g.Provider, Agent: g.Agent, User: g.User, Reason: why})
	return g, &grantSecret{}, nil
}

// clientCredentialsGrant obtains a token for an employee agent with the
// provider's own client (RFC 6749 §4.4).
func (v *Vault) clientCredentialsGrant(ctx context.Context, p *Provider, key, agent string) (*grant, *grantSecret, error) {
	res, err, _ := v.flight.Do("cc/"+key, func() (any, error) {
		cfg, err := p.clientCredentialsConfig(v)
		if err != nil {
			return nil, err
		}
		tok, err := cfg.Token(v.httpCtx(ctx))
		if err != nil {
			return nil, fmt.Errorf("credential: client credentials at provider %s: %w", p.Name, safeErr(err))
		}
		if _, err := v.storeToken(ctx, p, agent, "", p.Scopes, tok, "client_credentials", "", ""); err != nil {
			return nil, err
		}
		g, sec, _, err := v.readGrant(ctx, key)
		if err != nil {
			return nil, err
		}
		return [2]any{g, sec}, nil
	})
	if err != nil {
		return nil, nil, err
	}
	pair := res.([2]any)
	return pair[0].(*grant), pair[1].(*grantSecret), nil
}

// httpCtx carries the vault's HTTP client to x/oauth2.
func (v *Vault) httpCtx(ctx context.Context) context.Context {
	return context.WithValue(ctx, oauth2.HTTPClient, v.opts.HTTPClient)
}

// safeErr keeps an error from x/oauth2 from carrying a response body
// (which might echo a token) into messages: only the status and the
// OAuth error code survive.
func safeErr(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		code := re.ErrorCode
		if code == "" {
			code = "no error code"
		}
		status := 0
		if re.Response != nil {
			status = re.Response.StatusCode
		}
		return fmt.Errorf("the server answered %d (%s)", status, code)
	}
	return err
}

// Grants lists the current grants, sorted by agent, user and provider.
func (v *Vault) Grants(ctx context.Context) ([]Grant, error) {
	recs, err := v.records.ListRecords(ctx, kindGrant)
	if err != nil {
		return nil, err
	}
	out := make([]Grant, 0, len(recs))
	for _, r := range recs {
		var g grant
		if err := decodeJSON(r.Value, &g); err != nil {
			return nil, err
		}
		out = append(out, g.Grant)
	}
	return out, nil
}
