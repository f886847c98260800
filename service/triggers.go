package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/schedule"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/trigger"
)

// TriggerPath is the path a webhook trigger's sender posts to, with its
// id appended.
const TriggerPath = api.Version + "/triggers/"

// TriggerHub returns the service's triggers.
func (s *Service) TriggerHub() *trigger.Hub { return s.hub }

// CreateTrigger checks and journals a trigger for who, as
// [Service.CreateSchedule] checks a schedule. A webhook trigger's
// signing secret is sealed in the vault and returned this once.
func (s *Service) CreateTrigger(ctx context.Context, who *Caller, p *api.CreateTrigger) (api.NewTrigger, error) {
	def := &trigger.Trigger{Name: p.Name, Task: p.Run.Task, Notify: p.Notify}
	for _, f := range []struct {
		name, text string
		into       *agent.Duration
	}{{"tolerance", p.Tolerance, &def.Tolerance}, {"dedupe", p.Dedupe, &def.Dedupe}} {
		if f.text == "" {
			continue
		}
		d, err := time.ParseDuration(f.text)
		if err != nil || d <= 0 {
			return api.NewTrigger{}, badRequest("%s %q: want a positive duration such as 5m or 168h", f.name, f.text)
		}
		*f.into = agent.Duration(d)
	}
	if p.On != nil {
		def.On = &trigger.On{Agent: p.On.Agent, Events: p.On.Events}
	}
	def.Created = s.opts.Clock().UTC()
	if err := trigger.Check(def); err != nil {
		return api.NewTrigger{}, triggerErr(err)
	}
	if def.On != nil {
		// A typo would make a trigger that never fires.
		if _, err := s.opts.Directory.Get(ctx, def.On.Agent); errors.Is(err, identity.ErrUnknown) {
			return api.NewTrigger{}, noAgent(def.On.Agent)
		} else if err != nil {
			return api.NewTrigger{}, err
		}
	}
	u, err := s.admitUnattended(ctx, who, "trigger "+p.Name, &p.Run, p.Notify)
	if err != nil {
		return api.NewTrigger{}, err
	}
	if p.On == nil && s.opts.Sealer == nil {
		// After the request's own checks, which a person fixes first.
		return api.NewTrigger{}, unavailable("webhook triggers keep their signing secret sealed in the vault, and this journal has no vault key: make one with keel auth key generate on the journal's machine (or set KEEL_VAULT_KEY_FILE); a keel serve started before needs a restart to use it")
	}
	def.Agent, def.OnBehalfOf, def.Run = u.agent, u.onBehalfOf, u.run
	def.Owner, def.CreatedBy = ownerOf(who), who.Name
	d, secret, err := s.hub.Create(ctx, def)
	if err != nil {
		return api.NewTrigger{}, triggerErr(err)
	}
	if err := s.record(ctx, who, action{Action: "trigger.create", Target: d.Name, Detail: d.ID}); err != nil {
		return api.NewTrigger{}, err
	}
	t, err := s.Trigger(ctx, who, d.ID)
	return api.NewTrigger{Trigger: t, Secret: secret}, err
}

// triggerErr turns the trigger package's errors into the service's.
func triggerErr(err error) error {
	msg := func(sentinel error) string {
		return strings.TrimPrefix(strings.TrimPrefix(err.Error(), sentinel.Error()), ": ")
	}
	switch {
	case errors.Is(err, trigger.ErrInvalid):
		return badRequest("%s", msg(trigger.ErrInvalid))
	case errors.Is(err, trigger.ErrState):
		return conflict(api.CodeConflict, "%s", msg(trigger.ErrState))
	case errors.Is(err, trigger.ErrNotFound):
		return notFound("no trigger %s", msg(trigger.ErrNotFound))
	}
	return err
}

// Triggers lists the triggers not deleted, oldest first.
func (s *Service) Triggers(ctx context.Context, who *Caller) ([]api.Trigger, error) {
	list, err := s.hub.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.Trigger, 0, len(list))
	for _, st := range list {
		out = append(out, s.triggerView(st))
	}
	return out, nil
}

// Trigger returns the trigger named or identified by ref.
func (s *Service) Trigger(ctx context.Context, who *Caller, ref string) (api.Trigger, error) {
	st, err := s.hub.Get(ctx, ref)
	if err != nil {
		return api.Trigger{}, triggerErr(err)
	}
	if st.Deleted {
		return api.Trigger{}, notFound("trigger %s was deleted", ref)
	}
	return s.triggerView(st), nil
}

// Deliveries returns a trigger's deliveries, oldest first (last > 0:
// the newest last).
func (s *Service) Deliveries(ctx context.Context, who *Caller, ref string, last int) ([]api.Delivery, error) {
	if last < 0 {
		return nil, badRequest("last %d: want a number >= 0", last)
	}
	list, err := s.hub.Deliveries(ctx, ref, last)
	if err != nil {
		return nil, triggerErr(err)
	}
	out := make([]api.Delivery, 0, len(list))
	for _, d := range list {
		out = append(out, deliveryView(d))
	}
	return out, nil
}

// PauseTrigger refuses a trigger's deliveries (journaled) until
// [Service.ResumeTrigger].
func (s *Service) PauseTrigger(ctx context.Context, who *Caller, ref, reason string) (api.Trigger, error) {
	id, err := s.changeTrigger(ctx, who, ref, "trigger.pause", func(id string) error { return s.hub.Pause(ctx, id, who.Name, reason) })
	if err != nil {
		return api.Trigger{}, err
	}
	return s.Trigger(ctx, who, id)
}

// ResumeTrigger accepts a trigger's deliveries again.
func (s *Service) ResumeTrigger(ctx context.Context, who *Caller, ref string) (api.Trigger, error) {
	id, err := s.changeTrigger(ctx, who, ref, "trigger.resume", func(id string) error { return s.hub.Resume(ctx, id, who.Name) })
	if err != nil {
		return api.Trigger{}, err
	}
	return s.Trigger(ctx, who, id)
}

// DeleteTrigger ends a trigger: its URL answers 404 from then on; its
// records stay in the journal.
func (s *Service) DeleteTrigger(ctx context.Context, who *Caller, ref string) error {
	_, err := s.changeTrigger(ctx, who, ref, "trigger.delete", func(id string) error { return s.hub.Delete(ctx, id, who.Name) })
	return err
}

// changeTrigger checks that who may change trigger ref (an admin, or a
// caller who may act as its agent), does it and journals the action.
func (s *Service) changeTrigger(ctx context.Context, who *Caller, ref, act string, do func(id string) error) (string, error) {
	t, err := s.Trigger(ctx, who, ref)
	if err != nil {
		return "", err
	}
	if err := (&admission{who: who}).mayActAs(t.Run.Agent, t.Run.OnBehalfOf); err != nil {
		return "", err
	}
	if err := do(t.ID); err != nil {
		return t.ID, triggerErr(err)
	}
	return t.ID, s.record(ctx, who, action{Action: act, Target: t.Name, Detail: t.ID})
}

// Deliver receives a webhook delivery to trigger id: no caller, the
// Standard Webhooks signature authenticates the sender (see
// trigger.Hub.Deliver). The answer names the run; refusals are errors
// with the API's codes (unauthenticated for a bad signature or an old
// timestamp, conflict for a replayed id or a paused trigger).
func (s *Service) Deliver(ctx context.Context, id string, header http.Header, body []byte, remote string) (api.TriggerAnswer, bool, error) {
	if !s.executes() {
		return api.TriggerAnswer{}, false, unavailable("this process creates no runs")
	}
	d, err := s.hub.Deliver(ctx, id, header, body, remote)
	var re *trigger.RefusedError
	switch {
	case err == nil:
		return api.TriggerAnswer{RunID: d.RunID, Outcome: string(d.Outcome)}, d.Outcome == trigger.Duplicate, nil
	case errors.As(err, &re):
		code := api.CodeInvalidRequest
		switch re.Reason {
		case trigger.ReasonSignature, trigger.ReasonTooOld, trigger.ReasonTooNew:
			code = api.CodeUnauthenticated
		case trigger.ReasonReplayed, trigger.ReasonPaused:
			code = api.CodeConflict
		case trigger.ReasonTooLarge:
			code = api.CodeTooLarge
		}
		return api.TriggerAnswer{}, false, &Error{Code: code, Message: "delivery refused: " + re.Reason}
	case errors.Is(err, trigger.ErrNotFound):
		return api.TriggerAnswer{}, false, notFound("no such trigger")
	case errors.Is(err, trigger.ErrUnavailable):
		return api.TriggerAnswer{}, false, unavailable("the run cannot be created now; retry later")
	case errors.Is(err, schedule.ErrPermanent):
		// The delivery was accepted and journaled; its run cannot be
		// made (the sender's retries would fail the same way).
		// Not the sender's fault: a conflict with the trigger's setup.
		return api.TriggerAnswer{Outcome: string(d.Outcome)}, false, conflict(api.CodeConflict, "the message was received (recorded as failed), but the trigger's run cannot be created: %s", d.RunError)
	}
	return api.TriggerAnswer{}, false, err
}

// triggerView is a trigger as the API shows it.
func (s *Service) triggerView(st *trigger.Status) api.Trigger {
	d := &st.Trigger
	out := api.Trigger{ID: d.ID, SecretHash: d.SecretHash, CreatedBy: d.CreatedBy, Created: d.Created, Paused: st.Paused, Counts: st.Counts,
		CreateTrigger: api.CreateTrigger{Name: d.Name, Notify: d.Notify, Run: runOf(d.Run, d.Task, d.Agent, d.OnBehalfOf)}}
	if d.Tolerance > 0 {
		out.Tolerance = d.Tolerance.D().String()
	}
	if d.Dedupe > 0 {
		out.Dedupe = d.Dedupe.D().String()
	}
	if d.On != nil {
		out.On = &api.RunEvents{Agent: d.On.Agent, Events: d.On.Events}
	} else {
		out.URL = strings.TrimSuffix(s.opts.PublicURL, "/") + TriggerPath + d.ID
	}
	return out
}

// deliveryView is a delivery as the API shows it.
func deliveryView(d *trigger.Delivery) api.Delivery {
	out := api.Delivery{MessageID: d.MessageID, Outcome: string(d.Outcome), Reason: d.Reason, Received: d.Received, RunID: d.RunID,
		SHA256: d.Digest, Size: d.Size, Remote: d.Remote, RunError: d.RunError, Cause: d.Cause}
	if d.Outcome == trigger.Failed {
		out.RunID = "" // the run it would have had does not exist
	}
	if !d.Timestamp.IsZero() {
		ts := d.Timestamp
		out.Timestamp = &ts
	}
	return out
}

// noSealer is the trigger secrets of a service without a vault key.
type noSealer struct{}

func (noSealer) PutSealed(context.Context, string, string) error {
	return fmt.Errorf("no vault key: webhook triggers keep their signing secret sealed in the vault (keel auth key generate)")
}

func (noSealer) Sealed(context.Context, string) (string, error) {
	return "", fmt.Errorf("no vault key: the trigger's signing secret is sealed in the vault (keel auth key generate)")
}
