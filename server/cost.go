package server

import (
	"net/http"
)

// cost answers GET /v1/cost?by=agent|user|model|label|run&since=7d.
func (h *Handler) cost(w http.ResponseWriter, r *http.Request, who *caller) error {
	q := r.URL.Query()
	out, err := h.svc.Cost(r.Context(), who, q.Get("by"), q.Get("since"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// uiCost is the web UI's cost page (same query as GET /v1/cost).
func (h *Handler) uiCost(w http.ResponseWriter, r *http.Request, who *caller) error {
	p := h.newPage(r.Context(), who, "Cost", "cost")
	q := r.URL.Query()
	rep, err := h.svc.Cost(r.Context(), who, q.Get("by"), q.Get("since"))
	if err != nil {
		e, _ := classify(err)
		p.CostErr = e.msg
	}
	p.Cost = rep
	p.CostBy = q.Get("by")
	if p.CostBy == "" {
		p.CostBy = "agent"
	}
	h.render(w, http.StatusOK, "cost", p)
	return nil
}
