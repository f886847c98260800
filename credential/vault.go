package credential

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/redact"
	"github.com/keel-run/keel/tool"
)

// Record kinds in the side table.
const (
	kindProvider = "vault.provider"
	kindGrant    = "vault.grant"
	kindPending  = "vault.pending"
)

// Errors callers branch on.
var (
	// ErrNoProvider means no provider covers the resource: the request
	// goes out without a credential (or not at all, as the caller
	// decides).
	ErrNoProvider = errors.New("credential: no provider for this resource")
	// ErrUnknownProvider is wrapped for a provider name that is not
	// registered.
	ErrUnknownProvider = errors.New("credential: no such provider")
	// ErrUnknownGrant is wrapped for a grant id that does not exist.
	ErrUnknownGrant = errors.New("credential: no such grant")
	// ErrNotAllowed means the principal may not have a credential at
	// all (its check failed: a revoked agent), or asked for a scope the
	// agent is not allowed; a person authorizing does not help.
	ErrNotAllowed = errors.New("credential: not allowed")
	// ErrInvalid is wrapped for bad parameters.
	ErrInvalid = errors.New("credential: invalid")
	// ErrNoRecords means the journal store has no side table
	// ([journal.Records]) to keep the vault in.
	ErrNoRecords = errors.New("credential: the journal store cannot hold a vault")
)

// Options configure a [Vault]. The zero value is valid.
type Options struct {
	// Keys are the vault keys: the first seals new secrets, all open old
	// ones (during a rotation). None: the vault can list providers and
	// grants but not issue credentials ([ErrNoKey]).
	Keys []*Key
	// Clock gives the time for expiry, leases and events; nil means
	// time.Now.
	Clock func() time.Time
	// HTTPClient reaches authorization servers; nil means a client with
	// a 30 s timeout.
	HTTPClient *http.Client
	// RefreshBefore is how long before its expiry an access token is
	// refreshed; default 60 s.
	RefreshBefore time.Duration
	// Lease bounds how long one process may hold a grant's refresh lease
	// (then another may take over); default 30 s.
	Lease time.Duration
	// Check is asked before every credential is given out; an error
	// (a revoked agent) stops issuance with [ErrNotAllowed].
	// identity.Directory.Check fits. Nil allows everyone.
	Check func(ctx context.Context, agent, user string) error
	// AllowedScopes, when set, returns the scopes agent may use of
	// provider (nil: any the user granted); the effective scopes of a
	// call are the requested ∩ the granted ∩ these, never wider.
	AllowedScopes func(agent, provider string) []string
	// MaxDelegationDepth caps the actor chain of a delegated call (the
	// agent and [Request].Actors); default [DefaultMaxDelegationDepth].
	MaxDelegationDepth int
	// Logger receives diagnostics (never a secret); nil discards.
	Logger *slog.Logger
}

// Vault is the credential vault of one journal database. It is safe for
// concurrent use, and several Vaults (in several processes) may share one
// database.
type Vault struct {
	store   journal.Store
	records journal.Records
	opts    Options
	owner   string // this Vault's lease owner id
	flight  singleflight.Group
	log     *slog.Logger

	auditMu sync.Mutex // serialises this process's appends to StreamID
	deleg   delegations
}

// New returns the vault kept in store, which must implement
// [journal.Records] ([ErrNoRecords] otherwise). opts may be nil.
func New(store journal.Store, opts *Options) (*Vault, error) {
	rs, ok := store.(journal.Records)
	if !ok {
		return nil, ErrNoRecords
	}
	v := &Vault{store: store, records: rs}
	if opts != nil {
		v.opts = *opts
		v.opts.Keys = slices.Clone(opts.Keys)
	}
	if v.opts.Clock == nil {
		v.opts.Clock = time.Now
	}
	if v.opts.HTTPClient == nil {
		v.opts.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if v.opts.RefreshBefore <= 0 {
		v.opts.RefreshBefore = 60 * time.Second
	}
	if v.opts.Lease <= 0 {
		v.opts.Lease = 30 * time.Second
	}
	v.log = v.opts.Logger
	if v.log == nil {
		v.log = slog.New(slog.DiscardHandler)
	}
	b := make([]byte, 8)
	rand.Read(b)
	v.owner = hex.EncodeToString(b)
	return v, nil
}

func (v *Vault) now() time.Time { return v.opts.Clock().UTC() }

// Request asks [Vault.Credential] for a credential.
type Request struct {
	// Agent is the principal; User the user it acts for ("" for an
	// employee agent acting as itself).
	Agent, User string
	// Resource is the absolute URL the credential will be sent to. The
	// provider is the one whose resources cover it, unless Provider
	// names one.
	Resource string
	Provider string
	// Scopes are the scopes the call needs; none means the provider's
	// default scopes.
	Scopes []string
	// RunID, CallID and Method identify the use for the audit trail and
	// bind an authorization the call waits for to it.
	RunID, CallID, Method string
	// Actors are the agents Agent acts for in turn, nearest first (a
	// sub-agent's parent), for a delegated call's actor chain. For a
	// sub-agent ("PARENT/NAME", a child agent's identity) left empty,
	// they are its parents, up to its root agent.
	Actors []string
	// MaxScopes, when set, bounds the call per provider: its effective
	// scopes are the requested (or the provider's default) ∩ these, and
	// a call with none left is refused ([ErrNotAllowed]). A child
	// agent's bound (tool.Request.MaxScopes).
	MaxScopes map[string][]string
}

// Owner returns the agent whose grants a sub-agent ("PARENT/NAME", a
// child agent's identity) uses: its root agent, before the first '/'.
// Any other name is its own owner.
func Owner(agent string) string {
	root, _, _ := strings.Cut(agent, "/")
	return root
}

// subActors returns the agents a sub-agent acts for, nearest first
// ("a/b/c": "a/b", "a"); none for an agent that is not one.
func subActors(agent string) []string {
	var out []string
	for {
		i := strings.LastIndexByte(agent, '/')
		if i <= 0 {
			return out
		}
		agent = agent[:i]
		out = append(out, agent)
	}
}

// Credential is a token for one call. Its token is a secret: give it only
// to the request it was issued for ([Credential.Apply]), never to a
// model, a log, an event or a file.
type Credential struct {
	// GrantID, Provider and Issuer say where it came from.
	GrantID, Provider, Issuer string
	// Scopes are the effective scopes of the call (see
	// [Options.AllowedScopes]); Granted are all the grant's scopes.
	Scopes, Granted []string
	// Expiry is when the access token expires (zero: unknown).
	Expiry time.Time
	// TokenHash names the token in events ([TokenHash]).
	TokenHash string
	// Actors is the actor chain of a delegated token (RFC 8693): the
	// agent first; empty when the user's own token is used.
	Actors []string

	tokenType, token string
}

// Apply sets the request's Authorization header.
func (c *Credential) Apply(r *http.Request) {
	r.Header.Set("Authorization", c.Header())
}

// Header returns the value of the Authorization header ("Bearer ...").
func (c *Credential) Header() string {
	t := c.tokenType
	if t == "" || strings.EqualFold(t, "bearer") {
		t = "Bearer"
	}
	return t + " " + c.token
}

// Token returns the access token itself, for clients that set it
// themselves (an oauth2.TokenSource). It is a secret.
func (c *Credential) Token() string { return c.token }

// String names the credential without its token.
func (c *Credential) String() string {
	return fmt.Sprintf("credential{grant %s, provider %s, scopes %v, %s}", c.GrantID, c.Provider, c.Scopes, c.TokenHash)
}

// connectHint is the command that ends the wait of an authorization
// required for (provider, agent, user, scopes).
func connectHint(provider, agent, user string, scopes []string) string {
	s := "keel auth connect " + provider + " --agent " + agent
	if user != "" {
		s += " --user " + user
	}
	for _, sc := range scopes {
		s += " --scope " + sc
	}
	return s
}

// grantKey is the record key of (agent, user, provider): one current
// grant each.
func grantKey(agent, user, provider string) string {
	return agent + "/" + user + "/" + provider
}

func checkUser(user string) error {
	if len(user) > 128 || strings.ContainsAny(user, "/\x00\n\r\t ") {
		return fmt.Errorf("%w: user %q: at most 128 characters, no '/', space or control characters", ErrInvalid, user)
	}
	return nil
}

// Credential returns a credential for the request, refreshing the grant's
// access token first when it expires within [Options.RefreshBefore]
// (single-flight across processes). It returns:
//   - an error wrapping [ErrNoProvider] when no provider covers
//     Resource (and Provider is empty): send the request without one;
//   - a [*tool.AuthRequiredError] when a person must authorize first (no
//     grant, a missing scope, a revoked grant, a refresh the server
//     refused): wait, do not fail;
//   - an error wrapping [ErrNotAllowed] when the agent may not have it
//     (revoked agent, a scope outside [Options.AllowedScopes]);
//   - an error wrapping [ErrNoKey] or [ErrWrongKey] for a vault key
//     problem, and other errors (a provider that is down) for transient
//     failures the caller reports as a failed call.
//
// Each credential given out is journaled (credential.used: grant, run,
// call, method, resource, scopes, token hash). Credential is safe for
// concurrent use.
func (v *Vault) Credential(ctx context.Context, r *Request) (*Credential, error) {
	if r.Agent == "" {
		return nil, fmt.Errorf("%w: a credential request names its agent", ErrInvalid)
	}
	if err := checkUser(r.User); err != nil {
		return nil, err
	}
	p, err := v.providerFor(ctx, r.Provider, r.Resource)
	if err != nil {
		return nil, err
	}
	if v.opts.Check != nil {
		if err := v.opts.Check(ctx, r.Agent, r.User); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNotAllowed, err)
		}
	}
	if err := v.checkDepth(r); err != nil {
		return nil, err
	}
	// A sub-agent (a child agent) uses its root agent's grants, within
	// its bound; its chain is journaled with each use.
	owner := Owner(r.Agent)
	if len(r.Actors) == 0 && owner != r.Agent {
		sub := *r
		sub.Actors = subActors(r.Agent)
		r = &sub
	}
	want := r.Scopes
	if len(want) == 0 {
		want = p.Scopes
	}
	want = normScopes(want)
	if v.opts.AllowedScopes != nil {
		for _, a := range []string{r.Agent, owner} {
			if allowed := v.opts.AllowedScopes(a, p.Name); allowed != nil {
				if extra := minus(want, allowed); len(extra) > 0 {
					return nil, fmt.Errorf("%w: agent %s may not use scopes %s of provider %s", ErrNotAllowed, a, strings.Join(extra, " "), p.Name)
				}
			}
			if owner == r.Agent {
				break
			}
		}
	}
	if bound, ok := r.MaxScopes[p.Name]; ok {
		asked := want
		want = slices.DeleteFunc(slices.Clone(want), func(s string) bool { return !slices.Contains(bound, s) })
		if len(want) == 0 {
			return nil, fmt.Errorf("%w: agent %s may use scopes %s of provider %s at most, none of %s", ErrNotAllowed, r.Agent,
				orNone(bound), p.Name, strings.Join(asked, " "))
		}
	}
	need := func(reason, grantID string, missing []string) error {
		return &tool.AuthRequiredError{Provider: p.Name, Issuer: p.Issuer, Agent: owner, User: r.User, Scopes: want, Missing: missing,
			Reason: reason, Grant: grantID, Resource: r.Resource, Hint: connectHint(p.Name, owner, r.User, want)}
	}
	key := grantKey(owner, r.User, p.Name)
	g, sec, err := v.currentGrant(ctx, p, key, r)
	if errors.Is(err, journal.ErrNotFound) {
		return nil, need(tool.AuthMissing, "", nil)
	}
	if err != nil {
		return nil, err
	}
	switch g.Status {
	case statusRevoked:
		return nil, need(tool.AuthRevoked, g.ID, nil)
	case statusExpired:
		return nil, need(tool.AuthExpired, g.ID, nil)
	}
	if missing := minus(want, g.Scopes); len(missing) > 0 {
		return nil, need(tool.AuthScope, g.ID, missing)
	}
	c := &Credential{GrantID: g.ID, Provider: p.Name, Issuer: p.Issuer, Scopes: want, Granted: slices.Clone(g.Scopes),
		Expiry: g.Expiry, TokenHash: g.TokenHash, tokenType: sec.TokenType, token: sec.AccessToken}
	if c, err = v.delegate(ctx, p, r, c); err != nil {
		return nil, err
	}
	if len(c.Actors) == 0 && len(r.Actors) > 0 {
		// A sub-agent's use of its root's grant names the whole chain.
		c.Actors = append([]string{r.Agent}, r.Actors...)
	}
	if r.RunID != "" {
		// No credential leaves the vault without its trace.
		err = v.audit(ctx, EventUsed, &usedPayload{Grant: g.ID, Provider: p.Name, Agent: r.Agent, User: r.User, Run: r.RunID, Call: r.CallID,
			Method: r.Method, Resource: redact.Resource(r.Resource), Scopes: c.Scopes, TokenHash: c.TokenHash, Actor: c.Actors})
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

// currentGrant reads the grant of key, refreshed or fetched as needed.
func (v *Vault) currentGrant(ctx context.Context, p *Provider, key string, r *Request) (*grant, *grantSecret, error) {
	g, sec, _, err := v.readGrant(ctx, key)
	if errors.Is(err, journal.ErrNotFound) && r.User == "" && p.clientCredentials() {
		// An employee agent acting as itself: its own client.
		return v.clientCredentialsGrant(ctx, p, key, Owner(r.Agent))
	}
	if err != nil {
		return nil, nil, err
	}
	if g.Status != statusActive || !v.due(g) {
		return g, sec, nil
	}
	res, err, _ := v.flight.Do(key, func() (any, error) {
		g, sec, err := v.refresh(ctx, p, key)
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

// due reports whether g's access token must be refreshed now.
func (v *Vault) due(g *grant) bool {
	return !g.Expiry.IsZero() && !v.now().Add(v.opts.RefreshBefore).Before(g.Expiry)
}

// providerFor returns the named provider, or the one whose resources
// cover resource.
func (v *Vault) providerFor(ctx context.Context, name, resource string) (*Provider, error) {
	if name != "" {
		return v.Provider(ctx, name)
	}
	ps, err := v.Providers(ctx)
	if err != nil {
		return nil, err
	}
	var best *Provider
	bestLen := -1
	for i := range ps {
		for _, res := range ps[i].Resources {
			if covers(res, resource) && len(res) > bestLen {
				best, bestLen = &ps[i], len(res)
			}
		}
	}
	if best == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoProvider, redact.Resource(resource))
	}
	return best, nil
}

// covers reports whether the resource URL res (RFC 8707: scheme, host,
// port and a path prefix) covers the request URL u. Paths match on
// segment boundaries; query and fragment of u are ignored. A request
// path with a dot segment ("/api/../x", also percent-encoded, after a
// backslash or before a ";" parameter) is covered by no resource with a
// path: the server would resolve it outside the prefix it seems to lie
// under.
func covers(res, u string) bool {
	a, err1 := url.Parse(res)
	b, err2 := url.Parse(u)
	if err1 != nil || err2 != nil || a.Host == "" {
		return false
	}
	if !strings.EqualFold(a.Scheme, b.Scheme) || !strings.EqualFold(hostPort(a), hostPort(b)) {
		return false
	}
	prefix := strings.TrimSuffix(a.EscapedPath(), "/")
	path := b.EscapedPath()
	if prefix == "" {
		return true
	}
	if dotSegments(path) {
		return false
	}
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// dotSegments reports whether an escaped URL path has a "." or ".."
// segment as some server could read it: literally or percent-encoded
// (decoded up to three times, for servers and proxies that decode again),
// with "\" as a separator, and ignoring ";" parameters ("..;/", which
// Java servers resolve as "..").
func dotSegments(p string) bool {
	for range 4 {
		for _, seg := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' }) {
			seg, _, _ = strings.Cut(seg, ";")
			if seg == "." || seg == ".." {
				return true
			}
		}
		d, err := url.PathUnescape(p)
		if err != nil {
			return true // a server may read a malformed escape any way it likes
		}
		if d == p {
			return false
		}
		p = d
	}
	return true
}

func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		switch strings.ToLower(u.Scheme) {
		case "https":
			port = "443"
		case "http":
			port = "80"
		}
	}
	return strings.ToLower(u.Hostname()) + ":" + port
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "(none)"
	}
	return strings.Join(s, " ")
}

func normScopes(s []string) []string {
	var out []string
	for _, x := range s {
		out = append(out, strings.Fields(x)...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// minus returns the elements of a not in b.
func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func decodeJSON(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("credential: a vault record does not decode: %w", err)
	}
	return nil
}

// ProviderFor returns the provider whose resources cover the URL (the
// longest match), or an error wrapping [ErrNoProvider]. It fetches no
// token; the gate uses it to tell a policy which provider a call would
// use.
func (v *Vault) ProviderFor(ctx context.Context, resource string) (*Provider, error) {
	return v.providerFor(ctx, "", resource)
}
