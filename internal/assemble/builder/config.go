package builder

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"mvdan.cc/sh/v3/shell"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/internal/config"
	"github.com/keel-run/keel/redact"
	"github.com/keel-run/keel/tool/mcp"
)

// Connectors are the connectors of a process's configuration: the MCP
// servers, databases and APIs of the user's config.toml (Config, at
// ConfigFile) and, for MCP servers, the trusted project's (Project).
// nil configurations have none.
type Connectors struct {
	Config, Project *config.Config
	ConfigFile      string
}

// ConnectorFlags are the connectors a command names beside its
// configuration's (keel run --mcp, --sql, --openapi, --no-mcp).
type ConnectorFlags struct {
	// MCP are NAME=COMMAND... or NAME=URL; SQL NAME=DSN; OpenAPI
	// NAME=DOCUMENT.
	MCP, SQL, OpenAPI []string
	// MCPSecretEnv are NAME=VAR[,VAR...]: the run's secret variables
	// the stdio server NAME gets (it gets none otherwise).
	MCPSecretEnv []string
	// SQLWrites and SQLAsUser apply to the databases of SQL.
	SQLWrites, SQLAsUser bool
	// None leaves out the configuration's connectors.
	None bool
}

func usagef(format string, args ...any) error {
	return &assemble.UsageError{Err: fmt.Errorf(format, args...)}
}

// MCPServers returns the run's MCP servers: config.toml's (unless
// --no-mcp), then --mcp's, a later one replacing an earlier one of the
// same name.
func (cs *Connectors) MCPServers(f *ConnectorFlags) ([]agent.MCPServer, error) {
	if cs == nil {
		cs = &Connectors{}
	}
	var out []agent.MCPServer
	put := func(s agent.MCPServer) {
		for i := range out {
			if out[i].Name == s.Name {
				out[i] = s
				return
			}
		}
		out = append(out, s)
	}
	for _, cfg := range []*config.Config{cs.Config, cs.Project} {
		if cfg == nil || f.None {
			continue
		}
		for _, c := range cfg.MCP.Servers {
			s := agent.MCPServer{Name: c.Name, Command: c.Command, URL: c.URL, Tools: c.Tools, ReadOnly: c.ReadOnly, SecretEnv: c.SecretEnv}
			keys := make([]string, 0, len(c.Env))
			for k := range c.Env {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				s.Env = append(s.Env, k+"="+c.Env[k])
			}
			if err := checkMCPServer(&s); err != nil {
				return nil, usagef("%s: %v", cfg.Path, err)
			}
			put(s)
		}
	}
	for _, v := range f.MCP {
		name, spec, ok := strings.Cut(v, "=")
		if !ok || strings.TrimSpace(spec) == "" {
			return nil, usagef("--mcp %q: want NAME=COMMAND... or NAME=URL", v)
		}
		s := agent.MCPServer{Name: name}
		if httpURL(spec) {
			s.URL = spec
		} else {
			argv, err := shell.Fields(spec, func(string) string { return "" })
			if err != nil || len(argv) == 0 {
				return nil, usagef("--mcp %s: cannot split the command %q: %v", name, spec, err)
			}
			s.Command = argv
			s.ReadOnly = installPaths(argv)
		}
		if err := checkMCPServer(&s); err != nil {
			return nil, usagef("--mcp: %v", err)
		}
		put(s)
	}
	for _, v := range f.MCPSecretEnv {
		name, vars, ok := strings.Cut(v, "=")
		i := slices.IndexFunc(out, func(s agent.MCPServer) bool { return s.Name == name })
		if !ok || vars == "" || i < 0 {
			return nil, usagef("--mcp-secret-env %q: want NAME=VAR[,VAR...] with NAME an MCP server of the run", v)
		}
		for _, n := range strings.Split(vars, ",") {
			if !slices.Contains(out[i].SecretEnv, n) {
				out[i].SecretEnv = append(out[i].SecretEnv, n)
			}
		}
	}
	for _, s := range out {
		if len(s.SecretEnv) > 0 && len(s.Command) == 0 {
			return nil, usagef("mcp server %s: secret_env is for a stdio server (a command); a server over HTTP runs outside the sandbox", s.Name)
		}
	}
	return out, nil
}

// httpURL reports whether spec is an http or https URL, its scheme in
// any case (schemes are case-insensitive): HTTPS://u:pw@h/mcp is a URL,
// checked as one, never a command.
func httpURL(spec string) bool {
	scheme, _, ok := strings.Cut(spec, "://")
	return ok && (strings.EqualFold(scheme, "http") || strings.EqualFold(scheme, "https"))
}

func checkMCPServer(s *agent.MCPServer) error {
	if err := mcp.CheckName(s.Name); err != nil {
		return err
	}
	if (len(s.Command) == 0) == (s.URL == "") {
		return fmt.Errorf("mcp server %s: give a command or a URL", s.Name)
	}
	if err := redact.ConnectorURL("mcp", s.URL); err != nil {
		return fmt.Errorf("mcp server %s: %v", s.Name, err)
	}
	if err := redact.ConnectorCommand(s.Command); err != nil {
		return fmt.Errorf("mcp server %s: %v", s.Name, err)
	}
	if part := redact.CommandCredential(s.Env); part != "" {
		return fmt.Errorf("mcp server %s: env %s carries a credential (%s), which Keel refuses, since a server's env is journaled and shown to every reader of the run: name the run's secret in secret_env instead (docs/mcp.md)", s.Name, strings.Join(redact.Command(s.Env), " "), part)
	}
	for _, p := range s.ReadOnly {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("mcp server %s: read_only path %q is not absolute", s.Name, p)
		}
	}
	return nil
}

// installPaths returns the host paths a stdio server named by argv needs
// to see in the sandbox: each absolute argument that is an existing
// file outside the system directories, as its node_modules tree when it
// lies in one, else its directory. Directories named on the command line
// are not bound (they may be data the server should not see); config.toml
// can list more in read_only.
func installPaths(argv []string) []string {
	var out []string
	for _, a := range argv {
		if !filepath.IsAbs(a) {
			continue
		}
		fi, err := os.Stat(a)
		if err != nil || fi.IsDir() {
			continue
		}
		dir := filepath.Dir(a)
		if i := strings.LastIndex(a, string(filepath.Separator)+"node_modules"+string(filepath.Separator)); i >= 0 {
			dir = a[:i+len("/node_modules")]
		}
		if systemDir(dir) || slices.Contains(out, dir) {
			continue
		}
		out = append(out, dir)
	}
	return out
}

func systemDir(p string) bool {
	for _, d := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/opt", "/var"} {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// SQLDatabases returns the run's databases: config.toml's (unless --no-mcp),
// then --sql NAME=DSN. The journaled DSN has no password; the full one is
// kept in secrets for this process.
func (cs *Connectors) SQLDatabases(f *ConnectorFlags) ([]agent.SQLDatabase, map[string]string, error) {
	if cs == nil {
		cs = &Connectors{}
	}
	var out []agent.SQLDatabase
	secrets := map[string]string{}
	put := func(d agent.SQLDatabase, full string) {
		secrets[d.Name] = full
		for i := range out {
			if out[i].Name == d.Name {
				out[i] = d
				return
			}
		}
		out = append(out, d)
	}
	if cs.Config != nil && !f.None {
		for _, c := range cs.Config.SQL.Databases {
			if err := mcp.CheckName(c.Name); err != nil {
				return nil, nil, usagef("%s: [[sql.databases]]: %v", cs.ConfigFile, err)
			}
			put(agent.SQLDatabase{Name: c.Name, DSN: redact.DSN(c.DSN), AllowWrites: c.AllowWrites, MaxRows: c.MaxRows, AsUser: c.AsUser}, c.DSN)
		}
	}
	for _, v := range f.SQL {
		name, dsn, ok := strings.Cut(v, "=")
		if !ok || dsn == "" {
			return nil, nil, usagef("--sql %q: want NAME=DSN (postgres://user@host/db)", v)
		}
		if err := mcp.CheckName(name); err != nil {
			return nil, nil, usagef("--sql: %v", err)
		}
		put(agent.SQLDatabase{Name: name, DSN: redact.DSN(dsn), AllowWrites: f.SQLWrites, AsUser: f.SQLAsUser}, dsn)
	}
	return out, secrets, nil
}

// OpenAPIs returns the run's APIs: config.toml's (unless --no-mcp), then
// --openapi NAME=DOCUMENT, whose token comes from KEEL_OPENAPI_TOKEN_NAME.
func (cs *Connectors) OpenAPIs(f *ConnectorFlags) ([]agent.OpenAPI, error) {
	if cs == nil {
		cs = &Connectors{}
	}
	var out []agent.OpenAPI
	put := func(o agent.OpenAPI) {
		for i := range out {
			if out[i].Name == o.Name {
				out[i] = o
				return
			}
		}
		out = append(out, o)
	}
	if cs.Config != nil && !f.None {
		for _, c := range cs.Config.OpenAPI.APIs {
			if err := mcp.CheckName(c.Name); err != nil {
				return nil, usagef("%s: [[openapi.apis]]: %v", cs.ConfigFile, err)
			}
			if c.Document == "" {
				return nil, usagef("%s: openapi %s: no document", cs.ConfigFile, c.Name)
			}
			switch c.Writes {
			case "", "ask", "policy":
			default:
				return nil, usagef("%s: openapi %s: writes = %q: want ask or policy", cs.ConfigFile, c.Name, c.Writes)
			}
			for _, u := range []string{c.Document, c.BaseURL} {
				if err := redact.ConnectorURL("openapi", u); err != nil {
					return nil, usagef("%s: openapi %s: %v", cs.ConfigFile, c.Name, err)
				}
			}
			put(agent.OpenAPI{Name: c.Name, Document: absDocument(c.Document), BaseURL: c.BaseURL, Tags: c.Tags, Operations: c.Operations,
				TokenEnv: c.TokenEnv, WritesByPolicy: c.Writes == "policy", Provider: c.Provider})
		}
	}
	for _, v := range f.OpenAPI {
		name, doc, ok := strings.Cut(v, "=")
		if !ok || doc == "" {
			return nil, usagef("--openapi %q: want NAME=DOCUMENT (a URL or a file)", v)
		}
		if err := mcp.CheckName(name); err != nil {
			return nil, usagef("--openapi: %v", err)
		}
		if err := redact.ConnectorURL("openapi", doc); err != nil {
			return nil, usagef("--openapi %s: %v", name, err)
		}
		put(agent.OpenAPI{Name: name, Document: absDocument(doc), TokenEnv: tokenEnv(name)})
	}
	return out, nil
}

// tokenEnv is the default variable of an API's bearer token.
func tokenEnv(name string) string {
	return "KEEL_OPENAPI_TOKEN_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

func absDocument(doc string) string {
	if u, err := url.Parse(doc); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		return doc
	}
	if abs, err := filepath.Abs(doc); err == nil {
		return abs
	}
	return doc
}
