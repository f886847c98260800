package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
	"github.com/keel-run/keel/visible"
)

// tokensBackend is what the token commands need of a journal or a team
// server.
type tokensBackend interface {
	// CreateToken makes a token and returns it with its secret.
	CreateToken(ctx context.Context, p *token.Params) (*api.NewToken, error)
	// Tokens lists every token, revoked ones included, oldest first.
	Tokens(ctx context.Context) ([]api.Token, error)
	RevokeToken(ctx context.Context, id, by string) error
}

func (a *app) tokensCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "Create, list and revoke API tokens of the team server",
		Long: `API tokens authenticate people and systems to keel serve. Each has a
name (the person or system; it is recorded with every action taken with
the token) and scopes: runs:read, runs:write, approvals:write,
metrics:read (a Prometheus scraper: GET /metrics only), admin (everything). Only a SHA-256 digest of each token is stored, in the
journal database; the token itself is shown once, when it is created.
These commands work on the journal directly (--db), also while a server
runs on it; a revocation takes effect there within a second. With
--server they ask that server (with an admin token).`,
	}
	var name string
	var scopes, agents []string
	var by string
	create := &cobra.Command{
		Use:         "create --name NAME --scope SCOPE[,SCOPE...]",
		Short:       "Create a token and print it (shown only once)",
		Args:        cobra.NoArgs,
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if strings.TrimSpace(name) == "" {
				return usagef("--name: whose token is it (a person or system)?")
			}
			if err := token.CheckName(strings.TrimSpace(name)); err != nil {
				return usagef("--name: %v", strings.TrimPrefix(err.Error(), "token: "))
			}
			if err := token.CheckScopes(scopes); err != nil {
				return usagef("--scope: %v", strings.TrimPrefix(err.Error(), "token: "))
			}
			b, err := a.open(ctx, cmd, "name", "scope", "agent")
			if err != nil {
				return err
			}
			defer b.Close()
			tok, err := b.CreateToken(ctx, &token.Params{Name: name, Scopes: scopes, Agents: agents, By: a.person(by)})
			if err != nil {
				return err
			}
			a.printNewToken(tok)
			return nil
		},
	}
	create.Flags().StringVar(&name, "name", "", "the person or system the token is for")
	create.Flags().StringSliceVar(&scopes, "scope", []string{api.ScopeRunsRead}, "scopes: runs:read, runs:write (includes runs:read), approvals:write (includes runs:read), admin")
	create.Flags().StringSliceVar(&agents, "agent", nil, "agents the token's runs may act as (repeatable; runs:write tokens need one to start runs other than the demo)")
	create.Flags().StringVar(&by, "by", "", "who creates it (default: $USER)")
	list := &cobra.Command{
		Use:         "list",
		Short:       "List tokens (never their secrets)",
		Args:        cobra.NoArgs,
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				toks, err := b.Tokens(ctx)
				if err != nil {
					return err
				}
				return a.printTokens(toks)
			})
		},
	}
	revoke := &cobra.Command{
		Use:         "revoke TOKEN_ID",
		Short:       "Revoke a token",
		Args:        cobra.ExactArgs(1),
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				if err := b.RevokeToken(ctx, args[0], a.person(by)); err != nil {
					return err
				}
				fmt.Fprintf(tui.Esc(a.stdout), "revoked token %s\n", args[0])
				return nil
			})
		},
	}
	revoke.Flags().StringVar(&by, "by", "", "who revokes it (default: $USER)")
	cmd.AddCommand(create, list, revoke)
	return cmd
}

// printNewToken prints a token just created: what it is on stderr, its
// secret alone on stdout.
func (a *app) printNewToken(tok *api.NewToken) {
	agents := ""
	if len(tok.Agents) > 0 {
		agents = "; acts as " + strings.Join(tok.Agents, ", ")
	}
	fmt.Fprintf(a.stderr, "keel: created token %s for %s (%s%s); it is shown only this once:\n", tok.ID, visible.String(tok.Name), strings.Join(tok.Scopes, ", "), agents)
	fmt.Fprintln(a.stdout, tok.Secret)
}

// printTokens prints the token table of keel tokens list (names and the
// creators' names with invisible and control characters escaped).
func (a *app) printTokens(toks []api.Token) error {
	tw := tabwriter.NewWriter(tui.Esc(a.stdout), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOKEN\tNAME\tSCOPES\tAGENTS\tCREATED\tBY\tSTATUS")
	for _, t := range toks {
		status := "active"
		if t.Revoked != nil {
			status = "revoked " + t.Revoked.Local().Format("2006-01-02 15:04")
		}
		agents := strings.Join(t.Agents, ",")
		if agents == "" {
			agents = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, cell(t.Name), strings.Join(t.Scopes, ","), agents,
			t.Created.Local().Format("2006-01-02 15:04"), cell(t.CreatedBy), status)
	}
	return tw.Flush()
}
