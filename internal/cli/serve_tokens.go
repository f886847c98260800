package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
)

// tokensBackend is what the token commands need of a journal or a team
// server.
type tokensBackend interface {
	// CreateToken makes a token and returns it with its secret.
	CreateToken(ctx context.Context, req *api.CreateToken) (*api.NewToken, error)
	// Tokens lists every token, revoked ones included, oldest first.
	Tokens(ctx context.Context) ([]api.Token, error)
	RevokeToken(ctx context.Context, id string) (*api.Token, error)
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
			b, err := a.openAs(ctx, cmd, by, "name", "scope", "agent")
			if err != nil {
				return err
			}
			defer b.Close()
			tok, err := b.CreateToken(ctx, &api.CreateToken{Name: name, Scopes: scopes, Agents: agents})
			if err != nil {
				return err
			}
			tui.NewToken(a.stdout, a.stderr, tok)
			return nil
		},
	}
	create.Flags().StringVar(&name, "name", "", "the person or system the token is for")
	create.Flags().StringSliceVar(&scopes, "scope", nil, "scopes: runs:read, runs:write (includes runs:read), approvals:write (includes runs:read), metrics:read, admin (default runs:read)")
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
				return tui.APITokens(a.stdout, toks)
			})
		},
	}
	revoke := &cobra.Command{
		Use:         "revoke TOKEN_ID",
		Short:       "Revoke a token",
		Args:        cobra.ExactArgs(1),
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withBackendAs(cmd, by, func(ctx context.Context, b backend) error {
				if _, err := b.RevokeToken(ctx, args[0]); err != nil {
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
