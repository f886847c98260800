// Package mcpcall is keel mcp call: Keel's MCP client connecting to one
// streamable-HTTP MCP server as a run would (the same validation and
// result bounding), authorized with OAuth 2.1 as the MCP specification
// says, listing its tools and calling one.
package mcpcall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/mcp"
	"github.com/keel-run/keel/visible"
)

// Call is one keel mcp call.
type Call struct {
	// URL is the MCP server's streamable-HTTP endpoint.
	URL string
	// Tool, if set, is the tool to call (the server's name for it), with
	// Args, a JSON object.
	Tool, Args string
	// ClientID is a client pre-registered with the authorization
	// server; ClientSecret its secret, if any.
	ClientID, ClientSecret string
	// ClientMetadataURL is an https URL of Keel's client ID metadata
	// document.
	ClientMetadataURL string
	// RedirectURL is the redirect URI of the authorization.
	RedirectURL string
	// Auto follows the authorization server's redirects without a
	// person (servers that approve automatically); otherwise the
	// authorization URL is printed to Stderr and the redirect read from
	// Stdin.
	Auto bool
	// Token, when set, is sent as "Authorization: Bearer TOKEN" to the
	// server's origin (scheme, host and port) only, instead of OAuth: for
	// servers with tokens of their own, such as keel serve's /mcp.
	Token string

	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// BadCall is the error of a call the server cannot take as asked: a
// tool it does not offer, arguments its schema refuses.
type BadCall struct{ error }

func (e *BadCall) Unwrap() error { return e.error }

// ErrToolFailed is returned when the tool's result is an error (its
// content is printed).
var ErrToolFailed = errors.New("the tool failed")

// Check reports what is wrong with the call as asked: the URL, the
// arguments.
func (f *Call) Check() error {
	if u, err := url.Parse(f.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("URL %q: want an http or https URL", f.URL)
	}
	var in map[string]any
	if err := json.Unmarshal([]byte(f.Args), &in); err != nil {
		return fmt.Errorf("--args: not a JSON object: %v", err)
	}
	return nil
}

// Run connects to the server, prints its tools to Stderr and, with a
// Tool, calls it and prints its result to Stdout.
func (f *Call) Run(ctx context.Context) error {
	if err := f.Check(); err != nil {
		return err
	}
	u, err := url.Parse(f.URL)
	if err != nil {
		return err
	}
	opts := &mcp.Options{Network: sandbox.Network{Allow: []string{u.Host}}, StartTimeout: time.Minute}
	var tr *bearer
	if f.Token != "" {
		tr = &bearer{origin: origin(u), token: f.Token, base: http.DefaultTransport}
		opts.HTTPClient = &http.Client{Transport: tr}
	} else if opts.OAuth, err = f.oauth(); err != nil {
		return err
	}
	ws, err := os.MkdirTemp("", "keel-mcp-call-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(ws)
	c, err := mcp.Connect(ctx, mcp.Server{Name: serverName, URL: f.URL}, opts)
	if err != nil {
		// The connection's error names the server as a run's would
		// ("mcp server NAME (URL): ..."): here the URL alone says it.
		msg := strings.TrimPrefix(err.Error(), fmt.Sprintf("mcp server %s (%s): ", serverName, f.URL))
		switch {
		case tr != nil && tr.refusal() != "":
			// What the server said of the token (Keel's: "this needs
			// the runs:read scope; token ...", or why it is invalid).
			msg = tr.refusal()
		case f.Token != "" && strings.Contains(msg, http.StatusText(http.StatusUnauthorized)):
			msg += " (the server refused the token)"
		}
		return fmt.Errorf("%s: %s", f.URL, msg)
	}
	defer c.Close()
	r := tool.NewRegistry()
	_, notes := c.Register(r, nil)
	for _, n := range notes {
		fmt.Fprintf(f.Stderr, "keel: %s\n", n)
	}
	fmt.Fprintf(f.Stderr, "keel: %d tools: %s\n", len(c.Tools()), strings.Join(c.Tools(), ", "))
	if f.Tool == "" {
		return nil
	}
	name := serverName + "__" + f.Tool
	t := r.Tool(name)
	if t == nil {
		return &BadCall{fmt.Errorf("the server offers no tool %q (its tools: %s)", f.Tool, strings.Join(c.Tools(), ", "))}
	}
	args, bad := r.Validate(model.ToolCall{ID: "call", Name: name, Arguments: f.Args})
	if bad != nil {
		// Said with the name as typed, and what the tool takes.
		var schema struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		_ = json.Unmarshal(t.InputSchema, &schema)
		takes := "no arguments"
		if len(schema.Properties) > 0 {
			takes = "{" + strings.Join(slices.Sorted(maps.Keys(schema.Properties)), ", ") + "}"
		}
		return &BadCall{fmt.Errorf("%s (%s takes %s)", strings.ReplaceAll(bad.Content, name, f.Tool), f.Tool, takes)}
	}
	w, err := tool.NewWorkspace(ws, "/workspace", nil)
	if err != nil {
		return err
	}
	defer w.Close()
	res, err := r.Run(ctx, name, &tool.Request{RunID: "mcp-call", CallID: "call", Arguments: args, Env: &tool.Env{Workspace: w}})
	if err != nil {
		return err
	}
	fmt.Fprintln(f.Stdout, res.Content)
	if res.IsError {
		return ErrToolFailed
	}
	return nil
}

// serverName is the name the server's connection has (its tools are
// serverName__TOOL in the registry); no one sees it.
const serverName = "server"

// oauth returns the OAuth 2.1 handler of the call's flags.
func (f *Call) oauth() (auth.OAuthHandler, error) {
	cfg := &auth.AuthorizationCodeHandlerConfig{
		RedirectURL:              f.RedirectURL,
		AuthorizationCodeFetcher: f.authorizationFetcher(),
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{
			Metadata: &oauthex.ClientRegistrationMetadata{ClientName: "Keel", RedirectURIs: []string{f.RedirectURL}},
		},
	}
	if f.ClientMetadataURL != "" {
		cfg.ClientIDMetadataDocumentConfig = &auth.ClientIDMetadataDocumentConfig{URL: f.ClientMetadataURL}
	}
	if f.ClientID != "" {
		cc := &oauthex.ClientCredentials{ClientID: f.ClientID}
		if f.ClientSecret != "" {
			cc.ClientSecretAuth = &oauthex.ClientSecretAuth{ClientSecret: f.ClientSecret}
		}
		cfg.PreregisteredClient = cc
	}
	oh, err := auth.NewAuthorizationCodeHandler(cfg)
	if err != nil {
		return nil, fmt.Errorf("authorization: %w", err)
	}
	return &hinted{oh}, nil
}

// authorizationFetcher returns how the authorization code is obtained:
// a person opens the URL and pastes the redirect back, or, with Auto,
// Keel follows the authorization server's redirects until one goes to
// the redirect URI.
func (f *Call) authorizationFetcher() auth.AuthorizationCodeFetcher {
	return func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
		var loc *url.URL
		if f.Auto {
			hc := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(req *http.Request, via []*http.Request) error {
				if strings.HasPrefix(req.URL.String(), f.RedirectURL) {
					return http.ErrUseLastResponse
				}
				if len(via) >= 10 {
					return fmt.Errorf("too many redirects")
				}
				return nil
			}}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, args.URL, nil)
			if err != nil {
				return nil, err
			}
			resp, err := hc.Do(req)
			if err != nil {
				return nil, err
			}
			resp.Body.Close()
			if loc, err = resp.Location(); err != nil {
				return nil, fmt.Errorf("the authorization server did not redirect (%s)", resp.Status)
			}
		} else {
			fmt.Fprintf(f.Stderr, "keel: authorize Keel by opening this URL:\n  %s\nthen paste the URL you are redirected to (%s?...):\n", args.URL, f.RedirectURL)
			var line string
			if _, err := fmt.Fscanln(f.Stdin, &line); err != nil {
				return nil, fmt.Errorf("no redirect URL: %w", err)
			}
			var err error
			if loc, err = url.Parse(strings.TrimSpace(line)); err != nil {
				return nil, err
			}
		}
		q := loc.Query()
		if e := q.Get("error"); e != "" {
			return nil, fmt.Errorf("the authorization server refused: %s %s", e, q.Get("error_description"))
		}
		return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
	}
}

// bearer adds a static bearer token to the requests to one origin.
type bearer struct {
	origin, token string
	base          http.RoundTripper

	mu      sync.Mutex
	refused string // the text of the server's last 401 or 403
}

func (b *bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	if origin(req.URL) != b.origin {
		return b.base.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.token)
	resp, err := b.base.RoundTrip(req)
	if err == nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		text := strings.TrimSpace(visible.String(string(body)))
		if text == "" {
			text = http.StatusText(resp.StatusCode)
		}
		b.mu.Lock()
		b.refused = fmt.Sprintf("%s (HTTP %d)", text, resp.StatusCode)
		b.mu.Unlock()
	}
	return resp, err
}

// refusal is the text of the server's last refusal of the token.
func (b *bearer) refusal() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.refused
}

// origin is u's scheme, host and port.
func origin(u *url.URL) string {
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host)
}

// hinted is the SDK's OAuth handler with a clearer failure for a server
// that asks for a bearer token but publishes no protected resource
// metadata (RFC 9728): the SDK then falls back to the 2025-03-26
// specification's endpoints at the server's root and fails there
// ("registration failed with status 404"), which says nothing of what
// to do.
type hinted struct{ *auth.AuthorizationCodeHandler }

func (h *hinted) Authorize(ctx context.Context, req *http.Request, resp *http.Response) error {
	status, challenge := resp.Status, resp.Header.Get("WWW-Authenticate")
	err := h.AuthorizationCodeHandler.Authorize(ctx, req, resp)
	if err == nil || hasResourceMetadata(ctx, req.URL) {
		return err
	}
	if challenge != "" {
		status += ", WWW-Authenticate: " + challenge
	}
	return fmt.Errorf("the server asks for authorization (%s) but publishes no OAuth protected resource metadata, so Keel cannot obtain a token by OAuth (%s); "+
		"pass the server's own token with --token (keel serve: an API token of `keel tokens create` with at least runs:read)", status, strings.TrimSpace(err.Error()))
}

// hasResourceMetadata reports whether the server of u publishes
// protected resource metadata at one of the well-known URLs (RFC 9728:
// the endpoint's path, then the root).
func hasResourceMetadata(ctx context.Context, u *url.URL) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, p := range []string{"/.well-known/oauth-protected-resource" + strings.TrimSuffix(u.Path, "/"), "/.well-known/oauth-protected-resource"} {
		m := &url.URL{Scheme: u.Scheme, Host: u.Host, Path: p}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.String(), nil)
		if err != nil {
			continue
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return true
		}
	}
	return false
}
