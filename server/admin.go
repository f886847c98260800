package server

import (
	"net/http"

	"github.com/keel-run/keel/server/api"
)

func (h *Handler) listAgents(w http.ResponseWriter, r *http.Request, who *caller) error {
	list, err := h.svc.Agents(r.Context(), who)
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
	a, err := h.svc.CreateAgent(r.Context(), who, &req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, a)
	return nil
}

func (h *Handler) revokeAgent(w http.ResponseWriter, r *http.Request, who *caller) error {
	var req api.Revoke
	if err := decode(r, &req, true); err != nil {
		return err
	}
	a, err := h.svc.RevokeAgent(r.Context(), who, r.PathValue("id"), req.Reason)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a)
	return nil
}

func (h *Handler) restoreAgent(w http.ResponseWriter, r *http.Request, who *caller) error {
	var req api.Revoke
	if err := decode(r, &req, true); err != nil {
		return err
	}
	a, err := h.svc.RestoreAgent(r.Context(), who, r.PathValue("id"), req.Reason)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a)
	return nil
}

func (h *Handler) listGrants(w http.ResponseWriter, r *http.Request, who *caller) error {
	list, err := h.svc.Grants(r.Context(), who, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (h *Handler) revokeGrant(w http.ResponseWriter, r *http.Request, who *caller) error {
	var req api.Revoke
	if err := decode(r, &req, true); err != nil {
		return err
	}
	list, err := h.svc.RevokeGrant(r.Context(), who, r.PathValue("id"), r.PathValue("grant"), req.Reason)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (h *Handler) verifyAudit(w http.ResponseWriter, r *http.Request, who *caller) error {
	var req api.VerifyAudit
	if err := decode(r, &req, true); err != nil {
		return err
	}
	rep, err := h.svc.Audit(r.Context(), who, req.Runs)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

// checkPolicy answers POST /v1/policy/check: the server's policy's
// decision on one call (nothing runs).
func (h *Handler) checkPolicy(w http.ResponseWriter, r *http.Request, who *caller) error {
	var req api.PolicyCheck
	if err := decode(r, &req, false); err != nil {
		return err
	}
	d, err := h.svc.CheckPolicy(r.Context(), who, &req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

func (h *Handler) listTokens(w http.ResponseWriter, r *http.Request, who *caller) error {
	list, err := h.svc.TokenList(r.Context(), who)
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
	tok, err := h.svc.CreateToken(r.Context(), who, &req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, tok)
	return nil
}

func (h *Handler) revokeToken(w http.ResponseWriter, r *http.Request, who *caller) error {
	t, err := h.svc.RevokeToken(r.Context(), who, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}
