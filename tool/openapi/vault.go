package openapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/redact"
	"github.com/keel-run/keel/tool"
)

// Vault is what the connector needs of Keel's credential vault
// ([*credential.Vault] implements it).
type Vault interface {
	Credential(ctx context.Context, r *credential.Request) (*credential.Credential, error)
	ProviderFor(ctx context.Context, url string) (*credential.Provider, error)
}

// errNoToken means no provider covers the URL: the request goes with the
// static token, if any, or without one.
var errNoToken = errors.New("no provider covers the URL")

// provider returns the vault provider of a request to u: the one the API
// names, which must cover u (a token is only ever sent to its
// provider's resources), else the one whose resources cover u.
func (a *API) provider(ctx context.Context, u *url.URL) (*credential.Provider, error) {
	if a.opts.Vault == nil {
		return nil, errNoToken
	}
	p, err := a.opts.Vault.ProviderFor(ctx, redact.Resource(u.String()))
	switch {
	case errors.Is(err, credential.ErrNoProvider) && a.opts.Provider != "":
		return nil, fmt.Errorf("the resources of provider %s do not cover %s: its token is not sent there", a.opts.Provider, redact.Resource(u.String()))
	case errors.Is(err, credential.ErrNoProvider):
		return nil, errNoToken
	case err != nil:
		return nil, err
	case a.opts.Provider != "" && p.Name != a.opts.Provider:
		return nil, fmt.Errorf("%s is a resource of provider %s, not of %s, the API's: no token is sent", redact.Resource(u.String()), p.Name, a.opts.Provider)
	}
	return p, nil
}

// credential returns the vault's credential for a request to u by agent
// for user (nil, errNoToken when no provider covers u). run and call
// journal the use; empty, it is a check.
func (a *API) credential(ctx context.Context, u *url.URL, method, agent, user, run, call string, bound map[string][]string) (*credential.Credential, error) {
	p, err := a.provider(ctx, u)
	if err != nil {
		return nil, err
	}
	if agent == "" {
		agent, user = a.opts.Agent, a.opts.User
	}
	return a.opts.Vault.Credential(ctx, &credential.Request{Agent: agent, User: user, Provider: p.Name, Resource: redact.Resource(u.String()),
		RunID: run, CallID: call, Method: method, MaxScopes: bound})
}

// describe is an operation's Credential hook: the provider the call would
// use, for the policy.
func (a *API) describe(o *operation) func(context.Context, *tool.Request) *policy.CredentialUse {
	return func(ctx context.Context, req *tool.Request) *policy.CredentialUse {
		u, err := a.requestURL(o, req)
		if err != nil {
			return nil
		}
		p, err := a.provider(ctx, u)
		if err != nil {
			return nil
		}
		return &policy.CredentialUse{Provider: p.Name, Resource: redact.Resource(u.String()), Method: o.method, Scopes: p.Scopes}
	}
}

// authorize is an operation's Authorize hook: a grant a person must give
// first becomes a [tool.AuthRequiredError] (a durable auth.required wait).
func (a *API) authorizeCall(o *operation) func(context.Context, *tool.Request) error {
	return func(ctx context.Context, req *tool.Request) error {
		u, err := a.requestURL(o, req)
		if err != nil {
			return nil // the handler reports it
		}
		_, err = a.credential(ctx, u, o.method, req.Principal, req.OnBehalfOf, "", "", req.MaxScopes)
		if ar := tool.AuthRequired(err); ar != nil {
			return ar
		}
		return nil
	}
}

// authorizeDocument adds the credential for fetching the document: the
// vault's when a provider covers it, else the static token.
func (a *API) authorizeDocument(ctx context.Context, req *http.Request) error {
	if a.opts.Vault != nil {
		if _, err := a.opts.Vault.ProviderFor(ctx, redact.Resource(req.URL.String())); errors.Is(err, credential.ErrNoProvider) {
			a.staticToken(req) // a document outside the API's resources
			return nil
		}
	}
	cred, err := a.credential(ctx, req.URL, req.Method, "", "", "", "", nil)
	ar := tool.AuthRequired(err)
	switch {
	case err == nil:
		cred.Apply(req)
	case errors.Is(err, errNoToken):
		a.staticToken(req)
	case ar != nil:
		return fmt.Errorf("openapi %s: the document %s needs an authorization first: %v; authorize with: %s", a.opts.Name, redact.Resource(req.URL.String()), ar, ar.Hint)
	default:
		return fmt.Errorf("openapi %s: no credential for the document %s: %w", a.opts.Name, redact.Resource(req.URL.String()), err)
	}
	return nil
}

func (a *API) staticToken(req *http.Request) {
	if a.opts.Token != nil {
		if tok := a.opts.Token(); tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	}
}

// scrub replaces the credential's token in s (a hostile API echoing it).
func scrub(s string, cred *credential.Credential) string {
	if cred == nil || cred.Token() == "" {
		return s
	}
	return redact.Value(s, cred.Token())
}
