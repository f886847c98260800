package cli

import (
	"context"
	"fmt"
	"os/user"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
)

// person returns who is at the keyboard, for By fields: --by, else the
// login name.
func (a *app) person(by string) string {
	if by != "" {
		return by
	}
	if u := a.getenv("USER"); u != "" {
		return u
	}
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return "unknown"
}

func (a *app) agentsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agents",
		Short: "Create, list and revoke the agents (principals) runs execute as",
		Long: `An agent is the principal a run executes as: an employee agent acts as
itself; an assistant agent acts on behalf of a user (keel run --agent NAME
--on-behalf-of USER), and every gate decision sees both. Revoking an agent
takes effect at its next gate decision, in every process sharing the
journal: its running runs pause with reason "revoked".

The directory is stored as a hash-chained stream in the journal database.
Locally, names and --by are taken as given: whoever can write the database
can act as any agent (see docs/approvals.md, "Who may do what").`,
	}
	cmd.AddCommand(a.agentsCreateCmd(), a.agentsListCmd(), a.agentsRevokeCmd(), a.agentsShowCmd())
	cmd.AddCommand(a.agentsGrantsCmd(), a.agentsUngrantCmd(), a.agentsRestoreCmd())
	return cmd
}

func (a *app) agentsCreateCmd() *cobra.Command {
	var kind, desc, by string
	var conn api.Connectors
	var noConn bool
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create an agent",
		Long: `Create an agent. On a team server, an agent's runs offer the tools of the
server's MCP servers, databases and APIs (the [[mcp.servers]],
[[sql.databases]] and [[openapi.apis]] of its config.toml); --mcp, --sql
and --openapi give the agent its own set instead: a NAME of the server's,
or for --mcp and --openapi NAME=SPEC, the agent's own server
(NAME='COMMAND ARGS...' started in each run's sandbox, or NAME=URL) or
document. --no-connectors gives it none.`,
		Args:        cobra.ExactArgs(1),
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &api.CreateAgent{Name: args[0], Kind: kind, Description: desc}
			if noConn && len(conn.MCP)+len(conn.SQL)+len(conn.OpenAPI) > 0 {
				return usagef("--no-connectors and --mcp, --sql or --openapi: give one or the other")
			}
			if noConn || len(conn.MCP)+len(conn.SQL)+len(conn.OpenAPI) > 0 {
				req.Connectors = &conn
			}
			return a.withBackendAs(cmd, by, func(ctx context.Context, b backend) error {
				ag, err := b.CreateAgent(ctx, req)
				if err != nil {
					return err
				}
				fmt.Fprintf(tui.Esc(a.stdout), "created %s agent %s\n", ag.Kind, ag.Name)
				return nil
			}, "kind", "description", "mcp", "sql", "openapi", "no-connectors")
		},
	}
	cmd.Flags().StringArrayVar(&conn.MCP, "mcp", nil, "MCP server the agent's runs on a server offer: NAME (the server's) or NAME='COMMAND ARGS...' / NAME=URL (repeatable; default: all of the server's)")
	cmd.Flags().StringArrayVar(&conn.SQL, "sql", nil, "database of the server's config.toml the agent's runs may query: NAME (repeatable)")
	cmd.Flags().StringArrayVar(&conn.OpenAPI, "openapi", nil, "API the agent's runs offer: NAME (the server's) or NAME=DOCUMENT (repeatable)")
	cmd.Flags().BoolVar(&noConn, "no-connectors", false, "the agent's runs offer no MCP server, database or API")
	cmd.Flags().StringVar(&kind, "kind", "employee", "employee (acts as itself) or assistant (acts on behalf of a user)")
	cmd.Flags().StringVar(&desc, "description", "", "what the agent is for")
	cmd.Flags().StringVar(&by, "by", "", "who creates it (default: $USER)")
	return cmd
}

func (a *app) agentsListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:         "list",
		Short:       "List agents, revoked ones included",
		Args:        cobra.NoArgs,
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				list, err := b.Agents(ctx)
				if err != nil {
					return err
				}
				agents := make([]identity.Agent, 0, len(list))
				for _, ag := range list {
					x, err := withGrants(ctx, b, ag)
					if err != nil {
						return err
					}
					agents = append(agents, *x)
				}
				return tui.Agents(a.stdout, agents, asJSON)
			}, "json")
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON lines")
	return cmd
}

func (a *app) agentsShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:         "show NAME",
		Short:       "Show an agent and its standing approvals",
		Args:        cobra.ExactArgs(1),
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				ag, err := agentNamed(ctx, b, args[0])
				if err != nil {
					return err
				}
				tui.Agent(a.stdout, ag)
				return nil
			})
		},
	}
}

// agentsBackend is what the agent commands need of a journal or a team
// server.
type agentsBackend interface {
	// Agents lists the directory, revoked agents included.
	Agents(ctx context.Context) ([]api.Agent, error)
	// Grants lists agent name's standing approvals.
	Grants(ctx context.Context, name string) (*api.GrantList, error)
	CreateAgent(ctx context.Context, req *api.CreateAgent) (*api.Agent, error)
	RevokeAgent(ctx context.Context, name, reason string) (*api.Agent, error)
	Ungrant(ctx context.Context, name, grant, reason string) (*api.GrantList, error)
	// RestoreAgent undoes the revocation of a built-in agent or a
	// sub-agent.
	RestoreAgent(ctx context.Context, name, reason string) (*api.Agent, error)
}

// agentNamed returns agent name with its standing approvals, or the
// backend's refusal of an agent it does not have (not_found, as every
// operation on that name says it).
func agentNamed(ctx context.Context, b agentsBackend, name string) (*identity.Agent, error) {
	for range 2 {
		list, err := b.Agents(ctx)
		if err != nil {
			return nil, err
		}
		for _, ag := range list {
			if ag.Name == name {
				return withGrants(ctx, b, ag)
			}
		}
		// The refusal of the name, in the backend's words; an agent
		// created since the list was read is read again.
		if _, err := b.Grants(ctx, name); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("agent %q is not in the directory's list", name)
}

// withGrants is ag as the directory has it, with its standing approvals
// (the API's agent only counts them).
func withGrants(ctx context.Context, b agentsBackend, ag api.Agent) (*identity.Agent, error) {
	var grants []policy.Grant
	if ag.Grants > 0 {
		list, err := b.Grants(ctx, ag.Name)
		if err != nil {
			return nil, err
		}
		grants = list.Grants
	}
	out := tui.AgentOf(ag, grants)
	return &out, nil
}

func (a *app) agentsGrantsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:         "grants NAME",
		Short:       "List an agent's standing approvals (approvals remembered with --remember agent)",
		Args:        cobra.ExactArgs(1),
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				ag, err := agentNamed(ctx, b, args[0])
				if err != nil {
					return err
				}
				return tui.Grants(a.stdout, ag.Name, ag.Grants, asJSON)
			}, "json")
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON lines")
	return cmd
}

func (a *app) agentsUngrantCmd() *cobra.Command {
	var by, reason string
	cmd := &cobra.Command{
		Use:         "ungrant NAME GRANT",
		Short:       "Remove a standing approval: the calls it allowed ask again from the agent's next decision",
		Args:        cobra.ExactArgs(2),
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, args []string) error {
			// With --server, the server records the token's person as who
			// removed it (so --by is refused).
			return a.withBackendAs(cmd, by, func(ctx context.Context, b backend) error {
				if _, err := b.Ungrant(ctx, args[0], args[1], reason); err != nil {
					return err
				}
				fmt.Fprintf(tui.Esc(a.stdout), "removed standing approval %s of agent %s\n", args[1], args[0])
				return nil
			}, "reason")
		},
	}
	cmd.Flags().StringVar(&by, "by", "", "who removes it (default: $USER)")
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded)")
	return cmd
}

func (a *app) agentsRestoreCmd() *cobra.Command {
	var by, reason string
	cmd := &cobra.Command{
		Use:   "restore NAME",
		Short: "Undo the revocation of a built-in agent (keel-cli, keel-demo), without its old standing approvals",
		Long: `Restore lets a revoked built-in agent act again. Built-in agents cannot be
created again under their name, so without this a revoked keel-cli would
refuse every default keel run on the journal. The restoration is recorded
(agent.restored), and the agent's standing approvals from before are
dropped. A created agent's revocation is permanent: create a new agent.`,
		Args:        cobra.ExactArgs(1),
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, args []string) error {
			// With --server, the server records the token's person as who
			// restored it (so --by is refused).
			return a.withBackendAs(cmd, by, func(ctx context.Context, b backend) error {
				ag, err := b.RestoreAgent(ctx, args[0], reason)
				if err != nil {
					return err
				}
				fmt.Fprintf(tui.Esc(a.stdout), "restored agent %s; it may act again (its runs paused by the revocation continue with %s runs resume)\n", ag.Name, a.keelFor())
				return nil
			}, "reason")
		},
	}
	cmd.Flags().StringVar(&by, "by", "", "who restores it (default: $USER)")
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded)")
	return cmd
}

func (a *app) agentsRevokeCmd() *cobra.Command {
	var reason, by string
	cmd := &cobra.Command{
		Use:         "revoke NAME",
		Short:       "Revoke an agent: its runs pause at their next gate decision",
		Args:        cobra.ExactArgs(1),
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withBackendAs(cmd, by, func(ctx context.Context, b backend) error {
				ag, err := b.RevokeAgent(ctx, args[0], reason)
				if err != nil {
					return err
				}
				fmt.Fprintf(tui.Esc(a.stdout), "revoked agent %s; its runs pause at their next gate decision\n", ag.Name)
				return nil
			}, "reason")
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded)")
	cmd.Flags().StringVar(&by, "by", "", "who revokes it (default: $USER)")
	return cmd
}
