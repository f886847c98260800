package memory

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// Use counts how runs treated one entry: the runs it was offered to
// (whole or as an index line) and the runs whose model used it.
type Use struct {
	Offered []string `json:"offered,omitempty"`
	Used    []string `json:"used,omitempty"`
}

// Usage reads the runs of store and returns, per entry id, the runs it
// was offered to (run.created's recall) and those that used it
// (model.responded's memory_used), oldest run first. It reads every
// run's journal: a report for people, not a hot path.
func Usage(ctx context.Context, store journal.Store) (map[string]*Use, error) {
	runs, err := store.Runs(ctx, nil)
	if err != nil {
		return nil, err
	}
	out := map[string]*Use{}
	get := func(id string) *Use {
		if out[id] == nil {
			out[id] = &Use{}
		}
		return out[id]
	}
	for i := len(runs) - 1; i >= 0; i-- {
		run := runs[i].RunID
		if journal.IsSystem(run) {
			continue
		}
		evs, err := store.Read(ctx, run, 1)
		if errors.Is(err, journal.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		used := map[string]bool{}
		for _, e := range evs {
			switch e.Type {
			case journal.RunCreated:
				var c struct {
					Recall *agent.Recall `json:"recall"`
				}
				if json.Unmarshal(e.Payload, &c) != nil || c.Recall == nil {
					break
				}
				for _, m := range c.Recall.Entries {
					u := get(m.ID)
					u.Offered = append(u.Offered, run)
				}
			case journal.ModelResponded:
				var r struct {
					Used []agent.MemoryUse `json:"memory_used"`
				}
				if json.Unmarshal(e.Payload, &r) != nil {
					break
				}
				for _, m := range r.Used {
					if !used[m.ID] {
						used[m.ID] = true
						u := get(m.ID)
						u.Used = append(u.Used, run)
					}
				}
			}
		}
	}
	return out, nil
}
