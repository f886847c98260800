package credential

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/keel-run/keel/internal/lazy"
	"github.com/keel-run/keel/journal"
)

// Provider is a registered OAuth 2.1 / OpenID Connect authorization
// server. Its client secret is sealed; listings never show it.
type Provider struct {
	Name     string `json:"name"`
	Issuer   string `json:"issuer"`
	ClientID string `json:"client_id"`
	// Scopes are asked for by default; Resources are the resource URLs
	// its tokens are for (RFC 8707): a credential is only ever added to
	// a request these cover.
	Scopes    []string `json:"scopes,omitempty"`
	Resources []string `json:"resources,omitempty"`
	// Endpoints, from the server's metadata (RFC 8414 or OpenID
	// Connect discovery).
	AuthURL       string `json:"authorization_endpoint"`
	TokenURL      string `json:"token_endpoint"`
	DeviceURL     string `json:"device_authorization_endpoint,omitempty"`
	RevokeURL     string `json:"revocation_endpoint,omitempty"`
	IntrospectURL string `json:"introspection_endpoint,omitempty"`
	// GrantTypes the server supports, as it says.
	GrantTypes []string `json:"grant_types_supported,omitempty"`
	// IssParameter is set when the server sends iss in authorization
	// responses (RFC 9207 authorization_response_iss_parameter_supported).
	IssParameter bool `json:"iss_parameter,omitempty"`
	HasSecret    bool `json:"has_secret,omitempty"`
	// Delegate: an assistant agent's calls use a token exchanged for the
	// user's (RFC 8693), limited to the call's scopes.
	Delegate bool      `json:"delegate,omitempty"`
	Added    time.Time `json:"added"`
	AddedBy  string    `json:"added_by,omitempty"`

	secret *sealed
}

type providerRecord struct {
	Provider
	Secret *sealed `json:"secret,omitempty"`
}

func (p *Provider) clientCredentials() bool {
	return p.HasSecret && slices.Contains(p.GrantTypes, "client_credentials")
}

// ProviderParams describe a provider to add.
type ProviderParams struct {
	Name, Issuer, ClientID string
	// ClientSecret is sealed under the vault key; empty for a public
	// client (PKCE only).
	ClientSecret string
	Scopes       []string
	// Resources default to the issuer's origin? No: none means the
	// provider's tokens are sent nowhere until resources are named.
	Resources []string
	// By names who added it.
	By string
	// Replace allows replacing a provider of the same name.
	Replace bool
	// Delegate asks for RFC 8693 delegation (see [Provider].Delegate); the
	// server must list the token-exchange grant and the client have a
	// secret.
	Delegate bool
}

var providerName = lazy.Regexp(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// AddProvider registers a provider after reading its metadata: OpenID
// Connect discovery, then RFC 8414 (/.well-known/oauth-authorization-server).
// The metadata's issuer must equal Issuer. It journals
// credential.provider_added (without the secret).
func (v *Vault) AddProvider(ctx context.Context, pp *ProviderParams) (*Provider, error) {
	if !providerName().MatchString(pp.Name) {
		return nil, fmt.Errorf("%w: provider name %q: 1 to 64 lowercase letters, digits, '.', '_', '-'", ErrInvalid, pp.Name)
	}
	iu, err := url.Parse(pp.Issuer)
	if err != nil || iu.Host == "" || (iu.Scheme != "https" && !loopback(iu.Hostname())) {
		return nil, fmt.Errorf("%w: issuer %q: an https URL (http only on loopback)", ErrInvalid, pp.Issuer)
	}
	if pp.ClientID == "" {
		return nil, fmt.Errorf("%w: provider %s needs a client id", ErrInvalid, pp.Name)
	}
	for _, r := range pp.Resources {
		ru, err := url.Parse(r)
		if err != nil || ru.Host == "" || (ru.Scheme != "https" && ru.Scheme != "http") || ru.RawQuery != "" || ru.Fragment != "" {
			return nil, fmt.Errorf("%w: resource %q: an absolute http(s) URL without query or fragment (RFC 8707)", ErrInvalid, r)
		}
	}
	meta, err := v.discover(ctx, pp.Issuer)
	if err != nil {
		return nil, err
	}
	p := &Provider{Name: pp.Name, Issuer: meta.Issuer, ClientID: pp.ClientID, Scopes: normScopes(pp.Scopes), Resources: slices.Clone(pp.Resources),
		AuthURL: meta.AuthorizationEndpoint, TokenURL: meta.TokenEndpoint, DeviceURL: meta.DeviceAuthorizationEndpoint,
		RevokeURL: meta.RevocationEndpoint, IntrospectURL: meta.IntrospectionEndpoint,
		IssParameter: meta.AuthorizationResponseIssParameterSupported, HasSecret: pp.ClientSecret != "", Added: v.now(), AddedBy: pp.By}
	for _, g := range meta.GrantTypesSupported {
		p.GrantTypes = append(p.GrantTypes, string(g))
	}
	if len(p.GrantTypes) == 0 {
		p.GrantTypes = []string{"authorization_code", "implicit"} // RFC 8414 §2 default
	}
	if pp.Delegate {
		if !slices.Contains(p.GrantTypes, grantTypeTokenExchange) || pp.ClientSecret == "" {
			return nil, fmt.Errorf("%w: provider %s: delegation needs a server that offers token exchange (RFC 8693) and a client secret", ErrInvalid, pp.Name)
		}
		p.Delegate = true
	}
	rec := providerRecord{Provider: *p}
	if pp.ClientSecret != "" {
		if len(v.opts.Keys) == 0 {
			return nil, fmt.Errorf("%w: a client secret is sealed under the vault key", ErrNoKey)
		}
		s, err := v.opts.Keys[0].seal(kindProvider, p.Name, pp.ClientSecret)
		if err != nil {
			return nil, err
		}
		rec.Secret = s
	}
	b, err := jsonMarshal(rec)
	if err != nil {
		return nil, err
	}
	var ver int64
	if old, err := v.records.GetRecord(ctx, kindProvider, p.Name); err == nil {
		if !pp.Replace {
			return nil, fmt.Errorf("%w: provider %s exists (replace it explicitly)", ErrInvalid, p.Name)
		}
		ver = old.Version
	}
	if _, err := v.records.PutRecord(ctx, kindProvider, p.Name, b, ver); err != nil {
		return nil, fmt.Errorf("credential: add provider %s: %w", p.Name, err)
	}
	v.audit(ctx, EventProviderAdded, &providerPayload{Name: p.Name, Issuer: p.Issuer, ClientID: p.ClientID, Scopes: p.Scopes,
		Resources: p.Resources, HasSecret: p.HasSecret, By: pp.By})
	return p, nil
}

func loopback(host string) bool {
	return host == "localhost" || host == "127.0.0.1" || host == "::1"
}

// discover reads the server's metadata, OIDC first, then RFC 8414, and
// checks that it names the issuer asked for (RFC 8414 §3.3).
func (v *Vault) discover(ctx context.Context, issuer string) (*metadata, error) {
	var errs []error
	trimmed := strings.TrimSuffix(issuer, "/")
	for _, wk := range []string{trimmed + "/.well-known/openid-configuration", rfc8414URL(issuer)} {
		m, err := v.fetchMetadata(ctx, wk)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if m.Issuer != issuer {
			return nil, fmt.Errorf("credential: %s: the metadata names issuer %q, not the one asked for (RFC 8414 §3.3)", issuer, m.Issuer)
		}
		if m.TokenEndpoint == "" {
			return nil, fmt.Errorf("credential: %s: the metadata names no token endpoint", issuer)
		}
		return m, nil
	}
	return nil, fmt.Errorf("credential: no OAuth metadata at %s: %w", issuer, errors.Join(errs...))
}

// metadata is the server's metadata as zitadel/oidc decodes it, plus RFC
// 9207's flag, which its type lacks.
type metadata struct {
	oidc.DiscoveryConfiguration
	AuthorizationResponseIssParameterSupported bool `json:"authorization_response_iss_parameter_supported,omitempty"`
}

func (v *Vault) fetchMetadata(ctx context.Context, wk string) (*metadata, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, wk, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := v.opts.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", wk, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", wk, resp.Status)
	}
	m := &metadata{}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(m); err != nil {
		return nil, fmt.Errorf("%s: not OAuth metadata: %w", wk, err)
	}
	return m, nil
}

// rfc8414URL is the metadata URL of RFC 8414 §3.1: the well-known
// segment is inserted between host and path.
func rfc8414URL(issuer string) string {
	u, err := url.Parse(issuer)
	if err != nil {
		return issuer
	}
	u.Path = "/.well-known/oauth-authorization-server" + strings.TrimSuffix(u.Path, "/")
	return u.String()
}

// Provider returns the named provider, or an error wrapping
// [ErrUnknownProvider].
func (v *Vault) Provider(ctx context.Context, name string) (*Provider, error) {
	rec, err := v.records.GetRecord(ctx, kindProvider, name)
	if errors.Is(err, journal.ErrNotFound) {
		return nil, fmt.Errorf("%w: %q", ErrUnknownProvider, name)
	}
	if err != nil {
		return nil, err
	}
	return decodeProvider(rec.Value)
}

func decodeProvider(b []byte) (*Provider, error) {
	var pr providerRecord
	if err := decodeJSON(b, &pr); err != nil {
		return nil, err
	}
	p := pr.Provider
	p.secret = pr.Secret
	return &p, nil
}

// Providers lists the providers, sorted by name.
func (v *Vault) Providers(ctx context.Context) ([]Provider, error) {
	recs, err := v.records.ListRecords(ctx, kindProvider)
	if err != nil {
		return nil, err
	}
	out := make([]Provider, 0, len(recs))
	for _, r := range recs {
		p, err := decodeProvider(r.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, *p)
	}
	return out, nil
}

// clientSecret opens the provider's client secret ("" for a public client).
func (p *Provider) clientSecret(v *Vault) (string, error) {
	var s string
	if p.secret == nil {
		return "", nil
	}
	if err := open(v.opts.Keys, kindProvider, p.Name, p.secret, &s); err != nil {
		return "", err
	}
	return s, nil
}

// oauth returns the x/oauth2 configuration of the provider. The secret
// is opened on demand; an unopenable secret leaves it empty, and the
// server's refusal says the rest.
func (p *Provider) oauth(v *Vault, redirect string, scopes []string) *oauth2.Config {
	secret, err := p.clientSecret(v)
	if err != nil {
		v.log.Warn("client secret does not open", "provider", p.Name, "error", err)
	}
	style := oauth2.AuthStyleInHeader
	if secret == "" {
		style = oauth2.AuthStyleInParams
	}
	return &oauth2.Config{ClientID: p.ClientID, ClientSecret: secret, RedirectURL: redirect, Scopes: scopes,
		Endpoint: oauth2.Endpoint{AuthURL: p.AuthURL, TokenURL: p.TokenURL, DeviceAuthURL: p.DeviceURL, AuthStyle: style}}
}

func (p *Provider) clientCredentialsConfig(v *Vault) (*clientcredentials.Config, error) {
	secret, err := p.clientSecret(v)
	if err != nil {
		return nil, err
	}
	cfg := &clientcredentials.Config{ClientID: p.ClientID, ClientSecret: secret, TokenURL: p.TokenURL, Scopes: p.Scopes, AuthStyle: oauth2.AuthStyleInHeader}
	if len(p.Resources) > 0 {
		cfg.EndpointParams = url.Values{"resource": p.Resources}
	}
	return cfg, nil
}

func jsonMarshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("credential: %w", err)
	}
	return b, nil
}
