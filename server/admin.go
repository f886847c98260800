package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

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
	if c := a.Connectors; c != nil {
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

// agents lists the directory's agents.
func (h *Handler) agents(ctx context.Context) ([]api.Agent, error) {
	list, err := h.opts.Directory.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.Agent, 0, len(list))
	for i := range list {
		out = append(out, agentView(&list[i]))
	}
	return out, nil
}

// identityError maps the directory's errors to API errors.
func identityError(err error) error {
	switch {
	case errors.Is(err, identity.ErrUnknown):
		return notFound("%s", strings.TrimPrefix(err.Error(), "identity: "))
	case errors.Is(err, identity.ErrExists), errors.Is(err, identity.ErrRevokedAgent):
		return conflict(api.CodeConflict, "%s", strings.TrimPrefix(err.Error(), "identity: "))
	case errors.Is(err, identity.ErrInvalid):
		return badRequest("%s", strings.TrimPrefix(err.Error(), "identity: "))
	}
	return err
}

func (h *Handler) listAgents(w http.ResponseWriter, r *http.Request, _ *caller) error {
	list, err := h.agents(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.AgentList{Agents: list})
	return nil
}

func (h *Handler) createAgent(w http.ResponseWriter, r *http.Request, who *caller) error {
	var req api.CreateAgent
	if err := decode(r, &req, false); err != nil {
		return err
	}
	a, err := h.newAgent(r.Context(), &req, who)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, a)
	return nil
}

func (h *Handler) newAgent(ctx context.Context, req *api.CreateAgent, who *caller) (api.Agent, error) {
	p := &identity.CreateParams{Name: req.Name, Kind: identity.Kind(req.Kind), Description: req.Description, By: who.Name}
	if c := req.Connectors; c != nil {
		p.Connectors = &identity.Connectors{MCP: c.MCP, SQL: c.SQL, OpenAPI: c.OpenAPI}
	}
	a, err := h.opts.Directory.Create(ctx, p)
	if err != nil {
		return api.Agent{}, identityError(err)
	}
	if err := h.record(ctx, who, action{Action: "agent.create", Target: a.Name, Detail: string(a.Kind)}); err != nil {
		return api.Agent{}, err
	}
	// Its signing key, now rather than at its first credential (a
	// server without a vault key makes it then).
	if k, ok := h.opts.Vault.(interface {
		EnsureAgentKey(ctx context.Context, agent string) (string, error)
	}); ok {
		if _, err := k.EnsureAgentKey(ctx, a.Name); err != nil && !errors.Is(err, credential.ErrNoKey) {
			return agentView(a), fmt.Errorf("server: agent %s was created, but its signing key was not: %w", a.Name, err)
		}
	}
	return agentView(a), nil
}

func (h *Handler) revokeAgent(w http.ResponseWriter, r *http.Request, who *caller) error {
	var req api.Revoke
	if err := decode(r, &req, true); err != nil {
		return err
	}
	a, err := h.revoke(r.Context(), r.PathValue("id"), req.Reason, who)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a)
	return nil
}

// revoke revokes agent name: its runs stop at their next gate decision
// (the executor's principal check), in this server and in every process
// sharing the journal.
func (h *Handler) revoke(ctx context.Context, name, reason string, who *caller) (api.Agent, error) {
	a, err := h.opts.Directory.Revoke(ctx, name, &identity.RevokeParams{By: who.Name, Reason: reason})
	if err != nil {
		return api.Agent{}, identityError(err)
	}
	if err := h.record(ctx, who, action{Action: "agent.revoke", Target: name, Detail: reason}); err != nil {
		return api.Agent{}, err
	}
	return agentView(a), nil
}

func (h *Handler) listGrants(w http.ResponseWriter, r *http.Request, _ *caller) error {
	list, err := h.grants(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// grants returns agent name's standing approvals.
func (h *Handler) grants(ctx context.Context, name string) (api.GrantList, error) {
	a, err := h.opts.Directory.Get(ctx, name)
	if err != nil {
		return api.GrantList{}, identityError(err)
	}
	out := api.GrantList{Agent: a.Name, Grants: a.Grants}
	if out.Grants == nil {
		out.Grants = []policy.Grant{}
	}
	return out, nil
}

func (h *Handler) revokeGrant(w http.ResponseWriter, r *http.Request, who *caller) error {
	var req api.Revoke
	if err := decode(r, &req, true); err != nil {
		return err
	}
	list, err := h.ungrant(r.Context(), r.PathValue("id"), r.PathValue("grant"), req.Reason, who)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// ungrant removes standing approval grant of agent name for who (an
// agent.ungranted event names them): the calls it allowed ask again from
// the agent's next gate decision, in every process sharing the journal.
// It returns the agent's remaining grants.
func (h *Handler) ungrant(ctx context.Context, name, grant, reason string, who *caller) (api.GrantList, error) {
	list, err := h.grants(ctx, name)
	if err != nil {
		return list, err
	}
	if !slices.ContainsFunc(list.Grants, func(g policy.Grant) bool { return g.ID == grant }) {
		return list, notFound("agent %s has no standing approval %s (list them at /v1/agents/%s/grants)", name, visible.String(grant), name)
	}
	if err := h.opts.Directory.Ungrant(ctx, name, grant, &identity.UngrantParams{By: who.Name, Reason: reason}); err != nil {
		return api.GrantList{}, identityError(err)
	}
	d := grant
	if reason != "" {
		d += ": " + reason
	}
	if err := h.record(ctx, who, action{Action: "agent.ungrant", Target: name, Detail: d}); err != nil {
		return api.GrantList{}, err
	}
	return h.grants(ctx, name)
}

func (h *Handler) verifyAudit(w http.ResponseWriter, r *http.Request, _ *caller) error {
	var req api.VerifyAudit
	if err := decode(r, &req, true); err != nil {
		return err
	}
	rep, err := h.audit(r.Context(), req.Runs)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

// audit verifies the journals named in ids, or every journal (runs and
// system streams) when ids is empty, with package audit: hash chain from
// the first event, agreement with the store's index, and folding.
func (h *Handler) audit(ctx context.Context, ids []string) (*api.AuditReport, error) {
	store := h.rt.Store()
	var reps []audit.Report
	if len(ids) == 0 {
		var err error
		if reps, err = audit.VerifyAll(ctx, store); err != nil {
			return nil, err
		}
	}
	for _, id := range ids {
		r, err := audit.Verify(ctx, store, id)
		if errors.Is(err, journal.ErrNotFound) {
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

func (h *Handler) listTokens(w http.ResponseWriter, r *http.Request, _ *caller) error {
	list, err := h.tokens.List(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.TokenList{Tokens: list})
	return nil
}

func (h *Handler) createToken(w http.ResponseWriter, r *http.Request, who *caller) error {
	var req api.CreateToken
	if err := decode(r, &req, false); err != nil {
		return err
	}
	if err := token.CheckName(strings.TrimSpace(req.Name)); err != nil {
		return badRequest("name: %s", strings.TrimPrefix(err.Error(), "server: "))
	}
	if err := token.CheckScopes(req.Scopes); err != nil {
		return badRequest("%s", strings.TrimPrefix(err.Error(), "server: "))
	}
	if err := h.checkAgents(r.Context(), req.Agents); err != nil {
		return err
	}
	tok, err := h.tokens.Create(r.Context(), &token.Params{Name: req.Name, Scopes: req.Scopes, Agents: req.Agents, By: who.Name})
	if err != nil {
		return err
	}
	if err := h.record(r.Context(), who, action{Action: "token.create", Target: tok.ID, Detail: tok.Name}); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, tok)
	return nil
}

// checkAgents checks that a token may be bound to agents: each exists in
// the directory and is not revoked.
func (h *Handler) checkAgents(ctx context.Context, agents []string) error {
	for _, name := range agents {
		a, err := h.opts.Directory.Get(ctx, name)
		if err != nil {
			return identityError(err)
		}
		if a.Revoked {
			return conflict(api.CodeConflict, "agent %s is revoked", name)
		}
	}
	return nil
}

func (h *Handler) revokeToken(w http.ResponseWriter, r *http.Request, who *caller) error {
	id := r.PathValue("id")
	if err := h.tokens.Revoke(r.Context(), id, who.Name); err != nil {
		return err
	}
	if err := h.record(r.Context(), who, action{Action: "token.revoke", Target: id}); err != nil {
		return err
	}
	list, err := h.tokens.List(r.Context())
	if err != nil {
		return err
	}
	for _, t := range list {
		if t.ID == id {
			writeJSON(w, http.StatusOK, t)
			return nil
		}
	}
	return notFound("no such token %s", id)
}
