package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

func (l *local) directory() *identity.Directory { return identity.NewDirectory(l.store, nil) }

// CreateAgent creates the agent and its Ed25519 signing key (sealed
// under the vault key); without a vault key the key is made at the
// agent's first credential, and a note says so.
func (l *local) CreateAgent(ctx context.Context, req *api.CreateAgent) (*api.Agent, error) {
	ag, err := l.Session.CreateAgent(ctx, req)
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

// RevokeAgent revokes the agent through a service that holds this
// journal's vault, as the server does: its OAuth grants too, in the
// vault and at their providers.
func (l *local) RevokeAgent(ctx context.Context, name, reason string) (*api.Agent, error) {
	o := &service.Options{NoExecution: true, Directory: l.directory()}
	if v, err := l.a.openVault(l.store); err == nil {
		o.Vault = v
	} else if !errors.Is(err, credential.ErrNoRecords) {
		return nil, err
	}
	svc := service.New(agent.NewRuntime(l.store, nil), o)
	defer svc.Shutdown(context.WithoutCancel(ctx))
	return svc.For(l.Caller()).RevokeAgent(ctx, name, reason)
}
