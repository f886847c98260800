package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/schedule"
	"github.com/keel-run/keel/server/api"
)

// ScheduleDriver keeps the schedules of another timer in step with the
// journal's (keel serve --temporal: Temporal Schedules,
// *cluster.Schedules). Sync is idempotent: the service calls it after
// each change and every minute.
type ScheduleDriver interface {
	Sync(ctx context.Context, list []*schedule.Status) error
}

// Scheduler returns the service's scheduler (the Temporal driver's fire
// activity records fires through it).
func (s *Service) Scheduler() *schedule.Scheduler { return s.sched }

// CreateSchedule checks and journals a schedule for who: its spec and
// policy, and its runs as a creation of who would be checked now (the
// agent who may act as, the model, workspace, sandbox and policy), plus
// the admission of unattended work: runs that could stop to ask a person
// need a notification sink or an approval timeout with a default
// decision. Credentials the runs will miss are returned as warnings.
// The runs are created, at each fire, with who's rights (a revoked token
// fails the fires).
func (s *Service) CreateSchedule(ctx context.Context, who *Caller, p *api.CreateSchedule) (api.Schedule, error) {
	def, err := scheduleOf(p)
	if err != nil {
		return api.Schedule{}, err
	}
	def.Created = s.opts.Clock().UTC()
	if err := schedule.Check(def); err != nil {
		return api.Schedule{}, scheduleErr(err)
	}
	u, err := s.admitUnattended(ctx, who, "schedule "+p.Name, &p.Run, p.Notify)
	if err != nil {
		return api.Schedule{}, err
	}
	def.Agent, def.OnBehalfOf, def.Run, def.Providers = u.agent, u.onBehalfOf, u.run, u.providers
	def.Owner, def.CreatedBy = ownerOf(who), who.Name
	if s.opts.ScheduleDriver != nil {
		def.Driver = schedule.DriverTemporal
	}
	d, err := s.sched.Create(ctx, def)
	if err != nil {
		return api.Schedule{}, scheduleErr(err)
	}
	s.syncSchedules(ctx, nil)
	if err := s.record(ctx, who, action{Action: "schedule.create", Target: d.Name, Detail: d.ID}); err != nil {
		return api.Schedule{}, err
	}
	return s.Schedule(ctx, who, d.ID)
}

// scheduleOf reads an API schedule into its definition (without the
// runs' request, which admission fills in).
func scheduleOf(p *api.CreateSchedule) (*schedule.Schedule, error) {
	var errs []string
	dur := func(name, v string) agent.Duration {
		if v == "" {
			return 0
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			errs = append(errs, fmt.Sprintf("%s %q: want a duration such as 90s, 15m or 1h", name, v))
		}
		return agent.Duration(d)
	}
	def := &schedule.Schedule{Name: p.Name, Task: p.Run.Task, Notify: slices.Clone(p.Notify),
		Spec:   schedule.Spec{Cron: p.Cron, Every: dur("every", p.Every), Offset: dur("offset", p.Offset), TimeZone: p.TimeZone, Jitter: dur("jitter", p.Jitter)},
		Policy: schedule.Policy{Overlap: schedule.Overlap(p.Overlap), CatchupWindow: dur("catchup_window", p.CatchupWindow), PauseAfterFailures: p.PauseAfterFailures}}
	if p.Start != nil {
		def.Spec.Start = p.Start.UTC()
	}
	if p.End != nil {
		def.Spec.End = p.End.UTC()
	}
	if len(errs) > 0 {
		return nil, badRequest("%s", strings.Join(errs, "; "))
	}
	return def, nil
}

// scheduleErr turns the schedule package's errors into the service's.
func scheduleErr(err error) error {
	msg := func(sentinel error) string {
		return strings.TrimPrefix(strings.TrimPrefix(err.Error(), sentinel.Error()), ": ")
	}
	switch {
	case errors.Is(err, schedule.ErrInvalid):
		return badRequest("%s", msg(schedule.ErrInvalid))
	case errors.Is(err, schedule.ErrState):
		return conflict(api.CodeConflict, "%s", msg(schedule.ErrState))
	case errors.Is(err, schedule.ErrNotFound):
		return notFound("no schedule %s", msg(schedule.ErrNotFound))
	case errors.Is(err, schedule.ErrDeleted):
		return notFound("schedule %s was deleted", msg(schedule.ErrDeleted))
	case errors.Is(err, journal.ErrLocked):
		return conflict(api.CodeConflict, "another server is working on the schedule right now; try again")
	}
	return err
}

// Schedules lists the schedules not deleted, oldest first.
func (s *Service) Schedules(ctx context.Context, who *Caller) ([]api.Schedule, error) {
	list, err := s.sched.List(ctx)
	if err != nil {
		return nil, err
	}
	grants := s.vaultGrants(ctx)
	out := make([]api.Schedule, 0, len(list))
	for _, st := range list {
		out = append(out, scheduleView(st, grants))
	}
	return out, nil
}

// Schedule returns the schedule named or identified by ref.
func (s *Service) Schedule(ctx context.Context, who *Caller, ref string) (api.Schedule, error) {
	st, err := s.sched.Get(ctx, ref)
	if err != nil {
		return api.Schedule{}, scheduleErr(err)
	}
	if st.Deleted {
		return api.Schedule{}, notFound("schedule %s was deleted", ref)
	}
	return scheduleView(st, s.vaultGrants(ctx)), nil
}

// FiresParams selects the fire records [Service.Fires] returns.
type FiresParams = api.FiresParams

// Fires returns a schedule's fire records, oldest first.
func (s *Service) Fires(ctx context.Context, who *Caller, ref string, p *FiresParams) ([]api.Fire, error) {
	if p == nil {
		p = &FiresParams{}
	}
	if p.Outcome != "" && !slices.Contains(schedule.Outcomes, schedule.Outcome(p.Outcome)) {
		return nil, badRequest("outcome %q: want one of %v", p.Outcome, schedule.Outcomes)
	}
	if p.Last < 0 {
		return nil, badRequest("last %d: want a number >= 0", p.Last)
	}
	fires, err := s.sched.Fires(ctx, ref, &schedule.FiresParams{Outcome: schedule.Outcome(p.Outcome), Last: p.Last})
	if err != nil {
		return nil, scheduleErr(err)
	}
	out := make([]api.Fire, 0, len(fires))
	for _, f := range fires {
		out = append(out, fireView(f))
	}
	return out, nil
}

// PauseSchedule stops a schedule's fires until [Service.ResumeSchedule].
func (s *Service) PauseSchedule(ctx context.Context, who *Caller, ref, reason string) (api.Schedule, error) {
	id, err := s.changeSchedule(ctx, who, ref, "schedule.pause", func(id string) error {
		return s.sched.Pause(ctx, id, who.Name, reason)
	})
	if err != nil {
		return api.Schedule{}, err
	}
	return s.Schedule(ctx, who, id)
}

// ResumeSchedule restarts a paused schedule's fires from now.
func (s *Service) ResumeSchedule(ctx context.Context, who *Caller, ref string) (api.Schedule, error) {
	id, err := s.changeSchedule(ctx, who, ref, "schedule.resume", func(id string) error {
		return s.sched.Resume(ctx, id, who.Name)
	})
	if err != nil {
		return api.Schedule{}, err
	}
	return s.Schedule(ctx, who, id)
}

// DeleteSchedule ends a schedule: it fires no more; its records stay in
// the journal and the runs it started go on.
func (s *Service) DeleteSchedule(ctx context.Context, who *Caller, ref string) error {
	_, err := s.changeSchedule(ctx, who, ref, "schedule.delete", func(id string) error {
		st, err := s.sched.Get(ctx, id)
		if err != nil {
			return err
		}
		if err := s.sched.Delete(ctx, id, who.Name); err != nil {
			return err
		}
		st.Deleted = true
		s.syncSchedules(ctx, []*schedule.Status{st})
		return nil
	})
	return err
}

// TriggerSchedule fires a schedule now, outside its spec, under its
// overlap policy unless p names another. The fire's run is created
// with the rights of the schedule's creator; who is recorded.
func (s *Service) TriggerSchedule(ctx context.Context, who *Caller, ref string, p *api.TriggerSchedule) (api.Fire, error) {
	if p == nil {
		p = &api.TriggerSchedule{}
	}
	o, err := overlapOf(p.Overlap)
	if err != nil {
		return api.Fire{}, err
	}
	var f *schedule.Fire
	_, err = s.changeSchedule(ctx, who, ref, "schedule.trigger", func(id string) error {
		if err := s.fireable(ctx, id); err != nil {
			return err
		}
		f, err = s.sched.Trigger(ctx, id, who.Name, o)
		return err
	})
	if err != nil {
		return api.Fire{}, err
	}
	if f != nil && f.Outcome == schedule.OutcomeFailed {
		// Recorded, but nothing runs: say so on every front end.
		return fireView(f), conflict(api.CodeConflict, "schedule %s: fire %s could not create its run (recorded as failed): %s", ref, f.Key, f.Reason)
	}
	return fireView(f), nil
}

// BackfillSchedule fires a schedule at each of its nominal times in
// (p.From, p.To], as if it had run then (default overlap buffer_all).
func (s *Service) BackfillSchedule(ctx context.Context, who *Caller, ref string, p *api.Backfill) ([]api.Fire, error) {
	o, err := overlapOf(p.Overlap)
	if err != nil {
		return nil, err
	}
	if p.From.IsZero() || p.To.IsZero() {
		return nil, badRequest("a backfill needs from and to")
	}
	if now := s.opts.Clock(); p.To.After(now) {
		return nil, badRequest("a backfill's range must be in the past: its end %s is after now", p.To.UTC().Format(time.RFC3339))
	}
	var fires []*schedule.Fire
	_, err = s.changeSchedule(ctx, who, ref, "schedule.backfill", func(id string) error {
		if err := s.fireable(ctx, id); err != nil {
			return err
		}
		fires, err = s.sched.Backfill(ctx, id, p.From, p.To, o, who.Name)
		return err
	})
	out := make([]api.Fire, 0, len(fires))
	for _, f := range fires {
		out = append(out, fireView(f))
	}
	return out, err
}

// fireable refuses to fire schedule id now when this service executes
// its fires and would not execute their runs: a workspace outside its
// roots (a schedule made on the journal, where the server's roots are
// not known). The fire would only make a failed run.
func (s *Service) fireable(ctx context.Context, id string) error {
	if s.opts.NoExecution {
		return nil
	}
	st, err := s.sched.Get(ctx, id)
	if err != nil || len(st.Run) == 0 {
		return err
	}
	var run api.CreateRun
	if err := json.Unmarshal(st.Run, &run); err != nil || run.Workspace == "" {
		return nil
	}
	if _, err := s.conf.checkWorkspace(run.Workspace, !s.opts.OwnerOnly); err != nil {
		e, _ := Classify(err)
		return badRequest("schedule %s: this server does not execute its runs: %s", st.Name, e.Message)
	}
	return nil
}

func overlapOf(s string) (schedule.Overlap, error) {
	if s == "" {
		return "", nil
	}
	o, err := schedule.ParseOverlap(s)
	if err != nil {
		return "", badRequest("overlap %q: want one of %v", s, schedule.Overlaps)
	}
	return o, nil
}

// changeSchedule checks that who may change schedule ref (an admin, or a
// caller who may act as its agent), does it and journals the action. It
// returns the schedule's id.
func (s *Service) changeSchedule(ctx context.Context, who *Caller, ref, act string, do func(id string) error) (string, error) {
	st, err := s.sched.Get(ctx, ref)
	if err != nil {
		return "", scheduleErr(err)
	}
	if st.Deleted {
		return "", notFound("schedule %s was deleted", ref)
	}
	if err := (&admission{who: who}).mayActAs(st.Agent, st.OnBehalfOf); err != nil {
		return "", err
	}
	if err := do(st.ID); err != nil {
		return st.ID, scheduleErr(err)
	}
	if act == "schedule.pause" || act == "schedule.resume" {
		s.syncSchedules(ctx, nil)
	}
	return st.ID, s.record(ctx, who, action{Action: act, Target: st.Name, Detail: st.ID})
}

// syncSchedules brings the schedule driver (Temporal) in step: the
// schedules listed and more (deleted ones). Errors are logged: the next
// periodic sync tries again.
func (s *Service) syncSchedules(ctx context.Context, more []*schedule.Status) {
	if s.opts.ScheduleDriver == nil {
		return
	}
	list, err := s.sched.List(ctx)
	if err == nil {
		err = s.opts.ScheduleDriver.Sync(ctx, append(list, more...))
	}
	if err != nil {
		s.logger.Warn("sync schedules with Temporal", "err", err)
	}
}

// scheduleView is a schedule as the API shows it.
func scheduleView(st *schedule.Status, grants []agentGrant) api.Schedule {
	d := &st.Schedule
	durText := func(v agent.Duration) string {
		if v == 0 {
			return ""
		}
		return v.D().String()
	}
	out := api.Schedule{ID: d.ID, Driver: d.Driver, CreatedBy: d.CreatedBy, Created: d.Created,
		CreateSchedule: api.CreateSchedule{Name: d.Name, Cron: d.Spec.Cron, Every: durText(d.Spec.Every), Offset: durText(d.Spec.Offset),
			TimeZone: d.Spec.TimeZone, Jitter: durText(d.Spec.Jitter), Overlap: string(d.Policy.Overlap), CatchupWindow: durText(d.Policy.CatchupWindow),
			PauseAfterFailures: d.Policy.PauseAfterFailures, Notify: d.Notify, Run: runOf(d.Run, d.Task, d.Agent, d.OnBehalfOf)},
		Paused: st.Paused, PausedBy: st.PausedBy, PausedReason: st.PausedReason,
		Counts: map[string]int{}, Open: st.Open, Buffered: st.Buffered, Failures: st.Failures}
	if !d.Spec.Start.IsZero() {
		out.Start = &d.Spec.Start
	}
	if !d.Spec.End.IsZero() {
		out.End = &d.Spec.End
	}
	if st.Paused {
		out.PausedAt = &st.PausedAt
	}
	if !st.Next.IsZero() {
		out.Next = &st.Next
	}
	for k, v := range st.Counts {
		out.Counts[string(k)] = v
	}
	if st.Last != nil {
		f := fireView(st.Last)
		out.Last = &f
	}
	var mine []schedule.Grant
	for _, g := range grants {
		if g.Agent == d.Agent && g.User == d.OnBehalfOf {
			mine = append(mine, g.Grant)
		}
	}
	out.Warnings = schedule.CredentialWarnings(d.Providers, mine, d.Agent, st.Next)
	return out
}

// runOf is the runs' request of a schedule or trigger as the API shows
// it: the request kept, with the task template, agent and user.
func runOf(raw json.RawMessage, task, agent, onBehalfOf string) api.CreateRun {
	var r api.CreateRun
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &r)
	}
	r.Task, r.Agent, r.OnBehalfOf = task, agent, onBehalfOf
	return r
}

// fireView is a fire record as the API shows it.
func fireView(f *schedule.Fire) api.Fire {
	out := api.Fire{Key: f.Key, Source: string(f.Source), Nominal: f.Nominal, Due: f.Due, At: f.At, Outcome: string(f.Outcome), RunID: f.RunID,
		Reason: f.Reason, By: f.By, Canceled: f.Canceled, RunStatus: string(f.RunStatus)}
	if f.Outcome == schedule.OutcomeFailed {
		out.RunID = "" // the run it would have had does not exist
	}
	if late := f.Late.D().Round(time.Second); late > 0 {
		out.Late = late.String()
	}
	if !f.Started.IsZero() {
		out.Started = &f.Started
	}
	return out
}
