package identity

import (
	"fmt"
	"strings"

	"github.com/keel-run/keel/redact"
)

// Connectors are the MCP servers, databases and APIs whose tools the runs
// of an agent offer on a team server. Each entry of MCP and OpenAPI is the
// NAME of one of the server's own (its config.toml) or NAME=SPEC, the
// agent's own (a stdio command or a URL; an OpenAPI document); SQL entries
// name the server's databases only (their connection strings hold
// passwords, which the directory never stores). Nothing here is a secret:
// the directory is journaled, so a URL that carries a credential is
// refused ([redact.ConnectorURL]).
type Connectors struct {
	MCP     []string `json:"mcp,omitempty"`
	SQL     []string `json:"sql,omitempty"`
	OpenAPI []string `json:"openapi,omitempty"`
}

// Check returns an error wrapping [ErrInvalid] unless every entry is
// NAME or NAME=SPEC (NAME: 1 to 32 letters, digits, '-' and '_', without
// "__" or a trailing '_', as tools are NAME__TOOL) and names are unique
// per kind, and no URL of a SPEC carries a credential
// ([redact.ConnectorURL]: user info, a fragment, a secret parameter) and
// no stdio command carries one ([redact.ConnectorCommand]: --token V).
func (c *Connectors) Check() error {
	for _, l := range []struct {
		kind    string
		entries []string
		spec    bool
	}{{"mcp", c.MCP, true}, {"sql", c.SQL, false}, {"openapi", c.OpenAPI, true}} {
		seen := map[string]bool{}
		for _, e := range l.entries {
			name, spec, hasSpec := strings.Cut(e, "=")
			if hasSpec && !l.spec {
				return fmt.Errorf("%w: %s %q: name one of the server's databases (connection strings are kept in the server's config.toml)", ErrInvalid, l.kind, redactEntry(e))
			}
			if hasSpec && strings.TrimSpace(spec) == "" {
				return fmt.Errorf("%w: %s %q: want NAME or NAME=SPEC", ErrInvalid, l.kind, redactEntry(e))
			}
			if err := redact.ConnectorURL(l.kind, strings.TrimSpace(spec)); err != nil {
				return fmt.Errorf("%w: %s %s: %v", ErrInvalid, l.kind, name, err)
			}
			if l.kind == "mcp" && hasSpec {
				if err := redact.ConnectorCommand(redact.CommandWords(spec)); err != nil {
					return fmt.Errorf("%w: %s %s: %v", ErrInvalid, l.kind, name, err)
				}
			}
			if err := checkConnectorName(name); err != nil {
				return fmt.Errorf("%w: %s %q: %v", ErrInvalid, l.kind, redactEntry(e), err)
			}
			if seen[name] {
				return fmt.Errorf("%w: %s %s named twice", ErrInvalid, l.kind, name)
			}
			seen[name] = true
		}
	}
	return nil
}

func checkConnectorName(name string) error {
	if name == "" || len(name) > 32 {
		return fmt.Errorf("name %q: want 1 to 32 characters", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("name %q: only letters, digits, '-' and '_'", name)
		}
	}
	if strings.Contains(name, "__") || strings.HasSuffix(name, "_") {
		return fmt.Errorf("name %q must not contain \"__\" or end in '_'", name)
	}
	return nil
}

func (c *Connectors) clone() *Connectors {
	if c == nil {
		return nil
	}
	return &Connectors{MCP: append([]string(nil), c.MCP...), SQL: append([]string(nil), c.SQL...), OpenAPI: append([]string(nil), c.OpenAPI...)}
}

// redactEntry returns a connector entry (NAME or NAME=SPEC) for a message
// or a view: the SPEC as [redact.Spec] prints it (a URL without its
// credentials, a key=value connection string without its password, a
// command with the values of its secret options masked), the NAME as is.
func redactEntry(e string) string {
	name, spec, ok := strings.Cut(e, "=")
	if !ok {
		return e
	}
	return name + "=" + redact.Spec(spec)
}

// Redacted returns a copy of c for a view, each SPEC as [redact.Spec]
// prints it: an entry journaled before the directory refused URLs with
// credentials is shown without them.
func (c *Connectors) Redacted() *Connectors {
	if c == nil {
		return nil
	}
	out := c.clone()
	for _, l := range [][]string{out.MCP, out.SQL, out.OpenAPI} {
		for i, e := range l {
			l[i] = redactEntry(e)
		}
	}
	return out
}
