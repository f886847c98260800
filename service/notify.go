package service

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/internal/lazy"
	"github.com/keel-run/keel/notify"
	"github.com/keel-run/keel/schedule"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/trigger"
)

// newUnattended makes the service's schedules, triggers and notifier
// (see unattended.go).
func (s *Service) newUnattended() {
	store := s.rt.Store()
	s.sched = schedule.New(store, fireRunner{s}, &schedule.Options{Clock: s.opts.Clock, Logger: s.logger.With("component", "scheduler"),
		Interval: s.unattendedInterval(), OnFire: s.opts.OnFire})
	var sealer trigger.Secrets = noSealer{}
	if s.opts.Sealer != nil {
		sealer = s.opts.Sealer
	}
	s.hub = trigger.New(store, fireRunner{s}, sealer, &trigger.Options{Clock: s.opts.Clock, Logger: s.logger.With("component", "triggers")})
	s.notifier = notify.New(store, &unattendedSource{runs: &notify.RuntimeSource{Runtime: s.rt, Route: s.route}, s: s}, &notify.Options{Sinks: s.opts.Sinks, Link: s.link,
		Clock: s.opts.Clock, Logger: s.logger.With("component", "notify"), Interval: s.unattendedInterval()})
}

// unattendedSource is the notifier's [notify.Source]: the waits and
// failures of runs, and the schedules whose fires can no longer create
// their runs (nobody would hear of those otherwise: there is no run to
// fail).
type unattendedSource struct {
	runs *notify.RuntimeSource
	s    *Service
}

// Pending implements [notify.Source].
func (u *unattendedSource) Pending(ctx context.Context, since time.Time) ([]notify.Item, error) {
	items, err := u.runs.Pending(ctx, since)
	if err != nil {
		return nil, err
	}
	list, err := u.s.sched.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, st := range list {
		f := st.Failing
		if f == nil || st.Deleted || f.At.Before(since) {
			continue
		}
		// One notification per failure that lasts: its first fire names
		// it (every later fire fails alike until a run is created again).
		sinks := slices.Clone(st.Notify)
		for _, k := range u.s.opts.AgentSinks[credential.Owner(st.Agent)] {
			if !slices.Contains(sinks, k) {
				sinks = append(sinks, k)
			}
		}
		if len(sinks) == 0 {
			continue
		}
		items = append(items, notify.Item{Kind: notify.KindScheduleFailed, RunID: f.RunID, ItemID: f.Key, Agent: st.Agent, OnBehalfOf: st.OnBehalfOf,
			Origin: "schedule " + st.Name, Since: f.At, Sinks: sinks})
	}
	return items, nil
}

// Notifier returns the service's notifier.
func (s *Service) Notifier() *notify.Notifier { return s.notifier }

// route returns the sinks told about run id: those of the schedule or
// trigger that started it and those of its agent.
func (s *Service) route(ctx context.Context, id string, c *agent.RunCreated) []string {
	var sinks []string
	if name := c.Labels[schedule.LabelSchedule]; name != "" {
		if st, err := s.sched.Get(ctx, name); err == nil {
			sinks = append(sinks, st.Notify...)
		}
	}
	if name := c.Labels[trigger.LabelTrigger]; name != "" {
		if st, err := s.hub.Get(ctx, name); err == nil {
			sinks = append(sinks, st.Notify...)
		}
	}
	for _, k := range s.opts.AgentSinks[credential.Owner(c.Principal)] {
		if !slices.Contains(sinks, k) {
			sinks = append(sinks, k)
		}
	}
	return sinks
}

// fragmentSafe is what an item id must look like to go into a link as
// it is (a call id is the model's text).
var fragmentSafe = lazy.Regexp(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,79}$`)

// link returns the web UI address of a notification's item: the run's
// page, at the waiting call or input.
func (s *Service) link(it *notify.Item) string {
	if s.opts.PublicURL == "" {
		return ""
	}
	if it.Kind == notify.KindScheduleFailed {
		return strings.TrimSuffix(s.opts.PublicURL, "/") + "/ui/schedules/" + url.PathEscape(strings.TrimPrefix(it.Origin, "schedule "))
	}
	u := strings.TrimSuffix(s.opts.PublicURL, "/") + "/ui/runs/" + url.PathEscape(it.RunID)
	if fragmentSafe().MatchString(it.ItemID) {
		switch it.Kind {
		case notify.KindApproval, notify.KindAuth:
			u += "#call-" + it.ItemID
		case notify.KindInput:
			u += "#input-" + it.ItemID
		}
	}
	return u
}

// sinkNames returns the names of the service's sinks, sorted.
func (s *Service) sinkNames() []string { return slices.Sorted(maps.Keys(s.opts.Sinks)) }

// SinkKind names the kind of a notification sink as the API shows it.
func SinkKind(k notify.Sink) string {
	switch k.(type) {
	case *notify.Email:
		return "email"
	case *notify.Webhook:
		return "webhook"
	case *notify.Slack:
		return "slack"
	}
	return fmt.Sprintf("%T", k)
}

// Sinks lists the service's notification sinks (their names and kinds,
// never an address or secret) and the agents each is told about.
func (s *Service) Sinks(ctx context.Context, who *Caller) []api.Sink {
	out := []api.Sink{}
	for _, name := range s.sinkNames() {
		sk := api.Sink{Name: name, Kind: SinkKind(s.opts.Sinks[name])}
		for _, ag := range slices.Sorted(maps.Keys(s.opts.AgentSinks)) {
			if slices.Contains(s.opts.AgentSinks[ag], name) {
				sk.Agents = append(sk.Agents, ag)
			}
		}
		out = append(out, sk)
	}
	return out
}

// Notifications lists the notifications queued, oldest first: of run
// runID ("" all), the newest last (0: all).
func (s *Service) Notifications(ctx context.Context, who *Caller, runID string, last int) ([]api.Notification, error) {
	if last < 0 {
		return nil, badRequest("last %d: want a number >= 0", last)
	}
	if runID != "" {
		// A run is named as everywhere else: a prefix or the short
		// form; one that names no run is not found, not an empty list.
		id, err := s.ResolveRun(ctx, who, runID, "")
		if err != nil {
			return nil, err
		}
		runID = id
	}
	list, err := s.notifier.List(ctx, runID, last)
	if err != nil {
		return nil, err
	}
	out := make([]api.Notification, 0, len(list))
	for _, n := range list {
		v := api.Notification{ID: n.Message.ID, Sink: n.Sink, Kind: string(n.Message.Kind), RunID: n.Message.RunID, Item: n.Message.Item,
			Title: n.Message.Title, Link: n.Message.Link, Queued: n.Queued, State: n.State, Attempts: n.Attempts, LastError: n.LastError}
		if !n.Next.IsZero() && n.State == "queued" {
			next := n.Next
			v.Next = &next
		}
		if !n.Delivered.IsZero() {
			d := n.Delivered
			v.Delivered = &d
		}
		out = append(out, v)
	}
	return out, nil
}
