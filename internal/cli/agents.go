package cli

import (
	"encoding/json"
	"fmt"
	"os/user"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/identity"
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

The directory is stored as a hash-chained stream in the journal database.`,
	}
	cmd.AddCommand(a.agentsCreateCmd(), a.agentsListCmd(), a.agentsRevokeCmd(), a.agentsShowCmd())
	return cmd
}

func (a *app) agentsCreateCmd() *cobra.Command {
	var kind, desc, by string
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create an agent",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			store, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			defer store.Close()
			ag, err := identity.NewDirectory(store, nil).Create(ctx, &identity.CreateParams{Name: args[0], Kind: identity.Kind(kind), Description: desc, By: a.person(by)})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "created %s agent %s\n", ag.Kind, ag.Name)
			return nil
		},
	}
	cmd.Flags().StringVar(&kind, "kind", "employee", "employee (acts as itself) or assistant (acts on behalf of a user)")
	cmd.Flags().StringVar(&desc, "description", "", "what the agent is for")
	cmd.Flags().StringVar(&by, "by", "", "who creates it (default: $USER)")
	return cmd
}

func (a *app) agentsListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List agents, revoked ones included",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			store, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			defer store.Close()
			agents, err := identity.NewDirectory(store, nil).List(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				for _, ag := range agents {
					if err := enc.Encode(ag); err != nil {
						return err
					}
				}
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "AGENT\tKIND\tSTATUS\tCREATED\tGRANTS\tDESCRIPTION")
			for _, ag := range agents {
				status, created := "active", "built in"
				if ag.Revoked {
					status = "revoked " + ag.RevokedAt.Local().Format("2006-01-02 15:04")
				}
				if !ag.Builtin {
					created = ag.Created.Local().Format("2006-01-02 15:04")
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", ag.Name, ag.Kind, status, created, len(ag.Grants), clip(ag.Description, 50))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON lines")
	return cmd
}

func (a *app) agentsShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Show an agent and its standing approvals",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			store, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			defer store.Close()
			ag, err := identity.NewDirectory(store, nil).Get(ctx, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "agent %s (%s)\n", ag.Name, ag.Kind)
			if ag.Description != "" {
				fmt.Fprintf(a.stdout, "  %s\n", ag.Description)
			}
			if ag.Revoked {
				fmt.Fprintf(a.stdout, "REVOKED %s by %s: %s\n", ag.RevokedAt.Local().Format("2006-01-02 15:04"), ag.RevokedBy, ag.RevokeReason)
			}
			fmt.Fprintf(a.stdout, "standing approvals: %d\n", len(ag.Grants))
			for _, g := range ag.Grants {
				what := "exactly " + g.Exact
				if len(g.Prefix) > 0 {
					what = "commands starting " + strings.Join(g.Prefix, " ")
				}
				fmt.Fprintf(a.stdout, "  %s %s: %s (approved by %s in run %s)\n", g.ID, g.Tool, what, g.By, g.Run)
			}
			return nil
		},
	}
}

func (a *app) agentsRevokeCmd() *cobra.Command {
	var reason, by string
	cmd := &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke an agent: its runs pause at their next gate decision",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			store, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			defer store.Close()
			ag, err := identity.NewDirectory(store, nil).Revoke(ctx, args[0], &identity.RevokeParams{By: a.person(by), Reason: reason})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "revoked agent %s; its runs pause at their next gate decision\n", ag.Name)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded)")
	cmd.Flags().StringVar(&by, "by", "", "who revokes it (default: $USER)")
	return cmd
}
