package notify

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// RuntimeSource is the [Source] of a journal: the approvals, credential
// waits and input requests of every run that has not ended, and the runs
// that failed since a time, each with the sinks Route names for its run
// (none: no notification). It loads a run again only when its journal
// moved on, so a scan of many waiting runs reads only the index.
//
// A RuntimeSource is safe for concurrent use.
type RuntimeSource struct {
	Runtime *agent.Runtime
	// Route returns the sinks of a run (the schedule's or trigger's that
	// started it, the agent's), from its run.created.
	Route func(ctx context.Context, runID string, c *agent.RunCreated) []string

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	seq   int64
	items []Item
}

// Pending implements [Source].
func (s *RuntimeSource) Pending(ctx context.Context, since time.Time) ([]Item, error) {
	runs, err := s.Runtime.Store().Runs(ctx, &journal.ListParams{Status: []journal.Status{journal.StatusRunning, journal.StatusPaused, journal.StatusFailed}})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.cache == nil {
		s.cache = map[string]cached{}
	}
	s.mu.Unlock()
	var out []Item
	live := map[string]bool{}
	for _, r := range runs {
		if journal.IsSystem(r.RunID) || r.Status == journal.StatusFailed && r.Updated.Before(since) {
			continue
		}
		live[r.RunID] = true
		s.mu.Lock()
		c, ok := s.cache[r.RunID]
		s.mu.Unlock()
		if !ok || c.seq != r.LastSeq {
			items, err := s.items(ctx, r.RunID)
			if err != nil {
				continue // a run that does not load is the audit's business
			}
			c = cached{seq: r.LastSeq, items: items}
			s.mu.Lock()
			s.cache[r.RunID] = c
			s.mu.Unlock()
		}
		out = append(out, c.items...)
	}
	s.mu.Lock()
	for id := range s.cache {
		if !live[id] {
			delete(s.cache, id)
		}
	}
	s.mu.Unlock()
	return out, nil
}

// items returns what run id waits for, or its failure.
func (s *RuntimeSource) items(ctx context.Context, id string) ([]Item, error) {
	st, events, err := s.Runtime.Load(ctx, id)
	if err != nil {
		return nil, err
	}
	var sinks []string
	if s.Route != nil {
		sinks = s.Route(ctx, id, st.Created)
	}
	if len(sinks) == 0 {
		return nil, nil
	}
	base := Item{RunID: id, Agent: st.Created.Principal, OnBehalfOf: st.Created.OnBehalfOf, Origin: Origin(st.Created.Labels), Sinks: sinks}
	var out []Item
	if n := len(events); n > 0 && events[n-1].Type == journal.RunFailed {
		it := base
		it.Kind, it.ItemID, it.Since = KindFailed, "", events[n-1].Time
		var p struct {
			Reason string `json:"reason"`
		}
		if json.Unmarshal(events[n-1].Payload, &p) == nil {
			it.Reason = p.Reason
		}
		// A run failed again after a resume is another failure.
		it.ItemID = "failed@" + itoa(events[n-1].Seq)
		return append(out, it), nil
	}
	for _, a := range st.Pending() {
		it := base
		it.Kind, it.ItemID, it.Tool, it.Since = KindApproval, a.CallID, a.Tool, a.Time
		out = append(out, it)
	}
	for _, a := range st.PendingAuths() {
		it := base
		it.Kind, it.ItemID, it.Tool, it.Since = KindAuth, a.CallID, a.Tool, a.Time
		out = append(out, it)
	}
	for _, in := range st.PendingInputs() {
		it := base
		it.Kind, it.ItemID, it.Since = KindInput, in.ID, in.Time
		out = append(out, it)
	}
	return out, nil
}

// Labels naming what started a run (set by schedules and triggers).
const (
	labelSchedule = "keel.schedule"
	labelTrigger  = "keel.trigger"
)

// Origin names what started a run from its labels: "schedule NAME",
// "trigger NAME", or "".
func Origin(labels map[string]string) string {
	if n := labels[labelSchedule]; n != "" {
		return "schedule " + n
	}
	if n := labels[labelTrigger]; n != "" {
		return "trigger " + n
	}
	return ""
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
