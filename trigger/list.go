package trigger

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/keel-run/keel/journal"
)

// Status is a trigger as listed.
type Status struct {
	Trigger
	Paused  bool `json:"paused,omitempty"`
	Deleted bool `json:"deleted,omitempty"`
	// Counts are the deliveries by outcome (accepted, failed, duplicate)
	// and by refusal reason.
	Counts map[string]int `json:"counts"`
}

// Get returns the trigger named or identified by ref.
func (h *Hub) Get(ctx context.Context, ref string) (*Status, error) {
	t, err := h.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	st := &Status{Trigger: *t.def, Paused: t.paused, Deleted: t.deleted, Counts: map[string]int{}}
	for k, v := range t.counts {
		st.Counts[k] = v
	}
	return st, nil
}

// List returns every trigger not deleted, oldest first.
func (h *Hub) List(ctx context.Context) ([]*Status, error) {
	ids, err := h.dir.IDs(ctx)
	if err != nil {
		return nil, err
	}
	var out []*Status
	for _, id := range ids {
		st, err := h.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// Deliveries reads a trigger's deliveries from the journal, oldest
// first; last > 0 keeps the newest last.
func (h *Hub) Deliveries(ctx context.Context, ref string, last int) ([]*Delivery, error) {
	t, err := h.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	events, err := journal.ReadVerified(ctx, h.store, t.s.ID())
	if err != nil {
		return nil, err
	}
	var out []*Delivery
	accepted := map[string]*Delivery{}
	for i := range events {
		switch events[i].Type {
		case Received:
			d := new(Delivery)
			if err := json.Unmarshal(events[i].Payload, d); err != nil {
				return nil, fmt.Errorf("trigger: event %d: %w", events[i].Seq, err)
			}
			out = append(out, d)
			if d.Outcome == Accepted {
				accepted[d.MessageID] = d
			}
		case RunFailed:
			var p runFailed
			if json.Unmarshal(events[i].Payload, &p) == nil && accepted[p.MessageID] != nil {
				accepted[p.MessageID].RunError = p.Reason
				accepted[p.MessageID].Outcome = Failed
			}
		}
	}
	if last > 0 && len(out) > last {
		out = out[len(out)-last:]
	}
	return out, nil
}

// Pause refuses the trigger's deliveries (journaled, reason paused)
// until [Hub.Resume].
func (h *Hub) Pause(ctx context.Context, ref, by, reason string) error {
	return h.change(ctx, ref, Paused, &changed{By: by, Why: reason}, func(t *trig) error {
		if t.paused {
			return fmt.Errorf("%w: trigger %s is paused already (since %s)", ErrState, t.def.Name, t.pauses[len(t.pauses)-1].from.UTC().Format(time.RFC3339))
		}
		return nil
	})
}

// Resume accepts the trigger's deliveries again.
func (h *Hub) Resume(ctx context.Context, ref, by string) error {
	return h.change(ctx, ref, Resumed, &changed{By: by}, func(t *trig) error {
		if !t.paused {
			return fmt.Errorf("%w: trigger %s is not paused", ErrState, t.def.Name)
		}
		return nil
	})
}

// Delete ends a trigger: its URL answers 404 from then on. Its records
// stay in the journal.
func (h *Hub) Delete(ctx context.Context, ref, by string) error {
	t, err := h.get(ctx, ref)
	if err != nil {
		return err
	}
	if err := h.change(ctx, ref, Deleted, &changed{By: by}, nil); err != nil {
		return err
	}
	t.mu.Lock()
	id := t.def.ID
	t.mu.Unlock()
	return h.dir.Remove(ctx, id, by)
}

func (h *Hub) change(ctx context.Context, ref string, typ journal.Type, v any, check func(t *trig) error) error {
	t, err := h.get(ctx, ref)
	if err != nil {
		return err
	}
	_, err = t.s.Append(ctx, typ, v, func() error {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.deleted {
			return fmt.Errorf("%w: %s was deleted", ErrNotFound, t.def.Name)
		}
		if check != nil {
			return check(t)
		}
		return nil
	})
	return err
}
