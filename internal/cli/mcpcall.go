package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/spf13/cobra"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/mcp"
)

// mcpCallFlags are the flags of keel mcp call.
type mcpCallFlags struct {
	tool, args                string
	clientID, clientSecretEnv string
	clientMetadataURL         string
	redirectURL               string
	auto                      bool
}

func (a *app) mcpCallCmd() *cobra.Command {
	f := &mcpCallFlags{}
	cmd := &cobra.Command{
		Use:   "call [flags] URL",
		Short: "Connect to a streamable-HTTP MCP server through Keel's client, list its tools and call one",
		Long: `Call connects to the MCP server at URL with Keel's MCP client, as a run
would (the same validation and result bounding), lists its tools and,
with --tool, calls one with --args (a JSON object).

A server that requires authorization is authorized with OAuth 2.1 as the
MCP specification says: its protected resource metadata (RFC 9728), the
authorization server's metadata, a client (pre-registered with
--client-id, a client ID metadata document with --client-metadata-url, or
dynamic registration), authorization code with PKCE, the resource
indicator (RFC 8707) and the issuer check (RFC 9207). The authorization
URL is printed for a person to open; the redirect to --redirect-url
(pasted back on stdin) completes it. With --auth-auto, Keel follows the
authorization server itself, for servers that approve without a person.
Tokens are kept in this process only.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return a.mcpCall(cmd.Context(), args[0], f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.tool, "tool", "", "call this tool (the server's name for it)")
	fl.StringVar(&f.args, "args", "{}", "the tool's arguments, a JSON object")
	fl.StringVar(&f.clientID, "client-id", "", "a client pre-registered with the authorization server")
	fl.StringVar(&f.clientSecretEnv, "client-secret-env", "", "environment variable holding the pre-registered client's secret")
	fl.StringVar(&f.clientMetadataURL, "client-metadata-url", "", "an https URL of Keel's client ID metadata document")
	fl.StringVar(&f.redirectURL, "redirect-url", "http://localhost:3000/callback", "the redirect URI of the authorization")
	fl.BoolVar(&f.auto, "auth-auto", false, "follow the authorization server's redirects without a person (servers that approve automatically)")
	return cmd
}

func (a *app) mcpCall(ctx context.Context, rawURL string, f *mcpCallFlags) error {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return usagef("URL %q: want an http or https URL", rawURL)
	}
	var in map[string]any
	if err := json.Unmarshal([]byte(f.args), &in); err != nil {
		return usagef("--args: not a JSON object: %v", err)
	}
	cfg := &auth.AuthorizationCodeHandlerConfig{
		RedirectURL:              f.redirectURL,
		AuthorizationCodeFetcher: a.authorizationFetcher(f),
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{
			Metadata: &oauthex.ClientRegistrationMetadata{ClientName: "Keel", RedirectURIs: []string{f.redirectURL}},
		},
	}
	if f.clientMetadataURL != "" {
		cfg.ClientIDMetadataDocumentConfig = &auth.ClientIDMetadataDocumentConfig{URL: f.clientMetadataURL}
	}
	if f.clientID != "" {
		cc := &oauthex.ClientCredentials{ClientID: f.clientID}
		if f.clientSecretEnv != "" {
			if s := a.getenv(f.clientSecretEnv); s != "" {
				cc.ClientSecretAuth = &oauthex.ClientSecretAuth{ClientSecret: s}
			}
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
	c, err := mcp.Connect(ctx, mcp.Server{Name: "server", URL: rawURL}, &mcp.Options{Network: sandbox.Network{Allow: []string{host}}, OAuth: oh, StartTimeout: time.Minute})
	if err != nil {
		return err
	}
	defer c.Close()
	r := tool.NewRegistry()
	_, notes := c.Register(r, nil)
	for _, n := range notes {
		fmt.Fprintf(a.stderr, "keel: %s\n", n)
	}
	fmt.Fprintf(a.stderr, "keel: %d tools: %s\n", len(c.Tools()), strings.Join(c.Tools(), ", "))
	if f.tool == "" {
		return nil
	}
	name := "server__" + f.tool
	if r.Tool(name) == nil {
		return fmt.Errorf("the server offers no tool %q", f.tool)
	}
	args, bad := r.Validate(model.ToolCall{ID: "call", Name: name, Arguments: f.args})
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
	fmt.Fprintln(a.stdout, res.Content)
	if res.IsError {
		return &exitError{1}
	}
	return nil
}

// authorizationFetcher returns how the authorization code is obtained:
// a person opens the URL and pastes the redirect back, or, with
// --auth-auto, Keel follows the authorization server's redirects until
// one goes to the redirect URI.
func (a *app) authorizationFetcher(f *mcpCallFlags) auth.AuthorizationCodeFetcher {
	return func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
		var loc *url.URL
		if f.auto {
			hc := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(req *http.Request, via []*http.Request) error {
				if strings.HasPrefix(req.URL.String(), f.redirectURL) {
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
			fmt.Fprintf(a.stderr, "keel: authorize Keel by opening this URL:\n  %s\nthen paste the URL you are redirected to (%s?...):\n", args.URL, f.redirectURL)
			var line string
			if _, err := fmt.Fscanln(os.Stdin, &line); err != nil {
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
