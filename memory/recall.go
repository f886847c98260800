package memory

import (
	"context"
	"strings"

	"github.com/keel-run/keel/agent"
)

// DefaultBudget is the default most tokens the memory section adds to
// every request of a run.
const DefaultBudget = 1500

// maxMatches bounds the entries the task's search brings whole.
const maxMatches = 12

// indexLine bounds an index line of the section, in characters.
const indexLine = 100

// RecallParams is what [Store.Recall] offers a run.
type RecallParams struct {
	// Scopes are the run's scopes.
	Scopes Scopes
	// Task is what the entries relevant to the run are searched with.
	Task string
	// Budget bounds the section's estimated tokens; 0 means
	// [DefaultBudget].
	Budget int
	// Family estimates tokens; the zero value is the generic family.
	Family agent.Family
}

// Recall chooses the memory offered to a new run: the whole text of the
// current entries the task's full-text search finds (best first), then
// an index line for each other current entry (newest first), as many of
// both as the budget holds.
func (m *Store) Recall(ctx context.Context, p *RecallParams) (*agent.Recall, error) {
	budget := p.Budget
	if budget <= 0 {
		budget = DefaultBudget
	}
	f := p.Family
	if f.Name == "" {
		f = agent.LookupFamily("")
	}
	scopes := p.Scopes.List()
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.sync(ctx); err != nil {
		return nil, err
	}
	var visible []*Entry
	for i := len(m.order) - 1; i >= 0; i-- { // newest first
		e := m.entries[m.order[i]]
		if e.Current() && p.Scopes.Sees(e.Scope) {
			visible = append(visible, e)
		}
	}
	r := &agent.Recall{BudgetTokens: budget}
	for _, s := range scopes {
		r.Scopes = append(r.Scopes, string(s))
	}
	if len(visible) == 0 {
		return r, nil
	}
	matches, err := m.searchLocked(ctx, scopes, p.Task, maxMatches)
	if err != nil {
		return nil, err
	}
	// The section's fixed part: its header and instructions.
	// (with both headings and the note on what was left out).
	used := f.TextTokens((&agent.Recall{Scopes: r.Scopes, Entries: []agent.RecalledMemory{{Full: true}, {}}, Omitted: len(visible)}).Section())
	offered := map[string]bool{}
	add := func(e *Entry, full bool) bool {
		rm := agent.RecalledMemory{ID: e.ID, Scope: string(e.Scope), Labels: e.Labels, Run: e.Source.Run, Full: full, Match: full}
		if full {
			rm.Text = e.Text
		} else {
			rm.Text = firstLine(e.Text)
		}
		cost := f.TextTokens(rm.Render())
		if used+cost > budget {
			return false
		}
		used += cost
		r.Entries = append(r.Entries, rm)
		offered[e.ID] = true
		return true
	}
	for i := range matches {
		add(&matches[i], true)
	}
	for _, e := range visible {
		if !offered[e.ID] && !add(e, false) {
			break
		}
	}
	r.Omitted = len(visible) - len(offered)
	r.Tokens = f.TextTokens(r.Section())
	for r.Tokens > budget && len(r.Entries) > 1 {
		// The per-entry estimates are a sum; the whole may differ a
		// little: the budget is a bound.
		r.Entries = r.Entries[:len(r.Entries)-1]
		r.Omitted++
		r.Tokens = f.TextTokens(r.Section())
	}
	return r, nil
}

// firstLine returns the first line of s, cut to indexLine characters.
func firstLine(s string) string {
	l, _, more := strings.Cut(strings.TrimSpace(s), "\n")
	if rs := []rune(l); len(rs) > indexLine {
		return string(rs[:indexLine-1]) + "…"
	} else if more {
		return l + " …"
	}
	return l
}
