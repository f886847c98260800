package server

import (
	"errors"
	"net/http"

	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/telemetry"
)

// cost answers GET /v1/cost?by=agent|user|model|label|run&since=7d.
func (h *Handler) cost(w http.ResponseWriter, r *http.Request, _ *caller) error {
	out, err := h.costReport(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// uiCost is the web UI's cost page (same query as GET /v1/cost).
func (h *Handler) uiCost(w http.ResponseWriter, r *http.Request, who *caller) error {
	p := h.newPage(r.Context(), who, "Cost", "cost")
	rep, err := h.costReport(r)
	if err != nil {
		e, _ := classify(err)
		p.CostErr = e.msg
	}
	p.Cost = rep
	p.CostBy = r.URL.Query().Get("by")
	if p.CostBy == "" {
		p.CostBy = "agent"
	}
	h.render(w, http.StatusOK, "cost", p)
	return nil
}

func (h *Handler) costReport(r *http.Request) (*api.CostReport, error) {
	q := r.URL.Query()
	since, err := telemetry.ParseSince(q.Get("since"), h.svc.Clock()())
	if err != nil {
		return nil, badRequest("%v", err)
	}
	by := q.Get("by")
	if _, err := telemetry.NewCostAccumulator(by); err != nil {
		return nil, badRequest("%v", err)
	}
	rep, err := telemetry.Costs(r.Context(), h.rt.Store(), &telemetry.CostParams{By: by, Since: since})
	if err != nil {
		return nil, errors.Join(errors.New("cost report"), err)
	}
	out := &api.CostReport{By: rep.By, Rows: make([]api.CostRow, 0, len(rep.Rows)), Total: costRow(&rep.Total)}
	if !since.IsZero() {
		out.Since = &since
	}
	for i := range rep.Rows {
		out.Rows = append(out.Rows, costRow(&rep.Rows[i]))
	}
	return out, nil
}

func costRow(r *telemetry.CostRow) api.CostRow {
	return api.CostRow{Key: r.Key, Runs: r.Runs, Calls: r.Calls, InputTokens: r.Usage.InputTokens, OutputTokens: r.Usage.OutputTokens,
		CachedInputTokens: r.Usage.CachedInputTokens, CacheWriteTokens: r.Usage.CacheWriteTokens, CostUSD: r.Cost,
		ProviderCostUSD: r.ProviderCost, EstimatedCostUSD: r.EstimatedCost, UnpricedCalls: r.UnpricedCalls, Source: r.Source}
}
