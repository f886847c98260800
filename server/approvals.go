package server

import (
	"net/http"

	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

func (h *Handler) listApprovals(w http.ResponseWriter, r *http.Request, who *caller) error {
	list, err := h.svc.Approvals(r.Context(), who)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.ApprovalList{Approvals: list})
	return nil
}

func (h *Handler) approve(w http.ResponseWriter, r *http.Request, who *caller) error {
	return h.decideHTTP(w, r, who, policy.Allow)
}

func (h *Handler) deny(w http.ResponseWriter, r *http.Request, who *caller) error {
	return h.decideHTTP(w, r, who, policy.Deny)
}

func (h *Handler) decideHTTP(w http.ResponseWriter, r *http.Request, who *caller, d policy.Effect) error {
	var req api.Decide
	if err := decode(r, &req, true); err != nil {
		return err
	}
	run, err := h.svc.Decide(r.Context(), who, &service.Decision{RunID: r.PathValue("id"), CallID: r.PathValue("call"), Effect: d, Decide: req})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, run)
	return nil
}

// proposedEdit is GET /v1/runs/{id}/approvals/{call}/diff: what an edit
// waiting for approval would change (api.ProposedEdit).
func (h *Handler) proposedEdit(w http.ResponseWriter, r *http.Request, who *caller) error {
	pe, err := h.svc.ProposedEdit(r.Context(), who, r.PathValue("id"), r.PathValue("call"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, pe)
	return nil
}
