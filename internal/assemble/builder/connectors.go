package builder

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// connectors sets the MCP servers, databases and APIs of a run the server
// creates: those of its agent's directory entry when it has some, else
// all of the server's config.toml ([[mcp.servers]], [[sql.databases]],
// [[openapi.apis]]); then, per kind, only those the request names. They are
// journaled in run.created, so that every later execution, on any
// server sharing the journal, reaches the same servers (with the same
// pins). The shared demo agent, which every token may run, gets none
// (as it gets no memory nor skills, see offer): the demo needs none, and
// one that cannot be reached would refuse it.
func (b *Builder) connectors(ctx context.Context, c *agent.RunCreated, req *api.CreateRun) error {
	var servers []agent.MCPServer
	var dbs []agent.SQLDatabase
	var apis []agent.OpenAPI
	if c.Principal != identity.DemoAgent && !req.NoConnectors {
		var err error
		if servers, dbs, apis, err = b.ownConnectors(ctx, c); err != nil {
			return err
		}
	}
	if narrow := req.Connectors; narrow != nil {
		var err error
		name := func(kind string) func(string) error {
			return func(n string) error {
				if strings.Contains(n, "=") {
					return invalidf("connectors.%s %q: a run names its connectors (NAME); an agent may define its own (keel agents create --%s NAME=SPEC)", kind, n, kind)
				}
				return nil
			}
		}
		if servers, err = keep(servers, narrow.MCP, func(s agent.MCPServer) string { return s.Name }, "mcp", c.Principal, name("mcp")); err != nil {
			return err
		}
		if dbs, err = keep(dbs, narrow.SQL, func(d agent.SQLDatabase) string { return d.Name }, "sql", c.Principal, name("sql")); err != nil {
			return err
		}
		if apis, err = keep(apis, narrow.OpenAPI, func(o agent.OpenAPI) string { return o.Name }, "openapi", c.Principal, name("openapi")); err != nil {
			return err
		}
	}
	c.MCP, c.SQL, c.OpenAPI = servers, dbs, apis
	return nil
}

// ownConnectors returns the connectors of run c's agent's directory
// entry when it has some, else all of this process's config.toml.
func (b *Builder) ownConnectors(ctx context.Context, c *agent.RunCreated) ([]agent.MCPServer, []agent.SQLDatabase, []agent.OpenAPI, error) {
	// The server's own, as keel run reads them from config.toml.
	servers, err := b.Connectors.MCPServers(&ConnectorFlags{})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("the server's connectors: %w", err)
	}
	dbs, _, err := b.Connectors.SQLDatabases(&ConnectorFlags{})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("the server's connectors: %w", err)
	}
	apis, err := b.Connectors.OpenAPIs(&ConnectorFlags{})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("the server's connectors: %w", err)
	}
	ag, err := identity.NewDirectory(b.Store, nil).Get(ctx, c.Principal)
	if err != nil && !errors.Is(err, identity.ErrUnknown) {
		return nil, nil, nil, err
	}
	if ag != nil && ag.Connectors != nil {
		return b.agentConnectors(ag, servers, dbs, apis)
	}
	return servers, dbs, apis, nil
}

// keep returns the entries of have named in names (all of them when names
// is empty), in the order of names; a name have lacks is the request's
// fault.
func keep[T any](have []T, names []string, nameOf func(T) string, kind, principal string, check func(string) error) ([]T, error) {
	if len(names) == 0 {
		return have, nil
	}
	var out []T
	for _, n := range names {
		if err := check(n); err != nil {
			return nil, err
		}
		i := slices.IndexFunc(have, func(x T) bool { return nameOf(x) == n })
		if i < 0 {
			return nil, invalidf("connectors.%s: agent %s has no %s connector %q (it has: %s)", kind, principal, kind, n, names2(have, nameOf))
		}
		out = append(out, have[i])
	}
	return out, nil
}

func names2[T any](have []T, nameOf func(T) string) string {
	if len(have) == 0 {
		return "none"
	}
	var out []string
	for _, x := range have {
		out = append(out, nameOf(x))
	}
	return strings.Join(out, ", ")
}

// agentConnectors returns the connectors of ag: each a NAME of the
// server's own or the agent's own NAME=SPEC.
func (b *Builder) agentConnectors(ag *identity.Agent, servers []agent.MCPServer, dbs []agent.SQLDatabase, apis []agent.OpenAPI) ([]agent.MCPServer, []agent.SQLDatabase, []agent.OpenAPI, error) {
	conn := ag.Connectors
	missing := func(kind, name string) error {
		return invalidf("agent %s uses %s connector %q, which this server does not have (its config.toml defines: %s)", ag.Name, kind, name, strings.Join(serverNames(servers, dbs, apis, kind), ", "))
	}
	var outS []agent.MCPServer
	for _, e := range conn.MCP {
		name, _, own := strings.Cut(e, "=")
		if own {
			s, err := b.Connectors.MCPServers(&ConnectorFlags{None: true, MCP: []string{e}})
			if err != nil {
				return nil, nil, nil, invalidf("agent %s: mcp %s: %s", ag.Name, name, service.APIText(err))
			}
			outS = append(outS, s...)
			continue
		}
		i := slices.IndexFunc(servers, func(s agent.MCPServer) bool { return s.Name == name })
		if i < 0 {
			return nil, nil, nil, missing("mcp", name)
		}
		outS = append(outS, servers[i])
	}
	var outD []agent.SQLDatabase
	for _, name := range conn.SQL {
		i := slices.IndexFunc(dbs, func(d agent.SQLDatabase) bool { return d.Name == name })
		if i < 0 {
			return nil, nil, nil, missing("sql", name)
		}
		outD = append(outD, dbs[i])
	}
	var outA []agent.OpenAPI
	for _, e := range conn.OpenAPI {
		name, _, own := strings.Cut(e, "=")
		if own {
			o, err := b.Connectors.OpenAPIs(&ConnectorFlags{None: true, OpenAPI: []string{e}})
			if err != nil {
				return nil, nil, nil, invalidf("agent %s: openapi %s: %s", ag.Name, name, service.APIText(err))
			}
			outA = append(outA, o...)
			continue
		}
		i := slices.IndexFunc(apis, func(o agent.OpenAPI) bool { return o.Name == name })
		if i < 0 {
			return nil, nil, nil, missing("openapi", name)
		}
		outA = append(outA, apis[i])
	}
	return outS, outD, outA, nil
}

func serverNames(servers []agent.MCPServer, dbs []agent.SQLDatabase, apis []agent.OpenAPI, kind string) []string {
	var out []string
	switch kind {
	case "mcp":
		for _, s := range servers {
			out = append(out, s.Name)
		}
	case "sql":
		for _, d := range dbs {
			out = append(out, d.Name)
		}
	case "openapi":
		for _, o := range apis {
			out = append(out, o.Name)
		}
	}
	if len(out) == 0 {
		out = []string{"none"}
	}
	return out
}
