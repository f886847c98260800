package mcp

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

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/redact"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin/web"
)

// Vault is what MCP authorization needs of Keel's credential vault
// ([*credential.Vault] implements it).
type Vault interface {
	Credential(ctx context.Context, r *credential.Request) (*credential.Credential, error)
	ProviderFor(ctx context.Context, url string) (*credential.Provider, error)
	Provider(ctx context.Context, name string) (*credential.Provider, error)
	AddProvider(ctx context.Context, pp *credential.ProviderParams) (*credential.Provider, error)
}

// Auth authorizes a streamable-HTTP server with tokens from the vault, as
// the MCP specification's authorization says: a server that answers 401
// names its protected resource metadata (RFC 9728), whose authorization
// server becomes (or already is) a vault provider whose only resource is
// the server (RFC 8707); the vault runs authorization code with PKCE and
// the issuer check (RFC 9207) when a person connects, keeps and refreshes
// the grant, and the token goes only to the server's endpoint. A missing,
// revoked or under-scoped grant is an [*tool.AuthRequiredError] at the
// call (a durable auth.required wait), never a failed call.
type Auth struct {
	Vault Vault
	// Agent and User: whose grant is used (User "" for an employee agent
	// acting as itself). A call's own principal and user take precedence.
	Agent, User string
	// Provider names the vault provider to use; "" means the provider
	// whose resources cover the server's URL, or one registered on first
	// contact as [ProviderName] of the server.
	Provider string
	// The client a provider registered on first contact uses: a client
	// pre-registered with the authorization server (ClientID, with
	// ClientSecret for a confidential one), or Keel's client ID metadata
	// document (ClientMetadataURL, an https URL) where the server accepts
	// those.
	ClientID, ClientSecret, ClientMetadataURL string
	// Scopes are asked for by a provider registered on first contact;
	// none means the scopes of the resource metadata.
	Scopes []string
	// MaxScopes, when set, bounds the credentials per provider (a child
	// agent's bound; see credential.Request.MaxScopes).
	MaxScopes map[string][]string
}

// ProviderName is the name of the vault provider registered for the MCP
// server name on first contact: "mcp-" and the name in lower case.
func ProviderName(server string) string {
	return "mcp-" + strings.ToLower(server)
}

// caller is who a request to the server is made for.
type caller struct{ agent, user, run, call string }

type callerKey struct{}

func withCaller(ctx context.Context, req *tool.Request) context.Context {
	return context.WithValue(ctx, callerKey{}, caller{agent: req.Principal, user: req.OnBehalfOf, run: req.RunID, call: req.CallID})
}

// who returns the agent and user a request is made for, the call's when
// it has them.
func (c *Client) who(ctx context.Context) caller {
	a := c.opts.Auth
	w, _ := ctx.Value(callerKey{}).(caller)
	if w.agent == "" {
		w.agent, w.user = a.Agent, a.User
	}
	return w
}

// bound returns the vault provider the server's tokens come from ("" if
// the server asked for none yet) and the scopes its calls need.
func (c *Client) bound() (string, []string) {
	c.amu.Lock()
	defer c.amu.Unlock()
	return c.provider, slices.Clone(c.scopes)
}

// AuthRequired returns what a person must authorize before the server's
// tools can be listed: non-nil when [Connect] found the server needs a
// grant the vault does not have. The tools registered then are those
// pinned by an earlier run, whose calls wait for the authorization.
func (c *Client) AuthRequired() *tool.AuthRequiredError {
	c.mu.Lock()
	connected := c.session != nil
	c.mu.Unlock()
	if connected {
		return nil
	}
	c.amu.Lock()
	defer c.amu.Unlock()
	return c.waiting
}

// credentialFor asks the vault for the server's token.
func (c *Client) credentialFor(ctx context.Context, w caller) (*credential.Credential, error) {
	p, scopes := c.bound()
	return c.opts.Auth.Vault.Credential(ctx, &credential.Request{Agent: w.agent, User: w.user, Provider: p, Resource: c.srv.URL,
		Scopes: scopes, RunID: w.run, CallID: w.call, Method: "POST", MaxScopes: c.opts.Auth.MaxScopes})
}

// authorizeCall is an MCP tool's Authorize hook: a grant a person must
// give first becomes a [tool.AuthRequiredError].
func (c *Client) authorizeCall(ctx context.Context, req *tool.Request) error {
	if c.opts.Auth == nil {
		return nil
	}
	if p, _ := c.bound(); p == "" {
		return nil // the server asked for no authorization
	}
	w := c.who(withCaller(ctx, req))
	w.run, w.call = "", "" // a check, not a use
	_, err := c.credentialFor(ctx, w)
	if ar := tool.AuthRequired(err); ar != nil {
		return ar
	}
	return nil
}

// vaultTransport adds the vault's token to requests to the server's
// endpoint, and only to those: a redirect elsewhere, or any other URL,
// goes without it.
type vaultTransport struct {
	c    *Client
	base http.RoundTripper
}

func (t *vaultTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	p, _ := t.c.bound()
	if p == "" || !sameEndpoint(req.URL, t.c.srv.URL) {
		return t.base.RoundTrip(req)
	}
	cred, err := t.c.credentialFor(req.Context(), t.c.who(req.Context()))
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		if ar := tool.AuthRequired(err); ar != nil {
			t.c.setWaiting(ar)
		}
		return nil, fmt.Errorf("no credential for MCP server %s: %w", t.c.srv.Name, err)
	}
	r := req.Clone(req.Context())
	cred.Apply(r)
	return t.base.RoundTrip(r)
}

func (c *Client) setWaiting(ar *tool.AuthRequiredError) {
	c.amu.Lock()
	c.waiting = ar
	c.amu.Unlock()
}

// sameEndpoint reports whether u is the server's endpoint (scheme, host,
// port and path; the query is the transport's).
func sameEndpoint(u *url.URL, endpoint string) bool {
	e, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	return strings.EqualFold(u.Scheme, e.Scheme) && strings.EqualFold(hostPort(u), hostPort(e)) &&
		strings.TrimSuffix(u.EscapedPath(), "/") == strings.TrimSuffix(e.EscapedPath(), "/")
}

func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
	}
	return strings.ToLower(u.Hostname()) + ":" + port
}

// vaultHandler is the SDK's OAuthHandler of a vault-authorized server:
// the transport adds the tokens ([vaultTransport]); a 401 or 403 binds
// the server to its vault provider and asks the vault for a grant.
type vaultHandler struct{ c *Client }

var _ auth.OAuthHandler = vaultHandler{}

// TokenSource implements auth.OAuthHandler: none, the transport adds the
// token (with the call it is used for, for the audit).
func (vaultHandler) TokenSource(context.Context) (oauth2.TokenSource, error) { return nil, nil }

// Authorize implements auth.OAuthHandler. A nil error makes the SDK send
// the request again, now with the vault's token.
func (h vaultHandler) Authorize(ctx context.Context, req *http.Request, resp *http.Response) error {
	defer resp.Body.Close()
	defer io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	c := h.c
	chs, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	if err != nil {
		return fmt.Errorf("mcp server %s: %s with a WWW-Authenticate header that does not parse: %v", c.srv.Name, resp.Status, err)
	}
	var scopes []string
	errCode := ""
	for _, ch := range chs {
		if ch.Scheme == "bearer" {
			scopes, errCode = strings.Fields(ch.Params["scope"]), ch.Params["error"]
		}
	}
	if resp.StatusCode == http.StatusForbidden && errCode != "insufficient_scope" {
		return fmt.Errorf("mcp server %s refused the request: %s", c.srv.Name, resp.Status)
	}
	p, err := c.bindProvider(ctx, chs, scopes)
	if err != nil {
		return err
	}
	c.amu.Lock()
	if resp.StatusCode == http.StatusForbidden {
		// Step-up (insufficient_scope): the calls need these scopes too.
		c.scopes = slices.Compact(slices.Sorted(slices.Values(append(c.scopes, scopes...))))
	}
	c.amu.Unlock()
	cred, err := c.credentialFor(ctx, c.who(ctx))
	if err != nil {
		if ar := tool.AuthRequired(err); ar != nil {
			c.setWaiting(ar)
		}
		return fmt.Errorf("mcp server %s: %w", c.srv.Name, err)
	}
	if sent, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer "); ok && credential.TokenHash(sent) == cred.TokenHash {
		// The server refused the very token the vault holds.
		return fmt.Errorf("mcp server %s refused the token of grant %s of provider %s (%s %s); revoke it and connect again (keel auth revoke %s, keel auth connect %s)",
			c.srv.Name, cred.GrantID, p.Name, resp.Status, errCode, cred.GrantID, p.Name)
	}
	return nil
}

// bindProvider finds the vault provider of the server (registering one on
// first contact) from its protected resource metadata, and checks that
// its issuer is one the server names and that its resources cover the
// server: a token of another server's provider is never sent here.
func (c *Client) bindProvider(ctx context.Context, chs []oauthex.Challenge, scopes []string) (*credential.Provider, error) {
	a := c.opts.Auth
	prm, err := c.resourceMetadata(ctx, chs)
	if err != nil {
		return nil, err
	}
	var p *credential.Provider
	if a.Provider != "" {
		p, err = a.Vault.Provider(ctx, a.Provider)
	} else {
		p, err = a.Vault.ProviderFor(ctx, c.srv.URL)
		if errors.Is(err, credential.ErrNoProvider) {
			p, err = c.addProvider(ctx, prm, scopes)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("mcp server %s: %w", c.srv.Name, err)
	}
	if !slices.ContainsFunc(prm.AuthorizationServers, func(s string) bool { return sameIssuer(s, p.Issuer) }) {
		return nil, fmt.Errorf("mcp server %s: provider %s (issuer %s) is not an authorization server of %s, whose metadata names %s: its tokens are not sent there",
			c.srv.Name, p.Name, p.Issuer, redact.URL(c.srv.URL), strings.Join(prm.AuthorizationServers, ", "))
	}
	if cov, err := a.Vault.ProviderFor(ctx, c.srv.URL); err != nil || cov.Name != p.Name {
		return nil, fmt.Errorf("mcp server %s: provider %s's resources (%s) do not cover %s: its tokens are not sent there (add the resource %s)",
			c.srv.Name, p.Name, strings.Join(p.Resources, ", "), redact.URL(c.srv.URL), prm.Resource)
	}
	c.amu.Lock()
	c.provider = p.Name
	c.amu.Unlock()
	return p, nil
}

func sameIssuer(a, b string) bool { return strings.TrimSuffix(a, "/") == strings.TrimSuffix(b, "/") }

// resourceMetadata fetches the server's protected resource metadata
// (RFC 9728) where the MCP specification says to look: the URL of the
// challenge, then the well-known URL of the endpoint's path, then of its
// root. The SDK checks that it names the resource asked for and that its
// authorization servers are https (or loopback) URLs.
func (c *Client) resourceMetadata(ctx context.Context, chs []oauthex.Challenge) (*oauthex.ProtectedResourceMetadata, error) {
	type try struct{ url, resource string }
	var tries []try
	for _, ch := range chs {
		if u := ch.Params["resource_metadata"]; u != "" {
			tries = append(tries, try{u, c.srv.URL})
		}
	}
	if ru, err := url.Parse(c.srv.URL); err == nil {
		mu := *ru
		mu.RawQuery, mu.Fragment = "", ""
		mu.Path = "/.well-known/oauth-protected-resource/" + strings.TrimLeft(ru.Path, "/")
		tries = append(tries, try{mu.String(), c.srv.URL})
		mu.Path = "/.well-known/oauth-protected-resource"
		root := *ru
		root.Path, root.RawQuery, root.Fragment = "", "", ""
		tries = append(tries, try{mu.String(), root.String()})
	}
	hc := c.httpClient()
	var errs []error
	for _, t := range tries {
		u, err := url.Parse(t.url)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := web.Allowed(c.opts.Network, u); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", t.url, err))
			continue
		}
		prm, err := oauthex.GetProtectedResourceMetadata(ctx, t.url, t.resource, hc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(prm.AuthorizationServers) == 0 {
			return nil, fmt.Errorf("mcp server %s: its protected resource metadata (%s) names no authorization server", c.srv.Name, t.url)
		}
		return prm, nil
	}
	return nil, fmt.Errorf("mcp server %s asks for authorization but has no usable protected resource metadata (RFC 9728): %w", c.srv.Name, errors.Join(errs...))
}

// addProvider registers the server's authorization server as the vault
// provider [ProviderName], whose only resource is the server.
func (c *Client) addProvider(ctx context.Context, prm *oauthex.ProtectedResourceMetadata, challenged []string) (*credential.Provider, error) {
	a := c.opts.Auth
	issuer := prm.AuthorizationServers[0]
	clientID, secret := a.ClientID, a.ClientSecret
	if clientID == "" && a.ClientMetadataURL != "" {
		asm, err := auth.GetAuthServerMetadata(ctx, issuer, c.httpClient())
		if err != nil {
			return nil, fmt.Errorf("authorization server %s: %w", issuer, err)
		}
		if asm != nil && !asm.ClientIDMetadataDocumentSupported {
			return nil, fmt.Errorf("the authorization server %s of %s does not accept client ID metadata documents: give a pre-registered client_id", issuer, redact.URL(c.srv.URL))
		}
		clientID = a.ClientMetadataURL
	}
	if clientID == "" {
		return nil, fmt.Errorf("%s is protected by the authorization server %s and Keel has no client there: set client_id (pre-registered) or client_metadata_url of [[mcp.servers]] %s, or register the provider yourself: keel auth providers add %s --issuer %s --client-id ID --resource %s",
			redact.URL(c.srv.URL), issuer, c.srv.Name, ProviderName(c.srv.Name), issuer, prm.Resource)
	}
	scopes := a.Scopes
	if len(scopes) == 0 {
		scopes = challenged
	}
	if len(scopes) == 0 {
		scopes = prm.ScopesSupported
	}
	return a.Vault.AddProvider(ctx, &credential.ProviderParams{Name: ProviderName(c.srv.Name), Issuer: issuer, ClientID: clientID, ClientSecret: secret,
		Scopes: scopes, Resources: []string{prm.Resource}, By: "mcp server " + c.srv.Name})
}

// registerPinned registers, while the server waits for an authorization,
// the tools an earlier run pinned (as the model was shown them then):
// their calls wait for the authorization (Authorize), then connect, and
// run only if the server's definition still matches the pin.
func (c *Client) registerPinned(r *tool.Registry, pinned map[string]Pinned) ([]Registered, []string) {
	var names []string
	for name, p := range pinned {
		if strings.HasPrefix(name, c.srv.Name+"__") && p.Pin != "" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var out []Registered
	var notes []string
	for _, name := range names {
		p := pinned[name]
		if p.Description == "" || len(p.InputSchema) == 0 {
			until := "the server is authorized"
			if c.notStarted() {
				until = "the server starts"
			}
			notes = append(notes, fmt.Sprintf("mcp server %s: tool %s left out until %s (its approved definition is not journaled)", c.srv.Name, name, until))
			continue
		}
		old := shown{Description: p.Description, InputSchema: p.InputSchema}
		kt := &tool.Tool{
			Name: name, Description: p.Description, InputSchema: p.InputSchema,
			Effect: tool.External, Scope: func(json.RawMessage) []string { return []string{} }, Server: c.srv.Name, Pin: p.Pin,
			Facts:     func(json.RawMessage) map[string]any { return map[string]any{"annotated": false} },
			Authorize: c.authorizeCall,
			Hold: func() string {
				if remote := c.remoteFor(name); remote != "" {
					return c.holder(remote, p.Pin, old)()
				}
				return c.filesHold()
			},
		}
		if len(c.roots) > 0 {
			kt.State, kt.Exclusive = c.filesState, true
		}
		if err := r.TryAdd(kt, c.pinnedHandler(name, p.Pin)); err != nil {
			notes = append(notes, fmt.Sprintf("mcp server %s: tool %s left out: %v", c.srv.Name, name, err))
			continue
		}
		out = append(out, Registered{Name: name, Pin: p.Pin})
	}
	return out, notes
}

// remoteFor returns the server's name of the Keel tool name ("" when the
// server does not offer it, or is not connected).
func (c *Client) remoteFor(name string) string {
	c.mu.Lock()
	var remotes []string
	for remote := range c.live {
		remotes = append(remotes, remote)
	}
	c.mu.Unlock()
	slices.Sort(remotes)
	for _, remote := range remotes {
		if n, err := c.keelName(remote); err == nil && n == name {
			return remote
		}
	}
	return ""
}

// pinnedHandler runs a tool registered from its pin: it connects first
// (the authorization has been given), and refuses a tool whose
// definition changed, which the gate could not hold before.
func (c *Client) pinnedHandler(name, pin string) tool.Handler {
	return func(ctx context.Context, req *tool.Request) (*tool.Result, error) {
		c.mu.Lock()
		connected := c.session != nil
		c.mu.Unlock()
		if !connected {
			if r := c.mayStart(req); r != nil {
				return r, nil
			}
			if err := c.reconnect(withCaller(ctx, req)); err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				if len(c.srv.Command) > 0 {
					return tool.Errorf("the MCP server %s could not be started: %v", c.srv.Name, err), nil
				}
				return tool.Errorf("the MCP server %s could not be reached with its authorization: %v", c.srv.Name, err), nil
			}
		}
		remote := c.remoteFor(name)
		if remote == "" {
			return tool.Errorf("the MCP server %s no longer offers the tool %s", c.srv.Name, name), nil
		}
		c.mu.Lock()
		now, accepted := Pin(c.live[remote]), c.accepted[remote]
		c.mu.Unlock()
		if now != pin && now != accepted {
			return tool.Errorf("the definition of tool %q of the MCP server %s changed since it was pinned, so it was not called; a new call waits for a person to approve the new definition", remote, c.srv.Name), nil
		}
		return c.handler(remote, pin)(ctx, req)
	}
}
