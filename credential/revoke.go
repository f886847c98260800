package credential

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/pkg/client"
	httphelper "github.com/zitadel/oidc/v3/pkg/http"

	"github.com/keel-run/keel/journal"
)

// RevokeParams describe a revocation.
type RevokeParams struct {
	// By names who revoked; Reason says why.
	By, Reason string
}

// Selector picks grants to revoke: one id, or every grant of an agent or
// a user (fields combine with "and").
type Selector struct {
	GrantID, Agent, User string
}

// Revoke revokes the selected active grants: each is marked revoked at
// once (its next use is a [*tool.AuthRequiredError] of [tool.AuthRevoked]), its
// tokens are revoked at the authorization server where it offers RFC
// 7009 (refresh token first, then the access token), and a
// credential.revoked event records whether the server confirmed. It
// returns the grants revoked, or an error wrapping [ErrUnknownGrant] when
// a GrantID matches nothing.
func (v *Vault) Revoke(ctx context.Context, sel Selector, rp *RevokeParams) ([]Grant, error) {
	if rp == nil {
		rp = &RevokeParams{}
	}
	if sel == (Selector{}) {
		return nil, fmt.Errorf("%w: say which grants to revoke", ErrInvalid)
	}
	recs, err := v.records.ListRecords(ctx, kindGrant)
	if err != nil {
		return nil, err
	}
	var out []Grant
	found := false
	for _, rec := range recs {
		var g grant
		if err := decodeJSON(rec.Value, &g); err != nil {
			return nil, err
		}
		if (sel.GrantID != "" && g.ID != sel.GrantID) || (sel.Agent != "" && g.Agent != sel.Agent) || (sel.User != "" && g.User != sel.User) {
			continue
		}
		found = true
		if g.Status == statusRevoked {
			continue
		}
		rg, err := v.revokeOne(ctx, rec.Key, rp)
		if err != nil {
			return out, err
		}
		if rg != nil {
			out = append(out, *rg)
		}
	}
	if sel.GrantID != "" && !found {
		return nil, fmt.Errorf("%w: %s", ErrUnknownGrant, sel.GrantID)
	}
	return out, nil
}

// revokeOne marks the grant of key revoked (retrying a concurrent
// refresh's write) and then revokes its tokens at the server.
func (v *Vault) revokeOne(ctx context.Context, key string, rp *RevokeParams) (*Grant, error) {
	for attempt := 0; ; attempt++ {
		rec, err := v.records.GetRecord(ctx, kindGrant, key)
		if err != nil {
			return nil, err
		}
		var g grant
		if err := decodeJSON(rec.Value, &g); err != nil {
			return nil, err
		}
		if g.Status == statusRevoked {
			return nil, nil
		}
		sec := &grantSecret{}
		openErr := open(v.opts.Keys, kindGrant, key, g.Secret, sec)
		g.Status, g.Secret, g.RevokedBy, g.RevokeReason = statusRevoked, nil, rp.By, rp.Reason
		g.LeaseOwner, g.LeaseUntil = "", time.Time{}
		if _, err := v.writeGrant(ctx, key, &g, nil, rec.Version); err != nil {
			if errors.Is(err, journal.ErrConflict) && attempt < 20 {
				continue
			}
			return nil, err
		}
		ev := &revokedPayload{Grant: g.ID, Provider: g.Provider, Agent: g.Agent, User: g.User, By: rp.By, Reason: rp.Reason}
		if openErr != nil {
			ev.ServerError = "tokens not revoked at the server: " + openErr.Error()
		} else if err := v.revokeAtServer(ctx, g.Provider, sec); err != nil {
			ev.ServerError = err.Error()
		} else {
			ev.AtServer = true
		}
		v.audit(ctx, EventRevoked, ev)
		return &g.Grant, nil
	}
}

// revokeAtServer revokes the tokens at the provider (RFC 7009).
func (v *Vault) revokeAtServer(ctx context.Context, provider string, sec *grantSecret) error {
	p, err := v.Provider(ctx, provider)
	if err != nil {
		return err
	}
	if p.RevokeURL == "" {
		return errors.New("the provider offers no revocation endpoint")
	}
	secret, err := p.clientSecret(v)
	if err != nil {
		return err
	}
	caller := revokeCaller{url: p.RevokeURL, client: v.opts.HTTPClient}
	for _, t := range []struct{ tok, hint string }{{sec.RefreshToken, "refresh_token"}, {sec.AccessToken, "access_token"}} {
		if t.tok == "" {
			continue
		}
		req := client.RevokeRequest{Token: t.tok, TokenTypeHint: t.hint}
		var auth any
		if secret != "" {
			auth = httphelper.AuthorizeBasic(p.ClientID, secret)
		} else {
			req.ClientID = p.ClientID
		}
		if err := client.CallRevokeEndpoint(ctx, req, auth, caller); err != nil {
			return fmt.Errorf("revocation at %s refused (%s)", p.Name, t.hint)
		}
	}
	return nil
}

type revokeCaller struct {
	url    string
	client *http.Client
}

func (c revokeCaller) GetRevokeEndpoint() string { return c.url }
func (c revokeCaller) HttpClient() *http.Client  { return c.client }

// Rekey seals every secret of the vault (client secrets, grants, pending
// authorizations) again under key, which then comes first in the
// vault's keys. Secrets are opened with the keys the vault has; one that
// does not open stops the rotation with an error wrapping [ErrWrongKey]
// or [ErrNoKey] (what was re-sealed before stays valid under the new
// key, which the caller keeps either way). It returns the number of
// secrets re-sealed and journals credential.rekeyed (key ids only).
func (v *Vault) Rekey(ctx context.Context, key *Key) (int, error) {
	keys := append([]*Key{key}, v.opts.Keys...)
	n := 0
	for _, kind := range []string{kindProvider, kindGrant, kindPending, kindSecret, kindSealed} {
		recs, err := v.records.ListRecords(ctx, kind)
		if err != nil {
			return n, err
		}
		for _, rec := range recs {
			var m map[string]json.RawMessage
			if err := decodeJSON(rec.Value, &m); err != nil {
				return n, err
			}
			field := "secret"
			if kind == kindPending {
				field = "Verifier"
			}
			raw, ok := m[field]
			if !ok || string(raw) == "null" {
				continue
			}
			var s sealed
			if err := json.Unmarshal(raw, &s); err != nil {
				return n, fmt.Errorf("credential: %s %s: %w", kind, rec.Key, err)
			}
			if s.KeyID == key.ID() {
				continue
			}
			var plain json.RawMessage
			if err := open(keys, kind, rec.Key, &s, &plain); err != nil {
				return n, err
			}
			ns, err := key.seal(kind, rec.Key, plain)
			if err != nil {
				return n, err
			}
			if m[field], err = json.Marshal(ns); err != nil {
				return n, err
			}
			if kind == kindSecret {
				// A secret stored before hashes were keyed gets a keyed one.
				var hash, value string
				json.Unmarshal(m["hash"], &hash)
				if !strings.HasPrefix(hash, secretHashPrefix) && json.Unmarshal(plain, &value) == nil {
					if m["hash"], err = json.Marshal(key.secretHash(value)); err != nil {
						return n, err
					}
				}
			}
			b, err := json.Marshal(m)
			if err != nil {
				return n, err
			}
			if _, err := v.records.PutRecord(ctx, kind, rec.Key, b, rec.Version); err != nil {
				return n, fmt.Errorf("credential: re-seal %s %s (changed meanwhile; run the rotation again): %w", kind, rec.Key, err)
			}
			n++
		}
	}
	// Agent signing keys: one sealed private key per entry.
	recs, err := v.records.ListRecords(ctx, kindAgentKey)
	if err != nil {
		return n, err
	}
	for _, rec := range recs {
		var ar agentKeyRecord
		if err := decodeJSON(rec.Value, &ar); err != nil {
			return n, err
		}
		changed := 0
		for i := range ar.Keys {
			e := &ar.Keys[i]
			aad := ar.Agent + "/" + e.ID
			if e.Private == nil || e.Private.KeyID == key.ID() {
				continue
			}
			var seed []byte
			if err := open(keys, kindAgentKey, aad, e.Private, &seed); err != nil {
				return n, err
			}
			if e.Private, err = key.seal(kindAgentKey, aad, seed); err != nil {
				return n, err
			}
			changed++
		}
		if changed == 0 {
			continue
		}
		b, err := jsonMarshal(ar)
		if err != nil {
			return n, err
		}
		if _, err := v.records.PutRecord(ctx, kindAgentKey, rec.Key, b, rec.Version); err != nil {
			return n, fmt.Errorf("credential: re-seal the keys of agent %s (changed meanwhile; run the rotation again): %w", ar.Agent, err)
		}
		n += changed
	}
	old := ""
	if len(v.opts.Keys) > 0 {
		old = v.opts.Keys[0].ID()
	}
	v.opts.Keys = keys
	v.audit(ctx, EventRekeyed, map[string]any{"key": key.ID(), "old_key": old, "secrets": n})
	return n, nil
}
