package assemble

import (
	"fmt"
	"os"
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/redact"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/mcp"
)

// mcpAuth is how the run's HTTP server s is authorized when it asks:
// tokens of the run's agent (acting for its user) from the vault, with
// the provider or client of its [[mcp.servers]] entry.
func (a *Assembler) mcpAuth(w *Run, c *agent.RunCreated, s agent.MCPServer) (*mcp.Auth, error) {
	au := &mcp.Auth{Vault: w.vault, Agent: c.Principal, User: c.OnBehalfOf}
	if au.Agent == "" {
		au.Agent = identity.LocalAgent
	}
	if c.Parent != nil {
		au.MaxScopes = c.Parent.Scopes
	}
	if a.Config == nil {
		return au, nil
	}
	for _, cs := range a.Config.MCP.Servers {
		if cs.Name != s.Name || cs.URL != s.URL {
			continue
		}
		au.Provider, au.ClientID, au.ClientMetadataURL, au.Scopes = cs.Provider, cs.ClientID, cs.ClientMetadataURL, cs.Scopes
		if cs.ClientSecretFile != "" {
			b, err := os.ReadFile(cs.ClientSecretFile)
			if err != nil {
				return nil, fmt.Errorf("%s: mcp server %s: client_secret_file: %w", a.cfgPath(), s.Name, err)
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
		s.Name, redact.URL(s.URL), ar, ar.Hint)
}
