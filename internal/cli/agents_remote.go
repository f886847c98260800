package cli

import (
	"context"
	"fmt"

	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/server/api"
)

// The server records the token's person as who acts (By is not sent).

func (r *remote) Agents(ctx context.Context) ([]identity.Agent, error) {
	list, err := r.Client.Agents(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]identity.Agent, 0, len(list))
	for _, ag := range list {
		x, err := r.withGrants(ctx, ag)
		if err != nil {
			return nil, err
		}
		out = append(out, *x)
	}
	return out, nil
}

func (r *remote) Agent(ctx context.Context, name string) (*identity.Agent, error) {
	list, err := r.Client.Agents(ctx)
	if err != nil {
		return nil, err
	}
	for _, ag := range list {
		if ag.Name == name {
			return r.withGrants(ctx, ag)
		}
	}
	return nil, fmt.Errorf("identity: %q: %w", name, identity.ErrUnknown)
}

// withGrants converts the API's agent to the directory's, with its
// standing approvals (the API's agent only counts them).
func (r *remote) withGrants(ctx context.Context, ag api.Agent) (*identity.Agent, error) {
	out := agentOf(ag)
	if ag.Grants > 0 {
		list, err := r.Client.Grants(ctx, ag.Name)
		if err != nil {
			return nil, err
		}
		out.Grants = list.Grants
	}
	return &out, nil
}

func (r *remote) CreateAgent(ctx context.Context, p *identity.CreateParams) (*identity.Agent, error) {
	req := &api.CreateAgent{Name: p.Name, Kind: string(p.Kind), Description: p.Description}
	if c := p.Connectors; c != nil {
		req.Connectors = &api.Connectors{MCP: c.MCP, SQL: c.SQL, OpenAPI: c.OpenAPI}
	}
	ag, err := r.Client.CreateAgent(ctx, req)
	if err != nil {
		return nil, err
	}
	out := agentOf(*ag)
	return &out, nil
}

func (r *remote) RevokeAgent(ctx context.Context, name string, p *identity.RevokeParams) (*identity.Agent, error) {
	ag, err := r.Client.RevokeAgent(ctx, name, p.Reason)
	if err != nil {
		return nil, err
	}
	out := agentOf(*ag)
	return &out, nil
}

func (r *remote) Ungrant(ctx context.Context, name, grant string, p *identity.UngrantParams) error {
	_, err := r.Client.Ungrant(ctx, name, grant, p.Reason)
	return err
}

// agentOf converts the API's agent to the directory's (without its
// standing approvals: the API counts them).
func agentOf(ag api.Agent) identity.Agent {
	out := identity.Agent{Name: ag.Name, Kind: identity.Kind(ag.Kind), Description: ag.Description, Created: ag.Created, CreatedBy: ag.CreatedBy,
		Builtin: ag.Builtin, Revoked: ag.Revoked, RevokedBy: ag.RevokedBy, RevokeReason: ag.RevokeReason, RestoredBy: ag.RestoredBy}
	if ag.RevokedAt != nil {
		out.RevokedAt = *ag.RevokedAt
	}
	if ag.RestoredAt != nil {
		out.RestoredAt = *ag.RestoredAt
	}
	if c := ag.Connectors; c != nil {
		out.Connectors = &identity.Connectors{MCP: c.MCP, SQL: c.SQL, OpenAPI: c.OpenAPI}
	}
	return out
}
