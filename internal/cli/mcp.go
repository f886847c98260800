package cli

import (
	"context"
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
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
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

// mcpReadOnly are the host paths the run's stdio servers need bound.
func mcpReadOnly(servers []agent.MCPServer) []string {
	var out []string
	for _, s := range servers {
		if len(s.Command) == 0 {
			continue
		}
		for _, p := range s.ReadOnly {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// previousPins returns, for each tool of servers, the definition pinned by
// the newest of the last runs in the journal that used the same server
// (same name and command or URL), with the changes people approved in
// that run.
func (a *app) previousPins(ctx context.Context, servers []agent.MCPServer) map[string]mcp.Pinned {
	out := map[string]mcp.Pinned{}
	store, err := a.openStore(ctx)
	if err != nil {
		return out
	}
	defer store.Close()
	runs, err := store.Runs(ctx, &journal.ListParams{Limit: 50})
	if err != nil {
		return out
	}
	same := func(x, y agent.MCPServer) bool {
		return x.Name == y.Name && x.URL == y.URL && slices.Equal(x.Command, y.Command)
	}
	done := map[string]bool{}
	for _, r := range runs {
		if len(done) == len(servers) {
			break
		}
		evs, err := store.Read(ctx, r.RunID, 1)
		if err != nil || len(evs) == 0 {
			continue
		}
		st, err := agent.Fold(r.RunID, evs)
		if err != nil || st.Created == nil {
			continue
		}
		for _, s := range servers {
			if done[s.Name] || !slices.ContainsFunc(st.Created.MCP, func(o agent.MCPServer) bool { return same(o, s) }) {
				continue
			}
			done[s.Name] = true
			for _, t := range st.Created.Tools {
				if t.Server == s.Name && t.Pin != "" {
					out[t.Name] = mcp.Pinned{Pin: t.Pin, Description: t.Description, InputSchema: t.Parameters}
				}
			}
			for _, turn := range st.Turns {
				for _, call := range turn.Calls {
					if call.Decision == nil || call.Resolved == nil || call.Resolved.Decision != policy.Allow || !slices.Contains(call.Decision.Policies, agent.PolicyPin) {
						continue
					}
					if _, ok := out[call.Name]; ok {
						if np := mcp.ApprovedPin(call.Decision.Reason); np != "" {
							// Approved: the new definition is the pin; what
							// the model is shown comes from the server.
							out[call.Name] = mcp.Pinned{Pin: np}
						}
					}
				}
			}
		}
	}
	return out
}

// connectMCP connects the run's MCP servers and registers their tools.
// For a run being resumed, the definitions journaled in run.created are
// the pins a changed tool is held against.
func (a *app) connectMCP(ctx context.Context, w *wiring, c *agent.RunCreated) error {
	if err := a.connectSQL(ctx, w, c); err != nil {
		return err
	}
	if err := a.connectOpenAPI(ctx, w, c); err != nil {
		return err
	}
	if len(c.MCP) == 0 {
		return nil
	}
	pinned := map[string]mcp.Pinned{}
	for _, t := range c.Tools {
		if t.Server != "" {
			pinned[t.Name] = mcp.Pinned{Pin: t.Pin, Description: t.Description, InputSchema: t.Parameters}
		}
	}
	if len(c.Tools) == 0 {
		// A new run: the pins are those of the newest earlier run that
		// used the same server, so that a definition changed between
		// runs is held too.
		pinned = a.previousPins(ctx, c.MCP)
	}
	for _, s := range c.MCP {
		opts := &mcp.Options{Sandbox: w.sb, Network: w.env.Network, CallTimeout: w.env.CommandTimeout, Elicit: w.elicit}
		if s.URL != "" {
			// A server that answers 401 is authorized through the vault.
			var err error
			if opts.Auth, err = a.mcpAuth(w, c, s); err != nil {
				return err
			}
		}
		cl, err := mcp.Connect(ctx, mcp.Server{Name: s.Name, Command: s.Command, URL: s.URL, Env: s.Env, Tools: s.Tools}, opts)
		if err != nil {
			return err
		}
		w.mcp = append(w.mcp, cl)
		regs, notes := cl.Register(w.tools, pinned)
		for _, n := range notes {
			fmt.Fprintf(a.stderr, "keel: %s\n", n)
		}
		if ar := cl.AuthRequired(); ar != nil {
			if len(regs) == 0 {
				return mcpAuthError(s, ar)
			}
			fmt.Fprintf(a.stderr, "keel: mcp server %s waits for an authorization (%s); its calls wait until: %s\n", s.Name, ar.Reason, ar.Hint)
		}
	}
	return nil
}
