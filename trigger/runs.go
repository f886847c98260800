package trigger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/schedule"
)

// Events a run trigger watches.
const (
	EventCompleted = "completed" // a run of the agent completed
	EventFailed    = "failed"    // a run of the agent failed
	EventOutput    = "output"    // a run of the agent completed with an output
)

// On makes a trigger a run trigger: a run of Agent ending with one of
// Events starts the trigger's run, with the ended run's output (for
// "output") as untrusted input.
type On struct {
	Agent  string   `json:"agent"`
	Events []string `json:"events"`
}

// MaxChain bounds a chain of run triggers (A's end starts B, whose end
// starts C...): a run started at this depth starts nothing more.
const MaxChain = 5

// LabelDepth is a run's depth in a chain of run triggers.
const LabelDepth = "keel.trigger_depth"

// checkOn validates a run trigger's On.
func checkOn(d *Trigger) error {
	o := d.On
	if o.Agent == "" || len(o.Events) == 0 {
		return fmt.Errorf("%w: a run trigger names an agent and events (%s, %s, %s)", ErrInvalid, EventCompleted, EventFailed, EventOutput)
	}
	for _, e := range o.Events {
		if e != EventCompleted && e != EventFailed && e != EventOutput {
			return fmt.Errorf("%w: unknown run event %q (want %s, %s or %s)", ErrInvalid, e, EventCompleted, EventFailed, EventOutput)
		}
	}
	if o.Agent == d.Agent {
		return fmt.Errorf("%w: a run trigger of agent %s cannot start %s's own runs (a loop)", ErrInvalid, o.Agent, o.Agent)
	}
	return nil
}

// span is a time interval; a zero to is open.
type span struct{ from, to time.Time }

// Watch fires the run triggers for the runs that ended since since
// (Hub.Tick calls it with a horizon): each (trigger, ended run) is
// journaled once, keyed by the run and its end, with its cause, and
// starts one run whose id derives from that key. A trigger fires only
// for runs that ended after it was created and not while it was paused
// (both journaled), so what fires does not depend on when a server
// started or looked.
func (h *Hub) Watch(ctx context.Context, since time.Time) error {
	// A run that ends after this can meet a trigger created after the
	// listing below: it is looked at again on the next Watch.
	listed := h.clock()
	ids, err := h.dir.IDs(ctx)
	if err != nil {
		return err
	}
	var trigs []*trig
	for _, id := range ids {
		t, err := h.get(ctx, id)
		if err != nil {
			return err
		}
		t.mu.Lock()
		on := t.def.On != nil && !t.deleted
		t.mu.Unlock()
		if on {
			trigs = append(trigs, t)
		}
	}
	if len(trigs) == 0 {
		return nil
	}
	runs, err := h.store.Runs(ctx, &journal.ListParams{Status: []journal.Status{journal.StatusCompleted, journal.StatusFailed}})
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range runs {
		if journal.IsSystem(r.RunID) || r.Updated.Before(since) {
			continue
		}
		key := r.RunID + "@" + strconv.FormatInt(r.LastSeq, 10)
		h.mu.Lock()
		done := h.watched[key]
		h.mu.Unlock()
		if done {
			continue
		}
		if err := h.watchRun(ctx, trigs, r, key); err != nil {
			errs = append(errs, err)
			continue
		}
		if r.Updated.Before(listed) {
			h.mu.Lock()
			h.watched[key] = true
			h.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

// watchRun fires the triggers that an ended run matches.
func (h *Hub) watchRun(ctx context.Context, trigs []*trig, r journal.RunSummary, key string) error {
	first, err := h.store.Read(ctx, r.RunID, 1)
	if err != nil || len(first) == 0 || first[0].Type != journal.RunCreated {
		return nil // not a run
	}
	var created agent.RunCreated
	if err := json.Unmarshal(first[0].Payload, &created); err != nil {
		return nil
	}
	depth, _ := strconv.Atoi(created.Labels[LabelDepth])
	if depth >= MaxChain {
		return nil
	}
	last, err := h.store.Read(ctx, r.RunID, r.LastSeq)
	if err != nil || len(last) == 0 {
		return err
	}
	var ended agent.RunEnded
	json.Unmarshal(last[0].Payload, &ended)
	event := EventCompleted
	if r.Status == journal.StatusFailed {
		event = EventFailed
	}
	end := last[0].Time
	var errs []error
	for _, t := range trigs {
		t.mu.Lock()
		def, paused := t.def, t.pausedAt(end)
		t.mu.Unlock()
		if def.On.Agent != created.Principal || end.Before(def.Created) || paused {
			continue
		}
		ev := ""
		switch {
		case slices.Contains(def.On.Events, event):
			ev = event
		case event == EventCompleted && ended.Output != "" && slices.Contains(def.On.Events, EventOutput):
			ev = EventOutput
		default:
			continue
		}
		if err := h.fireRun(ctx, t, def, r.RunID, key, ev, end, ended.Output, depth+1); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// pausedAt says whether the trigger was paused at time at. t.mu held.
func (t *trig) pausedAt(at time.Time) bool {
	for _, p := range t.pauses {
		if !at.Before(p.from) && (p.to.IsZero() || at.Before(p.to)) {
			return true
		}
	}
	return false
}

// fireRun journals and starts the run of trigger t caused by run cause.
func (h *Hub) fireRun(ctx context.Context, t *trig, def *Trigger, cause, key, event string, at time.Time, output string, depth int) error {
	d := &Delivery{MessageID: "run:" + key, Outcome: Accepted, Received: h.clock().UTC(), Cause: "run " + cause + " " + event, Timestamp: at.UTC()}
	d.RunID = schedule.RunID(def.ID, "message:"+d.MessageID, def.Created)
	_, err := t.s.Append(ctx, Received, d, func() error {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.accepted[d.MessageID] != nil {
			return errDuplicate
		}
		return nil
	})
	if err != nil && !errors.Is(err, errDuplicate) {
		return err
	}
	// Recorded now or before (by this or another server): start the run
	// unless this process saw it exist; Start is idempotent by run id.
	t.mu.Lock()
	confirmed := t.confirmed[d.MessageID]
	t.mu.Unlock()
	if confirmed {
		return nil
	}
	task, err := render(def, d.MessageID, d.Received)
	if err != nil {
		return err
	}
	p := &schedule.StartParams{RunID: d.RunID, Agent: def.Agent, OnBehalfOf: def.OnBehalfOf, Task: task, Run: def.Run, Notify: def.Notify, Owner: def.Owner,
		Labels: map[string]string{LabelTrigger: def.Name, LabelMessage: d.MessageID, LabelDepth: strconv.Itoa(depth)}}
	if event == EventOutput {
		p.Input = &schedule.Input{Source: fmt.Sprintf("the output of run %s (run trigger %s)", cause, def.Name), ContentType: "text/plain; charset=utf-8", Data: []byte(output)}
	}
	err = h.runner.Start(ctx, p)
	if err == nil || errors.Is(err, schedule.ErrRunExists) {
		h.confirm(t, d.MessageID)
		return nil
	}
	if errors.Is(err, schedule.ErrPermanent) {
		_, aerr := t.s.Append(ctx, RunFailed, &runFailed{MessageID: d.MessageID, Reason: err.Error()}, nil)
		return aerr
	}
	return err // the next Watch tries again
}
