package cli

import (
	"context"
	"strings"

	"github.com/keel-run/keel/internal/serve"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/server/api"
)

// The schedule and trigger commands on the local journal are the
// service's (the embedded service.Session): it checks and journals, and
// creates the runs of the fires you ask for, which it does not execute
// (keel scheduler on the journal does; a keel serve holding a SQLite
// journal would not, so firing is refused then: notServed). What local
// adds is in the command line's words.

func (l *local) CreateSchedule(ctx context.Context, req *api.CreateSchedule) (*api.Schedule, error) {
	if err := l.needModel(&req.Run); err != nil {
		return nil, err
	}
	return l.Session.CreateSchedule(ctx, req)
}

func (l *local) CreateTrigger(ctx context.Context, req *api.CreateTrigger) (*api.NewTrigger, error) {
	if err := l.needModel(&req.Run); err != nil {
		return nil, err
	}
	return l.Session.CreateTrigger(ctx, req)
}

// needModel refuses runs with no model where none is configured, as keel
// run does (the service's words are a server's, with no flag or file to
// name).
func (l *local) needModel(run *api.CreateRun) error {
	if run.Model != "" || run.Demo {
		return nil
	}
	_, err := l.a.modelSpec("")
	return err
}

func (l *local) TriggerSchedule(ctx context.Context, ref string, req *api.TriggerSchedule) (*api.Fire, error) {
	if err := l.notServed(ctx, "schedules trigger "+tui.ShellWord(ref)); err != nil {
		return nil, err
	}
	return l.Session.TriggerSchedule(ctx, ref, req)
}

func (l *local) BackfillSchedule(ctx context.Context, ref string, req *api.Backfill) ([]api.Fire, error) {
	if err := l.notServed(ctx, "schedules backfill "+tui.ShellWord(ref)+" ..."); err != nil {
		return nil, err
	}
	return l.Session.BackfillSchedule(ctx, ref, req)
}

// notServed refuses to make a schedule's runs here when a keel serve
// holds the SQLite journal: that server executes only the runs it makes
// itself (it takes up no other process's runs on SQLite), so a run made
// here would wait for nobody. what is the command to give it instead.
func (l *local) notServed(ctx context.Context, what string) error {
	s, ok := l.store.(interface {
		Holder(ctx context.Context, id string) (string, error)
	})
	if !ok || serve.IsPostgres(l.a.dbPath()) {
		return nil
	}
	holder, err := s.Holder(ctx, serve.LeaseID)
	if err != nil {
		return nil
	}
	_, url, ok := strings.Cut(holder, "keel serve at ")
	if !ok {
		return nil // none, or keel scheduler: it takes the runs up
	}
	return usagef("keel serve holds this journal (%s) and executes only the runs it makes: nothing was fired here; fire it through the server: keel --server %s %s", holder, url, what)
}
