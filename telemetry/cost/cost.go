// Package cost sums the cost of a journal's model calls by run, agent,
// user, model or label: what `keel cost` and the cost page show. It
// reads the journal only; it exports nothing (see package telemetry).
package cost

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
)

// Groupings of a cost report ([CostReport.By]).
var CostGroups = []string{"run", "agent", "user", "model", "label"}

// CostRow is the cost of one group of model calls. Cost is what the
// journal recorded for each call when it was made (the provider's usage
// at Keel's price table of that time, the same figure the run's
// --max-cost limit counted); ProviderCost and EstimatedCost split it by
// where the token counts came from, and UnpricedCalls counts calls whose
// model had no price (their cost is 0, their tokens are counted).
type CostRow struct {
	Key           string      `json:"key"`
	Runs          int         `json:"runs"`
	Calls         int         `json:"calls"`
	Usage         model.Usage `json:"usage"`
	Cost          float64     `json:"cost_usd"`
	ProviderCost  float64     `json:"provider_cost_usd"`
	EstimatedCost float64     `json:"estimated_cost_usd"`
	UnpricedCalls int         `json:"unpriced_calls,omitempty"`
	// OfflineCalls counts calls answered by a recording (a replay) or
	// the scripted demo model: no provider was called, nothing was
	// spent. Their tokens are counted, their cost is not (a recording's
	// journaled cost is what the recorded run spent).
	OfflineCalls int `json:"offline_calls,omitempty"`
	// Source says where the figure comes from: "provider" (usage the
	// provider reported), "estimate" (Keel's token estimate: the provider
	// reported none), "mixed", "unpriced" (no price known), or "offline"
	// (every call a replay's or the scripted model's).
	Source string `json:"source"`
}

// CostReport is a cost breakdown.
type CostReport struct {
	By    string    `json:"by"`
	Since time.Time `json:"since,omitzero"`
	Rows  []CostRow `json:"rows"`
	Total CostRow   `json:"total"`
}

// CostParams select and group runs for [Costs].
type CostParams struct {
	// By is one of [CostGroups]; "" means "agent".
	By string
	// Since keeps runs created at or after it (zero: all runs).
	Since time.Time
}

// CostAccumulator sums the cost of runs fed to it with [CostAccumulator.Add].
type CostAccumulator struct {
	by    string
	rows  map[string]*CostRow
	runs  map[string]map[string]bool // key → run ids
	total CostRow
	seen  map[string]bool
}

// NewCostAccumulator returns an accumulator grouping by by (one of
// [CostGroups]; "" means "agent").
func NewCostAccumulator(by string) (*CostAccumulator, error) {
	if by == "" {
		by = "agent"
	}
	ok := false
	for _, g := range CostGroups {
		ok = ok || g == by
	}
	if !ok {
		return nil, fmt.Errorf("telemetry: cost by %q: want one of %v", by, CostGroups)
	}
	return &CostAccumulator{by: by, rows: map[string]*CostRow{}, runs: map[string]map[string]bool{}, seen: map[string]bool{}}, nil
}

// Add folds the events of one run.
func (a *CostAccumulator) Add(runID string, events []journal.Event) error {
	var c *agent.RunCreated
	var spec model.Spec
	for i := range events {
		e := &events[i]
		p, err := agent.Decode(e)
		if err != nil {
			return err
		}
		switch p := p.(type) {
		case *agent.RunCreated:
			c = p
			spec, _ = model.ParseSpec(p.Model)
		case *agent.RunResumed:
			if p.Model != "" {
				if s, err := model.ParseSpec(p.Model); err == nil {
					spec = s
				}
			}
		case *agent.ModelResponded:
			a.call(runID, c, ModelLabel(spec, p.Model), p.Usage, p.Cost, p.UsageEstimated, Offline(spec, c))
		case *agent.ContextCompacted:
			if p.Usage.Total() > 0 || p.Cost > 0 {
				a.call(runID, c, ModelLabel(spec, p.Model), p.Usage, p.Cost, false, Offline(spec, c))
			}
		}
	}
	return nil
}

// Offline reports whether the calls of a run with model spec (created
// by c) call no provider: a replay of a recording (not recorded-then-
// live, whose later calls are a live model's) or the scripted model.
// Their cost is no spend, whatever the recording says: every report of
// spend (keel cost, /v1/cost, the metrics) decides by this.
func Offline(spec model.Spec, c *agent.RunCreated) bool {
	return spec.Provider == "scripted" || spec.Provider == "replay" && (c == nil || c.Live == "")
}

func (a *CostAccumulator) keys(c *agent.RunCreated, runID, modelName string) []string {
	switch a.by {
	case "run":
		return []string{runID}
	case "agent":
		if c != nil && c.Principal != "" {
			return []string{c.Principal}
		}
		return []string{"(none)"}
	case "user":
		if c != nil && c.OnBehalfOf != "" {
			return []string{c.OnBehalfOf}
		}
		return []string{"(none)"}
	case "model":
		return []string{modelName}
	case "label":
		if c == nil || len(c.Labels) == 0 {
			return []string{"(none)"}
		}
		var out []string
		for k, v := range c.Labels {
			out = append(out, k+"="+v)
		}
		sort.Strings(out)
		return out
	}
	return nil
}

func (a *CostAccumulator) call(runID string, c *agent.RunCreated, modelName string, u model.Usage, cost float64, estimated, off bool) {
	unpriced := cost == 0 && u.Total() > 0 && !off
	if off {
		cost = 0
	}
	add := func(r *CostRow) {
		r.Calls++
		r.Usage = r.Usage.Add(u)
		r.Cost += cost
		if off {
			r.OfflineCalls++
		}
		if estimated {
			r.EstimatedCost += cost
		} else {
			r.ProviderCost += cost
		}
		if unpriced {
			r.UnpricedCalls++
		}
	}
	for _, k := range a.keys(c, runID, modelName) {
		r := a.rows[k]
		if r == nil {
			r = &CostRow{Key: k}
			a.rows[k] = r
			a.runs[k] = map[string]bool{}
		}
		add(r)
		a.runs[k][runID] = true
	}
	add(&a.total)
	a.seen[runID] = true
}

// Report returns the rows, most expensive first, and the total (labels:
// a run with several labels counts in each of their rows, once in the
// total).
func (a *CostAccumulator) Report(since time.Time) *CostReport {
	rep := &CostReport{By: a.by, Since: since, Rows: []CostRow{}}
	for k, r := range a.rows {
		r.Runs = len(a.runs[k])
		r.Source = source(r)
		rep.Rows = append(rep.Rows, *r)
	}
	sort.Slice(rep.Rows, func(i, j int) bool {
		if rep.Rows[i].Cost != rep.Rows[j].Cost {
			return rep.Rows[i].Cost > rep.Rows[j].Cost
		}
		return rep.Rows[i].Key < rep.Rows[j].Key
	})
	rep.Total = a.total
	rep.Total.Key = "total"
	rep.Total.Runs = len(a.seen)
	rep.Total.Source = source(&rep.Total)
	return rep
}

func source(r *CostRow) string {
	switch {
	case r.OfflineCalls == r.Calls && r.Calls > 0:
		return SourceOffline
	case r.UnpricedCalls == r.Calls && r.Calls > 0:
		return "unpriced"
	case r.EstimatedCost > 0 && r.ProviderCost > 0, r.UnpricedCalls > 0:
		return SourceMixed
	case r.EstimatedCost > 0:
		return SourceEstimate
	}
	return SourceProvider
}

// Costs reads the runs of store that p selects and returns their cost
// grouped by p.By. System streams (ids starting "_keel.") are skipped.
func Costs(ctx context.Context, store journal.Store, p *CostParams) (*CostReport, error) {
	if p == nil {
		p = &CostParams{}
	}
	acc, err := NewCostAccumulator(p.By)
	if err != nil {
		return nil, err
	}
	runs, err := store.Runs(ctx, nil)
	if err != nil {
		return nil, err
	}
	for _, r := range runs {
		if strings.HasPrefix(r.RunID, "_keel.") || (!p.Since.IsZero() && r.Created.Before(p.Since)) {
			continue
		}
		evs, err := store.Read(ctx, r.RunID, 1)
		if err != nil {
			return nil, err
		}
		if err := acc.Add(r.RunID, evs); err != nil {
			return nil, err
		}
	}
	return acc.Report(p.Since), nil
}

// ParseSince parses a --since value: a duration with a d (days) or w
// (weeks) unit or any Go duration ("7d", "36h", "2w"), or an RFC 3339
// time or date. It returns the time relative to now.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	mult := time.Duration(0)
	switch {
	case strings.HasSuffix(s, "d"):
		mult = 24 * time.Hour
	case strings.HasSuffix(s, "w"):
		mult = 7 * 24 * time.Hour
	}
	if mult > 0 {
		n, err := strconv.ParseFloat(s[:len(s)-1], 64)
		if err == nil && n >= 0 && n < 1e5 {
			return now.Add(-time.Duration(n * float64(mult))), nil
		}
	} else if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("telemetry: since %q: want a duration such as 7d, 36h or 2w, or a date such as 2026-01-31", s)
}

// Cost sources: where a cost figure's token counts come from.
const (
	// SourceProvider: the provider reported the call's usage; the cost is
	// that usage at Keel's price table.
	SourceProvider = "provider"
	// SourceEstimate: the provider reported no usage; Keel estimated it.
	SourceEstimate = "estimate"
	// SourceMixed: a sum of both kinds.
	SourceMixed = "mixed"
	// SourceOffline: every call was a replay's or the scripted model's:
	// nothing was spent.
	SourceOffline = "offline"
)

// ModelLabel names a model in reports and metrics: the provider-reported
// model if any, else the requested one.
func ModelLabel(spec model.Spec, respModel string) string {
	if respModel != "" {
		return respModel
	}
	if spec.Provider == "replay" {
		return "replay"
	}
	return spec.Name
}
