package cli

import (
	"context"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/server/api"
)

// The schedule and trigger commands' server form: the client's methods,
// which have the backend's shape.

func (r *remote) CreateSchedule(ctx context.Context, req *api.CreateSchedule) (*api.Schedule, error) {
	return r.cl.CreateSchedule(ctx, req)
}

func (r *remote) Schedules(ctx context.Context) ([]api.Schedule, error) { return r.cl.Schedules(ctx) }

func (r *remote) Schedule(ctx context.Context, ref string) (*api.Schedule, error) {
	return r.cl.Schedule(ctx, ref)
}

func (r *remote) Fires(ctx context.Context, ref string, p *client.FiresParams) ([]api.Fire, error) {
	return r.cl.Fires(ctx, ref, p)
}

func (r *remote) PauseSchedule(ctx context.Context, ref, reason string) (*api.Schedule, error) {
	return r.cl.PauseSchedule(ctx, ref, reason)
}

func (r *remote) ResumeSchedule(ctx context.Context, ref string) (*api.Schedule, error) {
	return r.cl.ResumeSchedule(ctx, ref)
}

func (r *remote) TriggerSchedule(ctx context.Context, ref string, req *api.TriggerSchedule) (*api.Fire, error) {
	return r.cl.TriggerSchedule(ctx, ref, req)
}

func (r *remote) BackfillSchedule(ctx context.Context, ref string, req *api.Backfill) ([]api.Fire, error) {
	return r.cl.BackfillSchedule(ctx, ref, req)
}

func (r *remote) DeleteSchedule(ctx context.Context, ref string) error {
	return r.cl.DeleteSchedule(ctx, ref)
}

func (r *remote) CreateTrigger(ctx context.Context, req *api.CreateTrigger) (*api.NewTrigger, error) {
	return r.cl.CreateTrigger(ctx, req)
}

func (r *remote) Triggers(ctx context.Context) ([]api.Trigger, error) { return r.cl.Triggers(ctx) }

func (r *remote) Trigger(ctx context.Context, ref string) (*api.Trigger, error) {
	return r.cl.Trigger(ctx, ref)
}

func (r *remote) Deliveries(ctx context.Context, ref string, last int) ([]api.Delivery, error) {
	return r.cl.Deliveries(ctx, ref, last)
}

func (r *remote) PauseTrigger(ctx context.Context, ref, reason string) (*api.Trigger, error) {
	return r.cl.PauseTrigger(ctx, ref, reason)
}

func (r *remote) ResumeTrigger(ctx context.Context, ref string) (*api.Trigger, error) {
	return r.cl.ResumeTrigger(ctx, ref)
}

func (r *remote) DeleteTrigger(ctx context.Context, ref string) error {
	return r.cl.DeleteTrigger(ctx, ref)
}
