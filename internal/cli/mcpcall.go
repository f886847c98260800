package cli

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/internal/mcpcall"
	"github.com/keel-run/keel/internal/serve"
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
Tokens are kept in this process only.

A server with bearer tokens of its own, such as keel serve's /mcp, takes
one with --token instead (sent to that server only). For keel serve's
/mcp, the token keel serve saved for the command line is used when URL is
on the server it was saved for, and $KEEL_TOKEN when URL is on the server
of --server or $KEEL_SERVER.`,
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
	c := &mcpcall.Call{
		URL: rawURL, Tool: f.tool, Args: f.args,
		ClientID: f.clientID, ClientMetadataURL: f.clientMetadataURL,
		RedirectURL: f.redirectURL, Auto: f.auto,
		Stdin: os.Stdin, Stdout: a.stdout, Stderr: a.stderr,
	}
	if f.clientSecretEnv != "" {
		c.ClientSecret = a.getenv(f.clientSecretEnv)
	}
	if err := c.Check(); err != nil {
		return usagef("%s", err)
	}
	c.Token = a.mcpCallToken(rawURL)
	err := c.Run(ctx)
	if errors.Is(err, mcpcall.ErrToolFailed) {
		return &exitError{1}
	}
	if bad := (*mcpcall.BadCall)(nil); errors.As(err, &bad) {
		return &usageError{err}
	}
	return err
}

// mcpCallToken returns the bearer token keel mcp call sends to rawURL:
// --token; else the token keel serve saved, when rawURL is on a server
// it was saved for; else $KEEL_TOKEN, when rawURL is on the server of
// --server or $KEEL_SERVER. "" means none (OAuth, if the server asks).
// A token is never sent to a server it was not given for.
func (a *app) mcpCallToken(rawURL string) string {
	if a.token != "" {
		return a.token
	}
	if st, err := serve.ReadTokens(a.serverTokenFile()); err == nil {
		if e := st.Lookup(rawURL); e != nil && e.Token != "" {
			fmt.Fprintf(a.stderr, "keel: using the API token keel serve saved in %s for %s\n", a.serverTokenFile(), serve.Origin(rawURL))
			return e.Token
		}
	}
	if tok, srv := a.getenv("KEEL_TOKEN"), a.serverURL(); tok != "" && srv != "" && serve.Origin(srv) == serve.Origin(rawURL) {
		return tok
	}
	return ""
}
