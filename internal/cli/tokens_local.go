package cli

import (
	"context"
	"strings"

	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
)

func (l *local) tokens() *token.Set { return token.New(l.store, nil) }

// CreateToken checks the token's agents against the directory first (the
// server does the same for its create route).
func (l *local) CreateToken(ctx context.Context, p *token.Params) (*api.NewToken, error) {
	dir := l.directory()
	for _, ag := range p.Agents {
		got, err := dir.Get(ctx, ag)
		if err != nil {
			return nil, usagef("--agent %s: %v (create it with keel agents create)", ag, strings.TrimPrefix(err.Error(), "identity: "))
		}
		if got.Revoked {
			return nil, usagef("--agent %s: the agent is revoked", ag)
		}
	}
	return l.tokens().Create(ctx, p)
}

func (l *local) Tokens(ctx context.Context) ([]api.Token, error) { return l.tokens().List(ctx) }

func (l *local) RevokeToken(ctx context.Context, id, by string) error {
	return l.tokens().Revoke(ctx, id, by)
}
