package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/keel-run/keel/audit"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
	"github.com/keel-run/keel/visible"
)

// agentView converts a directory entry to its API form.
func agentView(a *identity.Agent) api.Agent {
	out := api.Agent{Name: a.Name, Kind: string(a.Kind), Description: a.Description, Created: a.Created, CreatedBy: a.CreatedBy,
		Builtin: a.Builtin, Revoked: a.Revoked, RevokedBy: a.RevokedBy, RevokeReason: a.RevokeReason, Grants: len(a.Grants)}
	if c := a.Connectors.Redacted(); c != nil {
		out.Connectors = &api.Connectors{MCP: c.MCP, SQL: c.SQL, OpenAPI: c.OpenAPI}
	}
	if a.Revoked {
		t := a.RevokedAt
		out.RevokedAt = &t
	}
	if !a.RestoredAt.IsZero() {
		t := a.RestoredAt
		out.RestoredAt, out.RestoredBy = &t, a.RestoredBy
	}
	return out
}

// agents lists the directory's agents and the sub-agents that acted in
// a run (report 15, Q6: the child agents of a team were listed only once
// revoked or given a standing approval).
func (s *Service) agents(ctx context.Context) ([]api.Agent, error) {
	list, err := s.opts.Directory.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.Agent, 0, len(list))
	listed := map[string]bool{}
	for i := range list {
		out = append(out, agentView(&list[i]))
		listed[list[i].Name] = true
	}
	acted, err := s.subAgentsActed(ctx)
	if err != nil {
		return nil, err
	}
	for _, name := range acted {
		if listed[name] {
			continue
		}
		a, err := s.opts.Directory.Get(ctx, name)
		if errors.Is(err, identity.ErrUnknown) {
			continue // its parent agent is gone
		}
		if err != nil {
			return nil, err
		}
		out = append(out, agentView(a))
	}
	slices.SortFunc(out, func(a, b api.Agent) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// subAgentsActed returns the sub-agents ("PARENT/NAME") that runs of
// this journal executed as, sorted.
func (s *Service) subAgentsActed(ctx context.Context) ([]string, error) {
	runs, err := s.runs(ctx, nil, 0)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range runs {
		if strings.Contains(r.Agent, "/") && !slices.Contains(out, r.Agent) {
			out = append(out, r.Agent)
		}
	}
	slices.Sort(out)
	return out, nil
}

// checkSubAgent refuses a sub-agent name that nothing knows: the
// directory makes up any "PARENT/NAME" below an agent it has, so a
// typo would be revoked (or shown) as if it were a child agent. A
// sub-agent is known once the directory holds something of it (it was
// revoked, or given a standing approval) or a run acted as it; other
// names are refused as no agent, as every name that names nothing.
func (s *Service) checkSubAgent(ctx context.Context, name string) error {
	if !strings.Contains(name, "/") {
		return nil
	}
	list, err := s.opts.Directory.List(ctx)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(list, func(a identity.Agent) bool { return a.Name == name }) {
		return nil
	}
	acted, err := s.subAgentsActed(ctx)
	if err != nil {
		return err
	}
	if slices.Contains(acted, name) {
		return nil
	}
	return notFound("no agent %q: no run acted as this sub-agent (the agents list shows the child agents that did)", name)
}

// identityError maps the directory's errors about agent name to API
// errors, in one wording whatever the operation: the directory's own
// text names its package and the operation ("identity: revoke ...").
func identityError(err error, name string) error {
	switch {
	case errors.Is(err, identity.ErrUnknown):
		return noAgent(name)
	case errors.Is(err, identity.ErrExists):
		return conflict(api.CodeConflict, "agent %q already exists", name)
	case errors.Is(err, identity.ErrRevokedAgent):
		return conflict(api.CodeConflict, "agent %q is revoked already", name)
	case errors.Is(err, identity.ErrInvalid):
		return badRequest("%s", strings.ReplaceAll(err.Error(), "identity: ", ""))
	}
	return err
}

// noAgent is the refusal of an operation on agent name, which the
// directory does not have.
func noAgent(name string) error {
	return notFound("no agent %q", name)
}

func (s *Service) newAgent(ctx context.Context, req *api.CreateAgent, who *Caller) (api.Agent, error) {
	p := &identity.CreateParams{Name: req.Name, Kind: identity.Kind(req.Kind), Description: req.Description, By: who.Name}
	if c := req.Connectors; c != nil {
		p.Connectors = &identity.Connectors{MCP: c.MCP, SQL: c.SQL, OpenAPI: c.OpenAPI}
	}
	a, err := s.opts.Directory.Create(ctx, p)
	if err != nil {
		return api.Agent{}, identityError(err, req.Name)
	}
	if err := s.record(ctx, who, action{Action: "agent.create", Target: a.Name, Detail: string(a.Kind)}); err != nil {
		return api.Agent{}, err
	}
	// Its signing key, now rather than at its first credential (a
	// server without a vault key makes it then).
	if k, ok := s.opts.Vault.(interface {
		EnsureAgentKey(ctx context.Context, agent string) (string, error)
	}); ok {
		if _, err := k.EnsureAgentKey(ctx, a.Name); err != nil && !errors.Is(err, credential.ErrNoKey) {
			return agentView(a), fmt.Errorf("server: agent %s was created, but its signing key was not: %w", a.Name, err)
		}
	}
	return agentView(a), nil
}

// revoke revokes agent name: its runs stop at their next gate decision
// (the executor's principal check), in this server and in every process
// sharing the journal.
func (s *Service) revoke(ctx context.Context, name, reason string, who *Caller) (api.Agent, error) {
	if err := s.checkSubAgent(ctx, name); err != nil {
		return api.Agent{}, err
	}
	a, err := s.opts.Directory.Revoke(ctx, name, &identity.RevokeParams{By: who.Name, Reason: reason})
	if errors.Is(err, identity.ErrRevokedAgent) {
		if a, gerr := s.opts.Directory.Get(ctx, name); gerr == nil && a.Revoked {
			return api.Agent{}, conflict(api.CodeConflict, "agent %q is revoked already (%s by %s)", name, a.RevokedAt.UTC().Format(time.RFC3339), visible.String(a.RevokedBy))
		}
	}
	if err != nil {
		return api.Agent{}, identityError(err, name)
	}
	if err := s.record(ctx, who, action{Action: "agent.revoke", Target: name, Detail: reason}); err != nil {
		return api.Agent{}, err
	}
	// Its OAuth grants too, here and at their authorization servers (RFC
	// 7009), as keel agents revoke does on a journal: the vault issues no
	// token for a revoked agent, but the provider would keep honouring
	// the ones it issued.
	if v, ok := s.opts.Vault.(interface {
		Revoke(ctx context.Context, sel credential.Selector, rp *credential.RevokeParams) ([]credential.Grant, error)
	}); ok {
		if _, err := v.Revoke(ctx, credential.Selector{Agent: a.Name}, &credential.RevokeParams{By: who.Name, Reason: "agent revoked: " + reason}); err != nil {
			return agentView(a), fmt.Errorf("the agent is revoked, but revoking its grants failed: %w", err)
		}
	}
	return agentView(a), nil
}

// restore undoes the revocation of agent name, a built-in agent or a
// sub-agent (identity.Directory.Restore): it may act again from its next
// gate decision, without its standing approvals from before.
func (s *Service) restore(ctx context.Context, name, reason string, who *Caller) (api.Agent, error) {
	if err := s.checkSubAgent(ctx, name); err != nil {
		return api.Agent{}, err
	}
	a, err := s.opts.Directory.Get(ctx, name)
	if err != nil {
		return api.Agent{}, identityError(err, name)
	}
	switch {
	case !a.Builtin && a.Parent == "":
		return api.Agent{}, badRequest("agent %q was created, so its revocation is permanent: only a revoked built-in agent or sub-agent can be restored (create a new agent instead)", name)
	case !a.Revoked:
		return api.Agent{}, badRequest("agent %q is not revoked: only a revoked built-in agent or sub-agent can be restored", name)
	}
	if a, err = s.opts.Directory.Restore(ctx, name, &identity.RestoreParams{By: who.Name, Reason: reason}); err != nil {
		return api.Agent{}, identityError(err, name)
	}
	if err := s.record(ctx, who, action{Action: "agent.restore", Target: name, Detail: reason}); err != nil {
		return api.Agent{}, err
	}
	return agentView(a), nil
}

// grants returns agent name's standing approvals.
func (s *Service) grants(ctx context.Context, name string) (api.GrantList, error) {
	if err := s.checkSubAgent(ctx, name); err != nil {
		return api.GrantList{}, err
	}
	a, err := s.opts.Directory.Get(ctx, name)
	if err != nil {
		return api.GrantList{}, identityError(err, name)
	}
	out := api.GrantList{Agent: a.Name, Grants: a.Grants}
	if out.Grants == nil {
		out.Grants = []policy.Grant{}
	}
	return out, nil
}

// ungrant removes standing approval grant of agent name for who (an
// agent.ungranted event names them): the calls it allowed ask again from
// the agent's next gate decision, in every process sharing the journal.
// It returns the agent's remaining grants.
func (s *Service) ungrant(ctx context.Context, name, grant, reason string, who *Caller) (api.GrantList, error) {
	list, err := s.grants(ctx, name)
	if err != nil {
		return list, err
	}
	if !slices.ContainsFunc(list.Grants, func(g policy.Grant) bool { return g.ID == grant }) {
		r, ok, err := s.opts.Directory.Removed(ctx, name, grant)
		if err != nil {
			return list, err
		}
		if !ok {
			return list, notFound("agent %s has no standing approval %s (agents grants %s lists its approvals)", name, visible.String(grant), name)
		}
		how := "revoked"
		if r.Restore {
			how = "cleared when the agent was restored"
		}
		return list, conflict(api.CodeConflict, "standing approval %s of agent %s was %s already (%s by %s)", visible.String(grant), name, how, r.At.UTC().Format(time.RFC3339), visible.String(r.By))
	}
	if err := s.opts.Directory.Ungrant(ctx, name, grant, &identity.UngrantParams{By: who.Name, Reason: reason}); err != nil {
		return api.GrantList{}, identityError(err, name)
	}
	d := grant
	if reason != "" {
		d += ": " + reason
	}
	if err := s.record(ctx, who, action{Action: "agent.ungrant", Target: name, Detail: d}); err != nil {
		return api.GrantList{}, err
	}
	return s.grants(ctx, name)
}

// audit verifies the journals named in ids, or every journal (runs and
// system streams) when ids is empty, with package audit: hash chain from
// the first event, agreement with the store's index, and folding.
func (s *Service) audit(ctx context.Context, ids []string) (*api.AuditReport, error) {
	store := s.rt.Store()
	var reps []audit.Report
	if len(ids) == 0 {
		var err error
		if reps, err = audit.VerifyAll(ctx, store); err != nil {
			return nil, err
		}
	}
	for _, ref := range ids {
		id, err := ResolveJournal(ctx, store, ref)
		if err != nil {
			return nil, err
		}
		r, err := audit.Verify(ctx, store, id)
		if errors.Is(err, journal.ErrNotFound) {
			// Removed since it was resolved: as good as any other
			// missing journal, a failed check.
			r = audit.Report{RunID: id, Kind: "run", Reason: "no such journal"}
		} else if err != nil {
			return nil, err
		}
		reps = append(reps, r)
	}
	out := &api.AuditReport{OK: true, Journals: []api.AuditJournal{}}
	for _, r := range reps {
		out.Streams++
		out.Events += int64(r.Events)
		out.Journals = append(out.Journals, api.AuditJournal{ID: r.RunID, Kind: r.Kind, Events: r.Events, OK: r.OK,
			FirstBad: r.FirstBad, Reason: r.Reason, Status: string(r.Status), Head: r.Head})
		if !r.OK {
			out.OK = false
			out.Problems = append(out.Problems, api.AuditProblem{Stream: r.RunID, Seq: r.FirstBad, Reason: r.Reason})
		}
	}
	return out, nil
}

// checkAgents checks that a token may be bound to agents: each exists in
// the directory and is not revoked.
func (s *Service) checkAgents(ctx context.Context, agents []string) error {
	for _, name := range agents {
		a, err := s.opts.Directory.Get(ctx, name)
		if err != nil {
			return identityError(err, name)
		}
		if a.Revoked {
			return badRequest("agent %q is revoked: a token cannot act for it", name)
		}
		if a.Parent != "" {
			return badRequest("a token cannot act as a sub-agent (%s): sub-agents act only inside their parent's runs", name)
		}
	}
	return nil
}

// Agents lists the agents of the directory, the built-in ones included.
func (s *Service) Agents(ctx context.Context, who *Caller) ([]api.Agent, error) { return s.agents(ctx) }

// CreateAgent adds an agent to the directory (an admin's operation).
func (s *Service) CreateAgent(ctx context.Context, who *Caller, req *api.CreateAgent) (api.Agent, error) {
	return s.newAgent(ctx, req, who)
}

// RevokeAgent revokes agent name: it takes effect at its runs' next gate
// decision.
func (s *Service) RevokeAgent(ctx context.Context, who *Caller, name, reason string) (api.Agent, error) {
	return s.revoke(ctx, name, reason, who)
}

// RestoreAgent undoes the revocation of agent name, a built-in agent or
// a sub-agent (an admin's operation); a created agent's revocation is
// permanent.
func (s *Service) RestoreAgent(ctx context.Context, who *Caller, name, reason string) (api.Agent, error) {
	return s.restore(ctx, name, reason, who)
}

// Grants lists the standing approvals of agent name.
func (s *Service) Grants(ctx context.Context, who *Caller, name string) (api.GrantList, error) {
	return s.grants(ctx, name)
}

// RevokeGrant revokes a standing approval of agent name.
func (s *Service) RevokeGrant(ctx context.Context, who *Caller, name, grant, reason string) (api.GrantList, error) {
	return s.ungrant(ctx, name, grant, reason, who)
}

// Audit verifies the journals refs name (every run and system stream
// when empty), each as [ResolveJournal] resolves it: a reference that
// names none is refused (not_found, or invalid_request when ambiguous)
// before anything is checked, never reported as a failed check.
func (s *Service) Audit(ctx context.Context, who *Caller, refs []string) (*api.AuditReport, error) {
	rep, err := s.audit(ctx, refs)
	if err != nil || who.admin() {
		return rep, err
	}
	// A run's head hash commits to every event, memory who may not see
	// included: withheld, as in its events (memory_hide.go).
	for i := range rep.Journals {
		j := &rep.Journals[i]
		if j.Kind != "run" || j.Head == "" {
			continue
		}
		m, err := s.heldMemory(ctx, j.ID, 0)
		if err != nil {
			return nil, err
		}
		if s.hidden(who, m) != nil {
			j.Head = ""
		}
	}
	return rep, nil
}

// TokenList lists the API tokens (never their secrets).
func (s *Service) TokenList(ctx context.Context, who *Caller) ([]api.Token, error) {
	return s.tokens.List(ctx)
}

// CreateToken makes an API token for who (an admin): its secret is
// returned once and stored only as a digest.
func (s *Service) CreateToken(ctx context.Context, who *Caller, req *api.CreateToken) (*api.NewToken, error) {
	if err := token.CheckName(strings.TrimSpace(req.Name)); err != nil {
		return nil, badRequest("name: %s", strings.TrimPrefix(err.Error(), "token: "))
	}
	scopes := TokenScopes(req.Scopes)
	if err := token.CheckScopes(scopes); err != nil {
		return nil, badRequest("%s", strings.TrimPrefix(err.Error(), "token: "))
	}
	if err := s.checkAgents(ctx, req.Agents); err != nil {
		return nil, err
	}
	tok, err := s.tokens.Create(ctx, &token.Params{Name: req.Name, Scopes: scopes, Agents: req.Agents, By: who.Name})
	if err != nil {
		return nil, err
	}
	if err := s.record(ctx, who, action{Action: "token.create", Target: tok.ID, Detail: tok.Name}); err != nil {
		return tok, err
	}
	return tok, nil
}

// DefaultTokenScope is the scope of a token created without one, in every
// front end: the least a token may do.
const DefaultTokenScope = api.ScopeRunsRead

// TokenScopes is the scopes a token is created with when scopes are
// asked for: each once, in the order first given, surrounding spaces
// trimmed; [DefaultTokenScope] when none is.
func TokenScopes(scopes []string) []string {
	var out []string
	for _, sc := range scopes {
		if sc = strings.TrimSpace(sc); !slices.Contains(out, sc) {
			out = append(out, sc)
		}
	}
	if len(out) == 0 {
		return []string{DefaultTokenScope}
	}
	return out
}

// RevokeToken revokes API token id and returns it as listed.
func (s *Service) RevokeToken(ctx context.Context, who *Caller, id string) (api.Token, error) {
	if err := s.tokens.Revoke(ctx, id, who.Name); errors.Is(err, token.ErrNotFound) {
		return api.Token{}, noToken(id)
	} else if errors.Is(err, token.ErrRevoked) {
		return api.Token{}, conflict(api.CodeConflict, "%s", strings.TrimPrefix(err.Error(), "token: revoked already: "))
	} else if err != nil {
		return api.Token{}, err
	}
	if err := s.record(ctx, who, action{Action: "token.revoke", Target: id}); err != nil {
		return api.Token{}, err
	}
	list, err := s.tokens.List(ctx)
	if err != nil {
		return api.Token{}, err
	}
	for _, t := range list {
		if t.ID == id {
			return t, nil
		}
	}
	return api.Token{}, noToken(id)
}

// noToken is the refusal of an operation on API token id, which does
// not exist.
func noToken(id string) error {
	return notFound("no token %q", id)
}
