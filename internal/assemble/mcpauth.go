package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/mcp"
)

// Provider implements mcp.Vault.
func (l *lazyVault) Provider(ctx context.Context, name string) (*credential.Provider, error) {
	v, err := l.get()
	if err != nil {
		return nil, err
	}
	return v.Provider(ctx, name)
}

// AddProvider implements mcp.Vault.
func (l *lazyVault) AddProvider(ctx context.Context, pp *credential.ProviderParams) (*credential.Provider, error) {
	v, err := l.get()
	if err != nil {
		return nil, err
	}
	return v.AddProvider(ctx, pp)
}

// mcpAuth is how the run's HTTP server s is authorized when it asks:
// tokens of the run's agent (acting for its user) from the vault, with
// the provider or client of its [[mcp.servers]] entry.
func (a *app) mcpAuth(w *wiring, c *agent.RunCreated, s agent.MCPServer) (*mcp.Auth, error) {
	au := &mcp.Auth{Vault: w.vault, Agent: c.Principal, User: c.OnBehalfOf}
	if au.Agent == "" {
		au.Agent = identity.LocalAgent
	}
	if a.cfg == nil {
		return au, nil
	}
	for _, cs := range a.cfg.MCP.Servers {
		if cs.Name != s.Name || cs.URL != s.URL {
			continue
		}
		au.Provider, au.ClientID, au.ClientMetadataURL, au.Scopes = cs.Provider, cs.ClientID, cs.ClientMetadataURL, cs.Scopes
		if cs.ClientSecretFile != "" {
			b, err := os.ReadFile(cs.ClientSecretFile)
			if err != nil {
				return nil, fmt.Errorf("%s: mcp server %s: client_secret_file: %w", a.configFile(), s.Name, err)
			}
			au.ClientSecret = strings.TrimSpace(string(b))
		}
	}
	return au, nil
}

// mcpAuthError is the error of a run whose server s needs an
// authorization before Keel can list its tools, with no tools pinned by
// an earlier run to offer meanwhile.
func mcpAuthError(s agent.MCPServer, ar *tool.AuthRequiredError) error {
	return fmt.Errorf("mcp server %s (%s) needs an authorization before Keel can list its tools: %v\nauthorize it with: %s\nthen start the run again (later runs wait for a missing authorization at the call instead)",
		s.Name, s.URL, ar, ar.Hint)
}
