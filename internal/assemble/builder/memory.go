package builder

import (
	"context"
	"fmt"
	"slices"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/memory"
	"github.com/keel-run/keel/service"
	"github.com/keel-run/keel/tool"
)

// MemoryScopes returns the memory scopes a run sees: its agent's, the
// user's it acts for, its project's (the workspace) and the team's; ok
// is false for a run offered no memory (the shared demo agent's).
func MemoryScopes(c *agent.RunCreated) (memory.Scopes, bool) {
	return service.MemoryScopes(c.Principal, c.OnBehalfOf, c.Workspace)
}

// OfferMemory fixes in c the memory offered to the run (c.Recall): the
// entries of its scopes relevant to its task within budget tokens (0:
// memory.DefaultBudget). The run is then offered the memory tools.
func OfferMemory(ctx context.Context, store journal.Store, c *agent.RunCreated, budget int) error {
	sc, ok := MemoryScopes(c)
	if !ok {
		return nil
	}
	r, err := memory.New(store, nil).Recall(ctx, &memory.RecallParams{Scopes: sc, Task: c.Task, Budget: budget, Family: agent.LookupFamily(c.Model)})
	if err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	c.Recall = r
	return nil
}

// AddMemoryTools registers memory_write in r for a run that was offered
// memory (c.Recall), and memory_search when it was offered entries (or
// its run.created lists the tool: a run created before it was left out
// of runs with none), over store (nil: a registry that only records the
// tools' definitions, never runs them).
func AddMemoryTools(r *tool.Registry, c *agent.RunCreated, store journal.Store) {
	if c.Recall == nil {
		return
	}
	var ms *memory.Store
	if store != nil {
		ms = memory.New(store, nil)
	}
	sc, _ := MemoryScopes(c)
	search := len(c.Recall.Entries)+c.Recall.Omitted > 0 ||
		slices.ContainsFunc(c.Tools, func(t agent.ToolInfo) bool { return t.Server == "" && t.Name == memory.SearchTool })
	memory.AddTools(r, &memory.ToolParams{Store: ms, Scopes: sc, NoSearch: !search})
}
