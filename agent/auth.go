package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/tool"
)

// AuthRequired is the payload of journal.AuthRequired: the call waits,
// unstarted, until a person authorizes the credential it needs (the
// tool's Authorize returned a [tool.AuthRequiredError]). Like an
// approval, the wait is durable: it survives restarts and may last days.
// It names no secret.
type AuthRequired struct {
	CallID string `json:"call_id"`
	Tool   string `json:"tool"`
	tool.AuthRequiredError
}

// AuthResolved is the payload of journal.AuthResolved: the wait of a call
// ended. The call runs again (and may wait again if the grant still does
// not suffice), unless Declined, when it gets an error result instead.
type AuthResolved struct {
	CallID string `json:"call_id"`
	// Grant is the grant the person's authorization created.
	Grant string `json:"grant,omitempty"`
	// By names who authorized or declined.
	By       string `json:"by,omitempty"`
	Declined bool   `json:"declined,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// ErrNoAuthWait is returned by [Runtime.ResolveAuth] when the call does
// not wait for an authorization.
var ErrNoAuthWait = errors.New("agent: no authorization wait for this call")

// authWaiting reports whether c waits for an authorization.
func (c *Call) authWaiting() bool {
	return c.Auth != nil && c.AuthResolved == nil && c.Finished == nil
}

// authDeclined reports whether the person declined c's authorization.
func (c *Call) authDeclined() bool {
	return c.Auth != nil && c.AuthResolved != nil && c.AuthResolved.Declined
}

// applyAuth folds auth.required and auth.resolved.
func (s *State) applyAuth(e *journal.Event, v any, bad func(string, ...any) error) error {
	switch p := v.(type) {
	case *AuthRequired:
		c := s.call(p.CallID)
		if c == nil || c.Decision == nil || c.Started != nil && c.Finished == nil {
			return bad("auth.required for call %q, which is not decided or is running", p.CallID)
		}
		c.Auth, c.AuthResolved = p, nil
		c.authSeq, c.authTime = e.Seq, e.Time
		s.Status = journal.StatusPaused
	case *AuthResolved:
		c := s.call(p.CallID)
		if c == nil || c.Auth == nil || c.AuthResolved != nil {
			return bad("auth.resolved for call %q with no authorization wait", p.CallID)
		}
		c.AuthResolved = p
	}
	return nil
}

// PendingAuth is an authorization a run waits for.
type PendingAuth struct {
	RunID string `json:"run_id"`
	AuthRequired
	// Seq and Time are those of the auth.required event.
	Seq  int64     `json:"seq"`
	Time time.Time `json:"time"`
	// Task is the run's task, for context.
	Task string `json:"task,omitempty"`
}

// PendingAuths returns the authorizations s waits for, in call order.
func (s *State) PendingAuths() []PendingAuth {
	t := s.LastTurn()
	if t == nil {
		return nil
	}
	var out []PendingAuth
	for _, c := range t.Calls {
		if c.authWaiting() {
			out = append(out, PendingAuth{RunID: s.RunID, AuthRequired: *c.Auth, Seq: c.authSeq, Time: c.authTime, Task: s.Created.Task})
		}
	}
	return out
}

// AuthWaits returns the authorizations every run that has not ended
// waits for, oldest first (runs that fail to load are skipped).
func (rt *Runtime) AuthWaits(ctx context.Context) ([]PendingAuth, error) {
	return openWaits(ctx, rt, "authorization waits", (*State).PendingAuths, func(a PendingAuth) time.Time { return a.Time })
}

// openWaits collects pending(state) of every run that has not ended,
// oldest first by at (runs that fail to load are skipped); what names
// the waits in an error.
func openWaits[T any](ctx context.Context, rt *Runtime, what string, pending func(*State) []T, at func(T) time.Time) ([]T, error) {
	runs, err := rt.store.Runs(ctx, &journal.ListParams{Status: []journal.Status{journal.StatusRunning, journal.StatusPaused}})
	if err != nil {
		return nil, fmt.Errorf("agent: list %s: %w", what, err)
	}
	var out []T
	for _, r := range runs {
		if journal.IsSystem(r.RunID) {
			continue
		}
		st, _, err := rt.Load(ctx, r.RunID)
		if err != nil {
			continue
		}
		out = append(out, pending(st)...)
	}
	slices.SortStableFunc(out, func(a, b T) int { return at(a).Compare(at(b)) })
	return out, nil
}

// ResolveAuth ends the authorization wait of a call with an
// auth.resolved event (d.CallID is set to callID). Like [Runtime.Resolve],
// it does not execute the run: its next execution runs the call (whose
// Authorize is asked again), and an execution that waits picks the event
// up from the journal. It returns [ErrNoAuthWait] if the call does not
// wait, and retries once if the journal moved on meanwhile.
func (rt *Runtime) ResolveAuth(ctx context.Context, runID, callID string, d *AuthResolved) error {
	for attempt := 0; ; attempt++ {
		st, _, err := rt.Load(ctx, runID)
		if err != nil {
			return fmt.Errorf("agent: resolve authorization: %w", err)
		}
		c := st.call(callID)
		if c == nil || !c.authWaiting() {
			return fmt.Errorf("agent: run %s call %s: %w", runID, callID, ErrNoAuthWait)
		}
		p := *d
		p.CallID = callID
		_, err = rt.store.Append(ctx, runID, st.LastSeq, journal.Draft{Type: journal.AuthResolved, Time: rt.clock(), Payload: marshal(&p)})
		if errors.Is(err, journal.ErrConflict) && attempt == 0 {
			continue
		}
		if err != nil {
			return fmt.Errorf("agent: resolve authorization: %w", err)
		}
		d.CallID = callID
		return nil
	}
}

// authorize asks the call's tool for what it needs before it starts. It
// returns the wait to journal, or nil when the call may run.
func (x *executor) authorize(ctx context.Context, c *Call, req *tool.Request) *AuthRequired {
	t := x.p.Tools.Tool(c.Name)
	if t == nil || t.Authorize == nil {
		return nil
	}
	if ar := tool.AuthRequired(t.Authorize(ctx, req)); ar != nil {
		return &AuthRequired{CallID: c.ID, Tool: c.Name, AuthRequiredError: *ar}
	}
	return nil
}

// ResolveAuthsFor ends the wait of every call of every run that waits
// for a grant of provider for agent acting for user (keel auth connect,
// or the server's authorization callback, stored one): each gets d (its
// CallID set per call). It returns the waits it ended; one that ended
// meanwhile is skipped.
func (rt *Runtime) ResolveAuthsFor(ctx context.Context, provider, agentName, user string, d *AuthResolved) ([]PendingAuth, error) {
	waits, err := rt.AuthWaits(ctx)
	if err != nil {
		return nil, err
	}
	var out []PendingAuth
	for _, w := range waits {
		if w.Provider != provider || w.Agent != agentName || w.User != user {
			continue
		}
		p := *d
		err := rt.ResolveAuth(ctx, w.RunID, w.CallID, &p)
		if errors.Is(err, ErrNoAuthWait) {
			continue
		}
		if err != nil {
			return out, err
		}
		out = append(out, w)
	}
	return out, nil
}
