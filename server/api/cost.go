package api

import "time"

// CostRow is the model cost of one group of runs (GET /v1/cost): the sum
// of the costs journaled with each model call. Source says where the
// token counts come from: "provider" (reported by the provider),
// "estimate" (Keel's estimate: the provider reported none), "mixed",
// "unpriced" (no price known for the model; the cost is 0), or "offline"
// (every call answered by a recording or the scripted model: nothing was
// spent). OfflineCalls counts such calls; their cost is not counted.
type CostRow struct {
	Key               string  `json:"key"`
	Runs              int     `json:"runs"`
	Calls             int     `json:"calls"`
	InputTokens       int64   `json:"input_tokens"`
	OutputTokens      int64   `json:"output_tokens"`
	CachedInputTokens int64   `json:"cached_input_tokens"`
	CacheWriteTokens  int64   `json:"cache_write_tokens"`
	CostUSD           float64 `json:"cost_usd"`
	ProviderCostUSD   float64 `json:"provider_cost_usd"`
	EstimatedCostUSD  float64 `json:"estimated_cost_usd"`
	UnpricedCalls     int     `json:"unpriced_calls"`
	OfflineCalls      int     `json:"offline_calls,omitempty"`
	Source            string  `json:"source"`
}

// CostReport is the body of GET /v1/cost: rows grouped by By (agent,
// user, model, label or run), most expensive first, and their total.
type CostReport struct {
	By    string     `json:"by"`
	Since *time.Time `json:"since,omitempty"`
	Rows  []CostRow  `json:"rows"`
	Total CostRow    `json:"total"`
}
