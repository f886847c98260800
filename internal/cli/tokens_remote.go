package cli

import (
	"context"

	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
)

// The server records the admin token's person as who acts (By is not
// sent).

func (r *remote) CreateToken(ctx context.Context, p *token.Params) (*api.NewToken, error) {
	return r.Client.CreateToken(ctx, &api.CreateToken{Name: p.Name, Scopes: p.Scopes, Agents: p.Agents})
}

func (r *remote) Tokens(ctx context.Context) ([]api.Token, error) { return r.Client.Tokens(ctx) }

func (r *remote) RevokeToken(ctx context.Context, id, _ string) error {
	_, err := r.Client.RevokeToken(ctx, id)
	return err
}
