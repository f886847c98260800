package redact

import (
	"fmt"
	"net/url"
	"strings"
)

// URLCredential names the parts of the URL s that carry a credential,
// never their values: "the password of its user info" and `its query
// parameter "token"` (each whose name says it is secret, by the rule of
// [URL]), joined by " and "; "" when s carries none or is no URL. It
// names exactly what [URL] removes: URLCredential(s) == "" if and only if
// URL(s) == s.
func URLCredential(s string) string {
	m := urlScheme().FindStringIndex(s)
	if m == nil {
		return ""
	}
	rest := s[m[1]:]
	var parts []string
	if at := userinfoEnd(rest); at >= 0 {
		if user, _, ok := strings.Cut(rest[:at], ":"); ok {
			parts = append(parts, "the password of its user info")
			rest = user + rest[at:]
		}
	}
	if q := strings.IndexByte(rest, '?'); q >= 0 {
		query, _, _ := strings.Cut(rest[q+1:], "#")
		for _, p := range strings.Split(query, "&") {
			k, _, _ := strings.Cut(p, "=")
			if dk, err := url.QueryUnescape(k); err == nil {
				k = dk
			}
			if secretName(k) {
				parts = append(parts, fmt.Sprintf("its query parameter %q", k))
			}
		}
	}
	return strings.Join(parts, " and ")
}

// ConnectorURL refuses the URL s of a connector (an MCP server's
// endpoint, kind "mcp"; an OpenAPI document or base URL, kind "openapi")
// that carries a credential ([URLCredential]). A connector's URL is
// journaled (run.created, the agent directory) and shown to every reader
// of the run or the agent, so it must hold no secret; stripping the
// credential would not do, as the stripped URL would not work on a
// resume. The error names the part (never its value), shows the URL
// without it and says how Keel authenticates to that kind of connector.
func ConnectorURL(kind, s string) error {
	part := URLCredential(s)
	if part == "" {
		return nil
	}
	how := "a server that answers 401 gets its token from Keel's vault: the provider covering the URL, or the one `provider` names in [[mcp.servers]] (`keel auth connect mcp-NAME`; docs/mcp.md, \"Servers of a run: tokens from the vault\")"
	if kind == "openapi" {
		how = "each call gets a token from Keel's vault, from the provider covering the URL or the one `provider` names (`keel auth providers add`, `keel auth connect`; docs/credentials.md), else a bearer token from the environment variable `token_env` names (default KEEL_OPENAPI_TOKEN_NAME; docs/mcp.md, \"OpenAPI connector\")"
	}
	return fmt.Errorf("URL %s carries a credential (%s), which Keel refuses in a connector, since connector URLs are journaled and shown to every reader of the run or agent: give the URL without it and let Keel authenticate: %s", URL(s), part, how)
}
