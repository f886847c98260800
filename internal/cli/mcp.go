package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"mvdan.cc/sh/v3/shell"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/config"
	"github.com/keel-run/keel/tool/mcp"
)

// mcpFlags are the MCP flags of keel run.
type mcpFlags struct {
	servers   []string
	sql       []string
	sqlWrites bool
	sqlAsUser bool
	openapi   []string
	none      bool
}

func (f *mcpFlags) register(fl *pflag.FlagSet) {
	fl.StringArrayVar(&f.servers, "mcp", nil, "MCP server whose tools the run offers as NAME__TOOL: NAME='COMMAND ARGS...' (stdio, started inside the sandbox) or NAME=URL (streamable HTTP; its host must be in --allow-host) (repeatable; adds to config.toml's [[mcp.servers]])")
	fl.BoolVar(&f.none, "no-mcp", false, "leave out the MCP servers and databases of config.toml")
	fl.StringArrayVar(&f.sql, "sql", nil, "PostgreSQL database the run may query with NAME__sql_query: NAME=DSN (postgres://user@host/db; the password is never journaled: PGPASSWORD or ~/.pgpass for a resume) (repeatable)")
	fl.StringArrayVar(&f.openapi, "openapi", nil, "OpenAPI 3 document (URL or file) whose operations the run offers as NAME__OPERATION: NAME=DOCUMENT; GET is read-only, other methods ask; tokens come from the vault provider whose resources cover the API (a missing grant waits: keel auth connect), else a static bearer token from $KEEL_OPENAPI_TOKEN_NAME (repeatable)")
	fl.BoolVar(&f.sqlAsUser, "sql-as-user", false, "run --sql statements as the user the run acts for (--on-behalf-of), with their own connection string from the vault (keel auth secret set sql:NAME)")
	fl.BoolVar(&f.sqlWrites, "sql-allow-writes", false, "let --sql statements that write run when the policy allows them (default: every statement runs in a READ ONLY transaction)")
}

// mcpServers returns the run's MCP servers: config.toml's (unless
// --no-mcp), then --mcp's, a later one replacing an earlier one of the
// same name.
func (a *app) mcpServers(f *mcpFlags) ([]agent.MCPServer, error) {
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
	for _, cfg := range []*config.Config{a.cfg, a.project} {
		if cfg == nil || f.none {
			continue
		}
		for _, c := range cfg.MCP.Servers {
			s := agent.MCPServer{Name: c.Name, Command: c.Command, URL: c.URL, Tools: c.Tools, ReadOnly: c.ReadOnly}
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
	for _, v := range f.servers {
		name, spec, ok := strings.Cut(v, "=")
		if !ok || strings.TrimSpace(spec) == "" {
			return nil, usagef("--mcp %q: want NAME=COMMAND... or NAME=URL", v)
		}
		s := agent.MCPServer{Name: name}
		if strings.HasPrefix(spec, "http://") || strings.HasPrefix(spec, "https://") {
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
	return out, nil
}

func checkMCPServer(s *agent.MCPServer) error {
	if err := mcp.CheckName(s.Name); err != nil {
		return err
	}
	if (len(s.Command) == 0) == (s.URL == "") {
		return fmt.Errorf("mcp server %s: give a command or a URL", s.Name)
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
