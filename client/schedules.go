package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/keel-run/keel/server/api"
)

// Schedules returns the server's schedules (not deleted), oldest first.
func (c *Client) Schedules(ctx context.Context) ([]api.Schedule, error) {
	var out api.ScheduleList
	return out.Schedules, c.do(ctx, http.MethodGet, "/v1/schedules", nil, nil, &out)
}

// CreateSchedule creates a schedule.
func (c *Client) CreateSchedule(ctx context.Context, req *api.CreateSchedule) (*api.Schedule, error) {
	var out api.Schedule
	return &out, c.do(ctx, http.MethodPost, "/v1/schedules", nil, req, &out)
}

// Schedule returns the schedule named or identified by ref.
func (c *Client) Schedule(ctx context.Context, ref string) (*api.Schedule, error) {
	var out api.Schedule
	return &out, c.do(ctx, http.MethodGet, "/v1/schedules/"+url.PathEscape(ref), nil, nil, &out)
}

// FiresParams selects the records [Client.Fires] returns.
type FiresParams = api.FiresParams

// Fires returns a schedule's fire records, oldest first. p may be nil.
func (c *Client) Fires(ctx context.Context, ref string, p *FiresParams) ([]api.Fire, error) {
	q := url.Values{}
	if p != nil && p.Outcome != "" {
		q.Set("outcome", p.Outcome)
	}
	if p != nil && p.Last > 0 {
		q.Set("last", strconv.Itoa(p.Last))
	}
	var out api.FireList
	return out.Fires, c.do(ctx, http.MethodGet, "/v1/schedules/"+url.PathEscape(ref)+"/fires", q, nil, &out)
}

// PauseSchedule pauses a schedule.
func (c *Client) PauseSchedule(ctx context.Context, ref, reason string) (*api.Schedule, error) {
	var out api.Schedule
	return &out, c.do(ctx, http.MethodPost, "/v1/schedules/"+url.PathEscape(ref)+"/pause", nil, &api.PauseSchedule{Reason: reason}, &out)
}

// ResumeSchedule resumes a paused schedule.
func (c *Client) ResumeSchedule(ctx context.Context, ref string) (*api.Schedule, error) {
	var out api.Schedule
	return &out, c.do(ctx, http.MethodPost, "/v1/schedules/"+url.PathEscape(ref)+"/resume", nil, nil, &out)
}

// TriggerSchedule fires a schedule now.
func (c *Client) TriggerSchedule(ctx context.Context, ref string, req *api.TriggerSchedule) (*api.Fire, error) {
	var out api.Fire
	return &out, c.do(ctx, http.MethodPost, "/v1/schedules/"+url.PathEscape(ref)+"/trigger", nil, req, &out)
}

// BackfillSchedule fires a schedule at its nominal times in a past
// range.
func (c *Client) BackfillSchedule(ctx context.Context, ref string, req *api.Backfill) ([]api.Fire, error) {
	var out api.FireList
	return out.Fires, c.do(ctx, http.MethodPost, "/v1/schedules/"+url.PathEscape(ref)+"/backfill", nil, req, &out)
}

// DeleteSchedule deletes a schedule.
func (c *Client) DeleteSchedule(ctx context.Context, ref string) error {
	return c.do(ctx, http.MethodDelete, "/v1/schedules/"+url.PathEscape(ref), nil, nil, nil)
}

// Triggers returns the server's triggers (not deleted), oldest first.
func (c *Client) Triggers(ctx context.Context) ([]api.Trigger, error) {
	var out api.TriggerList
	return out.Triggers, c.do(ctx, http.MethodGet, "/v1/triggers", nil, nil, &out)
}

// CreateTrigger creates a trigger; a webhook trigger's answer holds its
// signing secret, shown only this once.
func (c *Client) CreateTrigger(ctx context.Context, req *api.CreateTrigger) (*api.NewTrigger, error) {
	var out api.NewTrigger
	return &out, c.do(ctx, http.MethodPost, "/v1/triggers", nil, req, &out)
}

// Trigger returns the trigger named or identified by ref.
func (c *Client) Trigger(ctx context.Context, ref string) (*api.Trigger, error) {
	var out api.Trigger
	return &out, c.do(ctx, http.MethodGet, "/v1/triggers/"+url.PathEscape(ref), nil, nil, &out)
}

// Deliveries returns a trigger's deliveries, oldest first (last > 0: the
// newest last).
func (c *Client) Deliveries(ctx context.Context, ref string, last int) ([]api.Delivery, error) {
	q := url.Values{}
	if last > 0 {
		q.Set("last", strconv.Itoa(last))
	}
	var out api.DeliveryList
	return out.Deliveries, c.do(ctx, http.MethodGet, "/v1/triggers/"+url.PathEscape(ref)+"/deliveries", q, nil, &out)
}

// PauseTrigger pauses a trigger.
func (c *Client) PauseTrigger(ctx context.Context, ref, reason string) (*api.Trigger, error) {
	var out api.Trigger
	return &out, c.do(ctx, http.MethodPost, "/v1/triggers/"+url.PathEscape(ref)+"/pause", nil, &api.PauseSchedule{Reason: reason}, &out)
}

// ResumeTrigger resumes a paused trigger.
func (c *Client) ResumeTrigger(ctx context.Context, ref string) (*api.Trigger, error) {
	var out api.Trigger
	return &out, c.do(ctx, http.MethodPost, "/v1/triggers/"+url.PathEscape(ref)+"/resume", nil, nil, &out)
}

// DeleteTrigger deletes a trigger.
func (c *Client) DeleteTrigger(ctx context.Context, ref string) error {
	return c.do(ctx, http.MethodDelete, "/v1/triggers/"+url.PathEscape(ref), nil, nil, nil)
}

// Sinks returns the server's notification sinks.
func (c *Client) Sinks(ctx context.Context) ([]api.Sink, error) {
	var out api.SinkList
	return out.Sinks, c.do(ctx, http.MethodGet, "/v1/sinks", nil, nil, &out)
}

// Notifications returns the notifications queued, oldest first: of run
// runID ("" all), the newest last (0 all).
func (c *Client) Notifications(ctx context.Context, runID string, last int) ([]api.Notification, error) {
	q := url.Values{}
	if runID != "" {
		q.Set("run", runID)
	}
	if last > 0 {
		q.Set("last", strconv.Itoa(last))
	}
	var out api.NotificationList
	return out.Notifications, c.do(ctx, http.MethodGet, "/v1/notifications", q, nil, &out)
}
