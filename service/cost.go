package service

import (
	"context"
	"errors"

	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/telemetry/cost"
)

// Cost sums the cost of every model call of the runs created since
// (a duration such as 7d, a date such as 2026-11-01, or "" for every
// run), grouped by by (one of cost.CostGroups; "" is agent). A
// report spans the runs of every agent: admins (and the command line on
// the journal's machine) read it.
func (s *Service) Cost(ctx context.Context, who *Caller, by, since string) (*api.CostReport, error) {
	if !who.admin() {
		return nil, forbidden("the cost report is an admin's: it spans the runs of every agent")
	}
	t, err := cost.ParseSince(since, s.opts.Clock())
	if err != nil {
		return nil, badRequest("%s", plain(err, nil))
	}
	if _, err := cost.NewCostAccumulator(by); err != nil {
		return nil, badRequest("%s", plain(err, nil))
	}
	rep, err := cost.Costs(ctx, s.rt.Store(), &cost.CostParams{By: by, Since: t})
	if err != nil {
		return nil, errors.Join(errors.New("cost report"), err)
	}
	out := &api.CostReport{By: rep.By, Rows: make([]api.CostRow, 0, len(rep.Rows)), Total: costRow(&rep.Total)}
	if !t.IsZero() {
		out.Since = &t
	}
	for i := range rep.Rows {
		out.Rows = append(out.Rows, costRow(&rep.Rows[i]))
	}
	return out, nil
}

func costRow(r *cost.CostRow) api.CostRow {
	return api.CostRow{Key: r.Key, Runs: r.Runs, Calls: r.Calls, InputTokens: r.Usage.InputTokens, OutputTokens: r.Usage.OutputTokens,
		CachedInputTokens: r.Usage.CachedInputTokens, CacheWriteTokens: r.Usage.CacheWriteTokens, CostUSD: r.Cost,
		ProviderCostUSD: r.ProviderCost, EstimatedCostUSD: r.EstimatedCost, UnpricedCalls: r.UnpricedCalls, OfflineCalls: r.OfflineCalls, Source: r.Source}
}
