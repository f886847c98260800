package credential

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/zitadel/oidc/v3/pkg/client/tokenexchange"
	"github.com/zitadel/oidc/v3/pkg/oidc"
)

// Delegation (RFC 8693). For a provider registered with Delegate, an
// assistant agent never sends the user's own token: the vault exchanges
// it (subject_token = the user's access token) for a delegated token
// limited to the call's effective scopes, the requested ∩ the user's
// granted ∩ the agent's allowed ([Options.AllowedScopes]); a server that
// answers with a wider set is refused. The actor chain (the agent, and
// the agents it acts for in turn, [Request].Actors) is journaled in
// credential.exchanged and credential.used, and its length is capped
// ([Options.MaxDelegationDepth]). Delegated tokens are kept in memory
// only, until shortly before they expire.

// grantTypeTokenExchange is RFC 8693's grant type.
const grantTypeTokenExchange = "urn:ietf:params:oauth:grant-type:token-exchange"

// DefaultMaxDelegationDepth is the longest actor chain by default: an
// agent acting for a user, and one agent acting for that agent.
const DefaultMaxDelegationDepth = 2

type delegatedToken struct {
	token, tokenType string
	scopes           []string
	expiry           time.Time
	hash             string
}

type delegations struct {
	mu sync.Mutex
	m  map[string]*delegatedToken
}

// checkDepth refuses an actor chain longer than the cap.
func (v *Vault) checkDepth(r *Request) error {
	max := v.opts.MaxDelegationDepth
	if max <= 0 {
		max = DefaultMaxDelegationDepth
	}
	if chain := append([]string{r.Agent}, r.Actors...); len(chain) > max {
		return fmt.Errorf("%w: delegation chain %s is longer than %d", ErrNotAllowed, strings.Join(chain, " → "), max)
	}
	return nil
}

// delegate returns c with its token exchanged for a delegated one, when
// the provider asks for delegation and the request acts for a user.
func (v *Vault) delegate(ctx context.Context, p *Provider, r *Request, c *Credential) (*Credential, error) {
	if !p.Delegate || r.User == "" {
		return c, nil
	}
	if err := v.checkDepth(r); err != nil {
		return nil, err // a sub-agent's chain, known only now
	}
	chain := append([]string{r.Agent}, r.Actors...)
	key := c.GrantID + "|" + c.TokenHash + "|" + strings.Join(c.Scopes, " ") + "|" + strings.Join(chain, ",")
	now := v.now()
	v.deleg.mu.Lock()
	d := v.deleg.m[key]
	v.deleg.mu.Unlock()
	if d == nil || !now.Add(v.opts.RefreshBefore).Before(d.expiry) {
		secret, err := p.clientSecret(v)
		if err != nil {
			return nil, err
		}
		te, err := tokenexchange.NewTokenExchangerClientCredentials(ctx, p.Issuer, p.ClientID, secret,
			tokenexchange.WithStaticTokenEndpoint(p.Issuer, p.TokenURL), tokenexchange.WithHTTPClient(v.opts.HTTPClient))
		if err != nil {
			return nil, fmt.Errorf("credential: token exchange at %s: %w", p.Name, err)
		}
		resp, err := tokenexchange.ExchangeToken(ctx, te, c.token, oidc.AccessTokenType, "", "", p.Resources, nil, c.Scopes, oidc.AccessTokenType)
		if err != nil {
			return nil, fmt.Errorf("credential: token exchange at %s refused", p.Name)
		}
		got := normScopes(resp.Scopes)
		if len(got) == 0 {
			got = c.Scopes
		}
		if wider := minus(got, c.Scopes); len(wider) > 0 {
			return nil, fmt.Errorf("%w: provider %s answered the exchange with scopes %s beyond the call's %s", ErrNotAllowed, p.Name, strings.Join(wider, " "), strings.Join(c.Scopes, " "))
		}
		d = &delegatedToken{token: resp.AccessToken, tokenType: resp.TokenType, scopes: got, hash: TokenHash(resp.AccessToken)}
		if resp.ExpiresIn > 0 {
			d.expiry = now.Add(time.Duration(resp.ExpiresIn) * time.Second)
		} else {
			d.expiry = c.Expiry
		}
		v.deleg.mu.Lock()
		if v.deleg.m == nil {
			v.deleg.m = map[string]*delegatedToken{}
		}
		v.deleg.m[key] = d
		v.deleg.mu.Unlock()
		if err := v.audit(ctx, EventExchanged, map[string]any{"grant": c.GrantID, "provider": p.Name, "agent": r.Agent, "user": r.User,
			"actor": chain, "depth": len(chain), "scopes": got, "subject_token_hash": c.TokenHash, "token_hash": d.hash, "expiry": d.expiry,
			"run": r.RunID, "call": r.CallID}); err != nil {
			return nil, err
		}
	}
	out := *c
	out.token, out.tokenType, out.Scopes, out.Expiry, out.TokenHash = d.token, d.tokenType, slices.Clone(d.scopes), d.expiry, d.hash
	out.Actors = chain
	return &out, nil
}
