package credential

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"golang.org/x/oauth2"

	"github.com/keel-run/keel/journal"
)

// Errors of the authorization flows.
var (
	// ErrBadState means an authorization response whose state is unknown,
	// used already or expired: replayed or forged. Nothing is stored.
	ErrBadState = errors.New("credential: unknown, used or expired authorization state")
	// ErrIssuerMismatch means the response's iss is not the provider's
	// issuer, or is missing where the server promised it (RFC 9207): a
	// mix-up attack or a misconfiguration. The code is not redeemed.
	ErrIssuerMismatch = errors.New("credential: authorization response from the wrong issuer")
	// ErrDenied means the person (or the server) refused consent.
	ErrDenied = errors.New("credential: authorization denied")
)

// ConnectParams describe an authorization to obtain.
type ConnectParams struct {
	// Provider, Agent and User say whose grant this becomes (User "" for
	// an employee agent's own).
	Provider, Agent, User string
	// Scopes to ask for; none means the provider's.
	Scopes []string
	// RedirectURL receives the response: a loopback URL for the CLI
	// (RFC 8252 §7.3), the server's callback for keel serve.
	RedirectURL string
	// RunID and CallID bind the authorization to the call that waits for
	// it (recorded in credential.granted).
	RunID, CallID string
	// TTL bounds how long the response may take; default 10 minutes.
	TTL time.Duration
	// By names who started the authorization (returned by
	// [Vault.FinishConnect], for the record of who connected).
	By string
}

// Pending is an authorization started by [Vault.BeginConnect].
type Pending struct {
	// URL is where the person consents.
	URL string
	// State is the response's expected state (single use).
	State   string
	Expires time.Time
}

// pending is the stored record of a started authorization, keyed by the
// SHA-256 of its state; the PKCE verifier is sealed.
type pending struct {
	Provider, Agent, User, Redirect, Run, Call string
	By                                         string `json:",omitempty"`
	Scopes                                     []string
	Expires                                    time.Time
	Verifier                                   *sealed
}

func stateKey(state string) string {
	h := sha256.Sum256([]byte(state))
	return hex.EncodeToString(h[:])
}

// BeginConnect starts authorization code with PKCE (RFC 7636, S256): it
// stores the state (bound to provider, agent, user, scopes, run and call)
// and returns the URL to send the person to. The URL carries the
// provider's resources as resource parameters (RFC 8707).
func (v *Vault) BeginConnect(ctx context.Context, cp *ConnectParams) (*Pending, error) {
	if cp.Agent == "" || cp.RedirectURL == "" {
		return nil, fmt.Errorf("%w: an authorization needs an agent and a redirect URL", ErrInvalid)
	}
	p, err := v.connectProvider(ctx, cp)
	if err != nil {
		return nil, err
	}
	if p.AuthURL == "" {
		return nil, fmt.Errorf("%w: provider %s has no authorization endpoint", ErrInvalid, p.Name)
	}
	scopes := connectScopes(cp, p)
	ttl := cp.TTL
	if ttl <= 0 {
		ttl = 10 * time.Minute
	}
	b := make([]byte, 32)
	rand.Read(b)
	state := base64.RawURLEncoding.EncodeToString(b)
	verifier := oauth2.GenerateVerifier()
	key := stateKey(state)
	sv, err := v.opts.Keys[0].seal(kindPending, key, verifier)
	if err != nil {
		return nil, err
	}
	pr := &pending{Provider: p.Name, Agent: cp.Agent, User: cp.User, Redirect: cp.RedirectURL, Run: cp.RunID, Call: cp.CallID,
		By: cp.By, Scopes: scopes, Expires: v.now().Add(ttl), Verifier: sv}
	rec, err := jsonMarshal(pr)
	if err != nil {
		return nil, err
	}
	if _, err := v.records.PutRecord(ctx, kindPending, key, rec, 0); err != nil {
		return nil, fmt.Errorf("credential: store authorization state: %w", err)
	}
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(verifier)}
	for _, r := range p.Resources {
		opts = append(opts, oauth2.SetAuthURLParam("resource", r))
	}
	u := p.oauth(v, cp.RedirectURL, scopes).AuthCodeURL(state, opts...)
	return &Pending{URL: u, State: state, Expires: pr.Expires}, nil
}

// Response is an authorization response as it reached the redirect URL.
type Response struct {
	State, Code, Iss string
	// Error and ErrorDescription are the server's refusal, if any.
	Error, ErrorDescription string
}

// ResponseFrom reads a [Response] from the query of a redirect.
func ResponseFrom(q url.Values) *Response {
	return &Response{State: q.Get("state"), Code: q.Get("code"), Iss: q.Get("iss"), Error: q.Get("error"), ErrorDescription: q.Get("error_description")}
}

// Connection is a completed authorization: the grant, and the run, call
// and person it was started for and by ([ConnectParams]).
type Connection struct {
	Grant             *Grant
	RunID, CallID, By string
}

// CompleteConnect is [Vault.FinishConnect] returning only the grant.
func (v *Vault) CompleteConnect(ctx context.Context, r *Response) (*Grant, error) {
	c, err := v.FinishConnect(ctx, r)
	if err != nil {
		return nil, err
	}
	return c.Grant, nil
}

// FinishConnect finishes an authorization started by [Vault.BeginConnect]:
// the state must be known, unused and unexpired ([ErrBadState]; it is
// consumed either way), the iss must be the provider's
// ([ErrIssuerMismatch]), and then the code is redeemed with the PKCE
// verifier and the grant stored (replacing an earlier grant of the same
// agent, user and provider) and journaled. The returned [Grant] has the
// scopes the server granted, which may be fewer than asked for.
func (v *Vault) FinishConnect(ctx context.Context, r *Response) (*Connection, error) {
	if r.State == "" {
		return nil, fmt.Errorf("%w: the response has no state", ErrBadState)
	}
	key := stateKey(r.State)
	rec, err := v.records.GetRecord(ctx, kindPending, key)
	if errors.Is(err, journal.ErrNotFound) {
		return nil, ErrBadState
	}
	if err != nil {
		return nil, err
	}
	if err := v.records.DeleteRecord(ctx, kindPending, key, rec.Version); err != nil {
		if errors.Is(err, journal.ErrNotFound) || errors.Is(err, journal.ErrConflict) {
			return nil, ErrBadState // consumed concurrently
		}
		return nil, err
	}
	var pr pending
	if err := decodeJSON(rec.Value, &pr); err != nil {
		return nil, err
	}
	if v.now().After(pr.Expires) {
		return nil, fmt.Errorf("%w: the authorization expired at %s", ErrBadState, pr.Expires.Format(time.RFC3339))
	}
	p, err := v.Provider(ctx, pr.Provider)
	if err != nil {
		return nil, err
	}
	switch {
	case r.Iss != "" && r.Iss != p.Issuer:
		return nil, fmt.Errorf("%w: iss %q, want %q", ErrIssuerMismatch, r.Iss, p.Issuer)
	case r.Iss == "" && p.IssParameter:
		return nil, fmt.Errorf("%w: provider %s promises iss in responses (RFC 9207) and this one has none", ErrIssuerMismatch, p.Name)
	}
	if r.Error != "" {
		return nil, fmt.Errorf("%w: %s: %.200s", ErrDenied, r.Error, r.ErrorDescription)
	}
	if r.Code == "" {
		return nil, fmt.Errorf("%w: the response has neither a code nor an error", ErrInvalid)
	}
	var verifier string
	if err := open(v.opts.Keys, kindPending, key, pr.Verifier, &verifier); err != nil {
		return nil, err
	}
	opts := []oauth2.AuthCodeOption{oauth2.VerifierOption(verifier)}
	for _, res := range p.Resources {
		opts = append(opts, oauth2.SetAuthURLParam("resource", res))
	}
	tok, err := p.oauth(v, pr.Redirect, pr.Scopes).Exchange(v.httpCtx(ctx), r.Code, opts...)
	if err != nil {
		return nil, fmt.Errorf("credential: redeem the authorization code at %s: %w", p.Name, safeErr(err))
	}
	g, err := v.storeToken(ctx, p, pr.Agent, pr.User, pr.Scopes, tok, "authorization_code", pr.Run, pr.Call)
	if err != nil {
		return nil, err
	}
	return &Connection{Grant: g, RunID: pr.Run, CallID: pr.Call, By: pr.By}, nil
}

// CallbackHandler serves a redirect URL: it completes the authorization
// and calls done with the outcome (in the request's goroutine), then
// answers the browser with a short page that names no secret.
func (v *Vault) CallbackHandler(done func(*Grant, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		g, err := v.CompleteConnect(req.Context(), ResponseFrom(req.URL.Query()))
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, "Keel: the authorization did not complete: %v\n", err)
		} else {
			fmt.Fprintf(w, "Keel: %s is connected for %s (grant %s, scopes %v). You can close this window.\n", g.Provider, whoOf(g.Agent, g.User), g.ID, g.Scopes)
		}
		if done != nil {
			done(g, err)
		}
	})
}

func whoOf(agent, user string) string {
	if user == "" {
		return agent
	}
	return agent + " acting for " + user
}

// ConnectDevice runs the device authorization flow (RFC 8628): show is
// called with the verification URL and the user code to show the
// person; ConnectDevice then polls until they consent, refuse or the code
// expires (or ctx ends), and stores the grant.
func (v *Vault) ConnectDevice(ctx context.Context, cp *ConnectParams, show func(verificationURL, userCode string)) (*Grant, error) {
	if cp.Agent == "" {
		return nil, fmt.Errorf("%w: an authorization needs an agent", ErrInvalid)
	}
	p, err := v.connectProvider(ctx, cp)
	if err != nil {
		return nil, err
	}
	if p.DeviceURL == "" {
		return nil, fmt.Errorf("%w: provider %s offers no device authorization endpoint", ErrInvalid, p.Name)
	}
	scopes := connectScopes(cp, p)
	cfg := p.oauth(v, "", scopes)
	var opts []oauth2.AuthCodeOption
	for _, r := range p.Resources {
		opts = append(opts, oauth2.SetAuthURLParam("resource", r))
	}
	da, err := cfg.DeviceAuth(v.httpCtx(ctx), opts...)
	if err != nil {
		return nil, fmt.Errorf("credential: device authorization at %s: %w", p.Name, safeErr(err))
	}
	uri := da.VerificationURIComplete
	if uri == "" {
		uri = da.VerificationURI
	}
	show(uri, da.UserCode)
	tok, err := cfg.DeviceAccessToken(v.httpCtx(ctx), da, opts...)
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && (re.ErrorCode == "access_denied" || re.ErrorCode == "expired_token") {
			return nil, fmt.Errorf("%w: %s", ErrDenied, re.ErrorCode)
		}
		return nil, fmt.Errorf("credential: device flow at %s: %w", p.Name, safeErr(err))
	}
	return v.storeToken(ctx, p, cp.Agent, cp.User, scopes, tok, "device_code", cp.RunID, cp.CallID)
}

// connectProvider checks what every way of connecting needs (a valid
// user, a vault key to seal the grant under) and returns cp's provider.
func (v *Vault) connectProvider(ctx context.Context, cp *ConnectParams) (*Provider, error) {
	if err := checkUser(cp.User); err != nil {
		return nil, err
	}
	if len(v.opts.Keys) == 0 {
		return nil, fmt.Errorf("%w: the grant would be sealed under the vault key", ErrNoKey)
	}
	return v.Provider(ctx, cp.Provider)
}

// connectScopes are the scopes cp asks for, or the provider's own.
func connectScopes(cp *ConnectParams, p *Provider) []string {
	if scopes := normScopes(cp.Scopes); len(scopes) > 0 {
		return scopes
	}
	return p.Scopes
}
