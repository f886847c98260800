package model

import "strings"

// Price is what a model charges, in US dollars per million tokens.
type Price struct {
	Input       float64 `json:"input" toml:"input"`
	Output      float64 `json:"output" toml:"output"`
	CachedInput float64 `json:"cached_input" toml:"cached_input"`
	CacheWrite  float64 `json:"cache_write" toml:"cache_write"`
}

// Cost returns the dollar cost of u at price p. Cached input tokens are
// charged at CachedInput, cache writes at CacheWrite and the rest of the
// input at Input.
func (p Price) Cost(u Usage) float64 {
	fresh := u.InputTokens - u.CachedInputTokens - u.CacheWriteTokens
	if fresh < 0 {
		fresh = 0
	}
	return (float64(fresh)*p.Input +
		float64(u.CachedInputTokens)*p.CachedInput +
		float64(u.CacheWriteTokens)*p.CacheWrite +
		float64(u.OutputTokens)*p.Output) / 1e6
}

// PriceTable maps a model name (as in [Spec.Name]) to its [Price]. Lookup
// is by exact name, then by the longest key that prefixes the name, so
// "gpt-4o" prices "gpt-4o-2024-08-06".
type PriceTable map[string]Price

// Lookup returns the price of model name and whether one was found.
func (t PriceTable) Lookup(name string) (Price, bool) {
	if p, ok := t[name]; ok {
		return p, true
	}
	best := ""
	for k := range t {
		if strings.HasPrefix(name, k) && len(k) > len(best) {
			best = k
		}
	}
	if best == "" {
		return Price{}, false
	}
	return t[best], true
}

// DefaultPrices is the built-in price table, from the providers' public
// price pages (USD per million tokens). Users override or extend it in
// config ([prices."MODEL"] in ~/.keel/config.toml). A model that is not
// listed costs 0 and `keel run` says its cost is unknown.
func DefaultPrices() PriceTable {
	return PriceTable{
		// https://api-docs.deepseek.com/quick_start/pricing (DeepSeek-V3.2;
		// these reproduce the recorded costs of testdata/trajectories).
		"deepseek-chat":     {Input: 0.28, Output: 0.42, CachedInput: 0.028},
		"deepseek-reasoner": {Input: 0.28, Output: 0.42, CachedInput: 0.028},
		// https://openai.com/api/pricing
		"gpt-4o":       {Input: 2.50, Output: 10.00, CachedInput: 1.25},
		"gpt-4o-mini":  {Input: 0.15, Output: 0.60, CachedInput: 0.075},
		"gpt-4.1":      {Input: 2.00, Output: 8.00, CachedInput: 0.50},
		"gpt-4.1-mini": {Input: 0.40, Output: 1.60, CachedInput: 0.10},
		"gpt-5":        {Input: 1.25, Output: 10.00, CachedInput: 0.125},
		"gpt-5-mini":   {Input: 0.25, Output: 2.00, CachedInput: 0.025},
		// https://www.anthropic.com/pricing#api
		"claude-sonnet-4":  {Input: 3.00, Output: 15.00, CachedInput: 0.30, CacheWrite: 3.75},
		"claude-opus-4":    {Input: 15.00, Output: 75.00, CachedInput: 1.50, CacheWrite: 18.75},
		"claude-haiku-4":   {Input: 1.00, Output: 5.00, CachedInput: 0.10, CacheWrite: 1.25},
		"claude-3-5-haiku": {Input: 0.80, Output: 4.00, CachedInput: 0.08, CacheWrite: 1.00},
	}
}
