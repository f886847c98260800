package cli

import (
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/redact"
	"github.com/keel-run/keel/tool/mcp"
)

// sqlServers returns the run's databases: config.toml's (unless --no-mcp),
// then --sql NAME=DSN. The journaled DSN has no password; the full one is
// kept in secrets for this process.
func (a *app) sqlDatabases(f *mcpFlags) ([]agent.SQLDatabase, map[string]string, error) {
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
	if a.cfg != nil && !f.none {
		for _, c := range a.cfg.SQL.Databases {
			if err := mcp.CheckName(c.Name); err != nil {
				return nil, nil, usagef("%s: [[sql.databases]]: %v", a.configFile(), err)
			}
			put(agent.SQLDatabase{Name: c.Name, DSN: redact.DSN(c.DSN), AllowWrites: c.AllowWrites, MaxRows: c.MaxRows, AsUser: c.AsUser}, c.DSN)
		}
	}
	for _, v := range f.sql {
		name, dsn, ok := strings.Cut(v, "=")
		if !ok || dsn == "" {
			return nil, nil, usagef("--sql %q: want NAME=DSN (postgres://user@host/db)", v)
		}
		if err := mcp.CheckName(name); err != nil {
			return nil, nil, usagef("--sql: %v", err)
		}
		put(agent.SQLDatabase{Name: name, DSN: redact.DSN(dsn), AllowWrites: f.sqlWrites, AsUser: f.sqlAsUser}, dsn)
	}
	return out, secrets, nil
}
