package identity

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
)

// Payloads of the events that change what an agent was given.
type (
	ungrantedPayload struct {
		Name   string `json:"name"`
		Grant  string `json:"grant"`
		By     string `json:"by,omitempty"`
		Reason string `json:"reason,omitempty"`
	}
	restoredPayload struct {
		Name   string `json:"name"`
		By     string `json:"by,omitempty"`
		Reason string `json:"reason,omitempty"`
	}
)

// applyChange folds agent.ungranted and agent.restored. Callers hold d.mu.
func (d *Directory) applyChange(e *journal.Event, bad func(string, ...any) error) error {
	switch e.Type {
	case AgentUngranted:
		var p ungrantedPayload
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return bad("agent.ungranted does not decode: %v", err)
		}
		a := d.lookup(p.Name)
		if a == nil {
			return bad("agent.ungranted for unknown agent %q", p.Name)
		}
		i := slices.IndexFunc(a.Grants, func(g policy.Grant) bool { return g.ID == p.Grant })
		if i < 0 {
			return bad("agent.ungranted of grant %q that agent %q does not have", p.Grant, p.Name)
		}
		a.Grants = slices.Delete(a.Grants, i, i+1)
		d.removed[[2]string{p.Name, p.Grant}] = Removal{At: e.Time, By: p.By}
	case AgentRestored:
		var p restoredPayload
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return bad("agent.restored does not decode: %v", err)
		}
		a := d.lookup(p.Name)
		if a == nil || !a.Builtin && a.Parent == "" || !a.Revoked {
			return bad("agent.restored for %q, which is not a revoked built-in agent or sub-agent", p.Name)
		}
		a.Revoked, a.RevokedAt, a.RevokedBy, a.RevokeReason = false, time.Time{}, "", ""
		for _, g := range a.Grants {
			d.removed[[2]string{p.Name, g.ID}] = Removal{At: e.Time, By: p.By, Restore: true}
		}
		a.Grants = nil
		a.RestoredAt, a.RestoredBy = e.Time, p.By
	}
	return nil
}

// UngrantParams describe the removal of a standing approval.
type UngrantParams struct {
	// By names who removed it; Reason says why.
	By, Reason string
}

// Ungrant removes the standing approval with id grantID from agent name
// (see [Agent].Grants for the ids): from its next gate decision on, the
// agent's calls that the grant allowed ask again. The removal is an
// agent.ungranted event. It returns an error wrapping [ErrUnknown] for an
// unknown agent or grant.
func (d *Directory) Ungrant(ctx context.Context, name, grantID string, p *UngrantParams) error {
	if p == nil {
		p = &UngrantParams{}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.append(ctx, AgentUngranted, &ungrantedPayload{Name: name, Grant: grantID, By: p.By, Reason: p.Reason}, func() error {
		a := d.lookup(name)
		if a == nil {
			return fmt.Errorf("identity: ungrant: %q: %w", name, ErrUnknown)
		}
		if !slices.ContainsFunc(a.Grants, func(g policy.Grant) bool { return g.ID == grantID }) {
			return fmt.Errorf("identity: ungrant: agent %q has no standing approval %q: %w", name, grantID, ErrUnknown)
		}
		return nil
	})
}

// Removal says when and by whom a standing approval was removed.
type Removal struct {
	At time.Time
	By string
	// Restore says the restoration of its agent cleared it.
	Restore bool
}

// Removed says whether agent name's standing approval grantID was
// removed, and when and by whom: an id that [Directory.Ungrant] refuses
// either never existed (ok false) or was removed already.
func (d *Directory) Removed(ctx context.Context, name, grantID string) (Removal, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.sync(ctx); err != nil {
		return Removal{}, false, err
	}
	r, ok := d.removed[[2]string{name, grantID}]
	return r, ok, nil
}

// RestoreParams describe the restoration of a built-in agent.
type RestoreParams struct {
	// By names who restored it; Reason says why.
	By, Reason string
}

// ErrNotRestorable is wrapped by [Directory.Restore]'s error for an agent
// that is not a revoked built-in agent or sub-agent.
var ErrNotRestorable = fmt.Errorf("%w: only a revoked built-in agent or sub-agent can be restored", ErrInvalid)

// Restore undoes the revocation of a built-in agent ([LocalAgent],
// [DemoAgent]) or of a sub-agent ([Agent].Parent), which cannot be
// created again under its name: it may act
// again from its next gate decision, without the standing approvals it had
// before (they are dropped). The restoration is an agent.restored event.
// An agent that was created is never restored: its revocation is
// permanent, and a new agent takes its place. It returns the agent, or an
// error wrapping [ErrUnknown] or [ErrNotRestorable].
func (d *Directory) Restore(ctx context.Context, name string, p *RestoreParams) (*Agent, error) {
	if p == nil {
		p = &RestoreParams{}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	err := d.append(ctx, AgentRestored, &restoredPayload{Name: name, By: p.By, Reason: p.Reason}, func() error {
		a := d.lookup(name)
		switch {
		case a == nil:
			return fmt.Errorf("identity: restore %q: %w", name, ErrUnknown)
		case !a.Builtin && a.Parent == "":
			return fmt.Errorf("identity: restore %q: %w (create a new agent instead)", name, ErrNotRestorable)
		case !a.Revoked:
			return fmt.Errorf("identity: restore %q: it is not revoked: %w", name, ErrNotRestorable)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d.copy(d.agents[name]), nil
}
