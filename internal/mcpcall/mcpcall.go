// Package mcpcall is keel mcp call: Keel's MCP client connecting to one
// streamable-HTTP MCP server as a run would (the same validation and
// result bounding), authorized with OAuth 2.1 as the MCP specification
// says, listing its tools and calling one.
package mcpcall

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/mcp"
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

	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

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
		return fmt.Errorf("authorization: %w", err)
	}
	host := u.Host
	ws, err := os.MkdirTemp("", "keel-mcp-call-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(ws)
	c, err := mcp.Connect(ctx, mcp.Server{Name: "server", URL: f.URL}, &mcp.Options{Network: sandbox.Network{Allow: []string{host}}, OAuth: oh, StartTimeout: time.Minute})
	if err != nil {
		return err
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
	name := "server__" + f.Tool
	if r.Tool(name) == nil {
		return fmt.Errorf("the server offers no tool %q", f.Tool)
	}
	args, bad := r.Validate(model.ToolCall{ID: "call", Name: name, Arguments: f.Args})
	if bad != nil {
		return fmt.Errorf("%s", bad.Content)
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
