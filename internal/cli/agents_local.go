package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/service"

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

// RevokeAgent revokes the agent through the service, as the server
// does: its OAuth grants too, in this journal's vault and at their
// providers.
func (l *local) RevokeAgent(ctx context.Context, name string, p *identity.RevokeParams) (*identity.Agent, error) {
	o := &service.Options{NoExecution: true, Directory: l.directory()}
	if v, err := l.a.openVault(l.store); err == nil {
		o.Vault = v
	} else if !errors.Is(err, credential.ErrNoRecords) {
		return nil, err
	}
	svc := service.New(agent.NewRuntime(l.store, nil), o)
	defer svc.Shutdown(context.WithoutCancel(ctx))
	ag, err := svc.RevokeAgent(ctx, service.Local(p.By), name, p.Reason)
	if err != nil {
		return nil, serviceError(err)
	}
	out := agentOf(ag)
	return &out, nil
}

func (l *local) Ungrant(ctx context.Context, name, grant string, p *identity.UngrantParams) error {
	return l.directory().Ungrant(ctx, name, grant, p)
}
