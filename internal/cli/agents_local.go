package cli

import (
	"context"

	"github.com/keel-run/keel/identity"
)

func (l *local) directory() *identity.Directory { return identity.NewDirectory(l.store, nil) }

func (l *local) Agents(ctx context.Context) ([]identity.Agent, error) {
	return l.directory().List(ctx)
}

func (l *local) Agent(ctx context.Context, name string) (*identity.Agent, error) {
	return l.directory().Get(ctx, name)
}

func (l *local) CreateAgent(ctx context.Context, p *identity.CreateParams) (*identity.Agent, error) {
	return l.directory().Create(ctx, p)
}

func (l *local) RevokeAgent(ctx context.Context, name string, p *identity.RevokeParams) (*identity.Agent, error) {
	ag, err := l.directory().Revoke(ctx, name, p)
	if err != nil {
		return nil, err
	}
	// Its grants too, here and at their servers (RFC 7009).
	if err := l.a.revokeAgentGrants(ctx, l.store, name, p); err != nil {
		return ag, err
	}
	return ag, nil
}

func (l *local) Ungrant(ctx context.Context, name, grant string, p *identity.UngrantParams) error {
	return l.directory().Ungrant(ctx, name, grant, p)
}
