package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/keel-run/keel/credential"

	"github.com/keel-run/keel/identity"
)

func (l *local) directory() *identity.Directory { return identity.NewDirectory(l.store, nil) }

func (l *local) Agents(ctx context.Context) ([]identity.Agent, error) {
	return l.directory().List(ctx)
}

func (l *local) Agent(ctx context.Context, name string) (*identity.Agent, error) {
	return l.directory().Get(ctx, name)
}

// CreateAgent creates the agent and its Ed25519 signing key (sealed
// under the vault key); without a vault key the key is made at the
// agent's first credential, and a note says so.
func (l *local) CreateAgent(ctx context.Context, p *identity.CreateParams) (*identity.Agent, error) {
	ag, err := l.directory().Create(ctx, p)
	if err != nil {
		return nil, err
	}
	v, err := l.a.openVault(l.store)
	if err == nil {
		var kid string
		if kid, err = v.EnsureAgentKey(ctx, ag.Name); err == nil {
			fmt.Fprintf(l.a.stderr, "keel: agent %s signs its credentials with key %s (public at /.well-known/jwks.json of keel serve)\n", ag.Name, kid)
			return ag, nil
		}
	}
	if errors.Is(err, credential.ErrNoKey) {
		fmt.Fprintf(l.a.stderr, "keel: note: no vault key, so agent %s gets its signing key at its first credential (keel auth key generate makes one)\n", ag.Name)
		return ag, nil
	}
	return ag, fmt.Errorf("agent %s was created, but its signing key was not: %w", ag.Name, err)
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
