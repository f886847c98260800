package cli

import (
	"github.com/spf13/pflag"

	"github.com/keel-run/keel/internal/assemble/builder"
)

// mcpFlags are the MCP flags of keel run.
type mcpFlags struct{ builder.ConnectorFlags }

func (f *mcpFlags) register(fl *pflag.FlagSet) {
	fl.StringArrayVar(&f.MCP, "mcp", nil, "MCP server whose tools the run offers as NAME__TOOL: NAME='COMMAND ARGS...' (stdio, started inside the sandbox) or NAME=URL (streamable HTTP; its host must be in --allow-host) (repeatable; adds to config.toml's [[mcp.servers]])")
	fl.StringArrayVar(&f.MCPSecretEnv, "mcp-secret-env", nil, "give the stdio MCP server NAME the run's secret variables VAR (of --secret-env or --secret-for-host): NAME=VAR[,VAR...]; without it a server gets none of them, since it runs workspace code before any call is decided (repeatable)")
	fl.BoolVar(&f.None, "no-mcp", false, "leave out the MCP servers and databases of config.toml")
	fl.StringArrayVar(&f.SQL, "sql", nil, "PostgreSQL database the run may query with NAME__sql_query: NAME=DSN (postgres://user@host/db; the password is never journaled: PGPASSWORD or ~/.pgpass for a resume) (repeatable)")
	fl.StringArrayVar(&f.OpenAPI, "openapi", nil, "OpenAPI 3 document (URL or file) whose operations the run offers as NAME__OPERATION: NAME=DOCUMENT; GET is read-only, other methods ask; tokens come from the vault provider whose resources cover the API (a missing grant waits: keel auth connect), else a static bearer token from $KEEL_OPENAPI_TOKEN_NAME (repeatable)")
	fl.BoolVar(&f.SQLAsUser, "sql-as-user", false, "run --sql statements as the user the run acts for (--on-behalf-of), with their own connection string from the vault (keel auth secret set sql:NAME)")
	fl.BoolVar(&f.SQLWrites, "sql-allow-writes", false, "let --sql statements that write run when the policy allows them (default: every statement runs in a READ ONLY transaction)")
}
