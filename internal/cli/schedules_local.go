package cli

import (
	"context"
	"log/slog"
	"strings"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/internal/serve"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// The schedule and trigger commands on the local journal go through the
// service, as the server's routes do, as the journal's owner: it checks
// and journals, and creates the runs of the fires you ask for, which it
// does not execute (keel scheduler on the journal does; a keel serve
// holding a SQLite journal would not, so firing is refused then:
// notServed).

// unattendedService returns that service. Call done when finished.
func (l *local) unattendedService(ctx context.Context) (svc *service.Service, done func(), err error) {
	rt, flush, err := l.a.newRuntime(ctx, l.store, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	logger := slog.New(slog.NewTextHandler(l.a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	o := &service.Options{Builder: newBuilder(l.a, l.store, logger), NoExecution: true, Directory: l.directory(), Logger: logger,
		WorkspaceRoots: l.a.cfg.Serve.WorkspaceRoots}
	if m := l.a.cfg.Model; m != "" {
		if s, err := model.ParseSpec(m); err == nil {
			o.DefaultModel = s.String()
		}
	}
	if err := l.a.unattended(l.store, o, false); err != nil {
		flush()
		return nil, nil, err
	}
	svc = service.New(rt, o)
	return svc, func() { _ = svc.Shutdown(context.WithoutCancel(ctx)); flush() }, nil
}

// viaService calls op on the local journal's service as the person at
// the command line, and reports its refusals as the command line does.
func viaService[T any](ctx context.Context, l *local, op func(svc *service.Service, who *service.Caller) (T, error)) (T, error) {
	svc, done, err := l.unattendedService(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	defer done()
	v, err := op(svc, service.Local(l.a.person("")))
	return v, serviceError(err)
}

func (l *local) CreateSchedule(ctx context.Context, req *api.CreateSchedule) (*api.Schedule, error) {
	if req.Run.Model == "" && !req.Run.Demo {
		// The service's words are a server's ("this server has no
		// default model"): say what keel run says.
		if _, err := l.a.modelSpec(""); err != nil {
			return nil, err
		}
	}
	return viaService(ctx, l, func(svc *service.Service, who *service.Caller) (*api.Schedule, error) {
		s, err := svc.CreateSchedule(ctx, who, req)
		return &s, err
	})
}

func (l *local) Schedules(ctx context.Context) ([]api.Schedule, error) {
	return viaService(ctx, l, func(svc *service.Service, who *service.Caller) ([]api.Schedule, error) {
		return svc.Schedules(ctx, who)
	})
}

func (l *local) Schedule(ctx context.Context, ref string) (*api.Schedule, error) {
	return viaService(ctx, l, func(svc *service.Service, who *service.Caller) (*api.Schedule, error) {
		s, err := svc.Schedule(ctx, who, ref)
		return &s, err
	})
}

func (l *local) Fires(ctx context.Context, ref string, p *client.FiresParams) ([]api.Fire, error) {
	return viaService(ctx, l, func(svc *service.Service, who *service.Caller) ([]api.Fire, error) {
		return svc.Fires(ctx, who, ref, &service.FiresParams{Outcome: p.Outcome, Last: p.Last})
	})
}

func (l *local) PauseSchedule(ctx context.Context, ref, reason string) (*api.Schedule, error) {
	return viaService(ctx, l, func(svc *service.Service, who *service.Caller) (*api.Schedule, error) {
		s, err := svc.PauseSchedule(ctx, who, ref, reason)
		return &s, err
	})
}

func (l *local) ResumeSchedule(ctx context.Context, ref string) (*api.Schedule, error) {
	return viaService(ctx, l, func(svc *service.Service, who *service.Caller) (*api.Schedule, error) {
		s, err := svc.ResumeSchedule(ctx, who, ref)
		return &s, err
	})
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

func (l *local) TriggerSchedule(ctx context.Context, ref string, req *api.TriggerSchedule) (*api.Fire, error) {
	if err := l.notServed(ctx, "schedules trigger "+tui.ShellWord(ref)); err != nil {
		return nil, err
	}
	return viaService(ctx, l, func(svc *service.Service, who *service.Caller) (*api.Fire, error) {
		f, err := svc.TriggerSchedule(ctx, who, ref, req)
		return &f, err
	})
}

func (l *local) BackfillSchedule(ctx context.Context, ref string, req *api.Backfill) ([]api.Fire, error) {
	if err := l.notServed(ctx, "schedules backfill "+tui.ShellWord(ref)+" ..."); err != nil {
		return nil, err
	}
	return viaService(ctx, l, func(svc *service.Service, who *service.Caller) ([]api.Fire, error) {
		return svc.BackfillSchedule(ctx, who, ref, req)
	})
}

func (l *local) DeleteSchedule(ctx context.Context, ref string) error {
	_, err := viaService(ctx, l, func(svc *service.Service, who *service.Caller) (struct{}, error) {
		return struct{}{}, svc.DeleteSchedule(ctx, who, ref)
	})
	return err
}

func (l *local) CreateTrigger(ctx context.Context, req *api.CreateTrigger) (*api.NewTrigger, error) {
	if req.Run.Model == "" && !req.Run.Demo {
		if _, err := l.a.modelSpec(""); err != nil {
			return nil, err
		}
	}
	return viaService(ctx, l, func(svc *service.Service, who *service.Caller) (*api.NewTrigger, error) {
		t, err := svc.CreateTrigger(ctx, who, req)
		return &t, err
	})
}

func (l *local) Triggers(ctx context.Context) ([]api.Trigger, error) {
	return viaService(ctx, l, func(svc *service.Service, who *service.Caller) ([]api.Trigger, error) { return svc.Triggers(ctx, who) })
}

func (l *local) Trigger(ctx context.Context, ref string) (*api.Trigger, error) {
	return viaService(ctx, l, func(svc *service.Service, who *service.Caller) (*api.Trigger, error) {
		t, err := svc.Trigger(ctx, who, ref)
		return &t, err
	})
}

func (l *local) Deliveries(ctx context.Context, ref string, last int) ([]api.Delivery, error) {
	return viaService(ctx, l, func(svc *service.Service, who *service.Caller) ([]api.Delivery, error) {
		return svc.Deliveries(ctx, who, ref, last)
	})
}

func (l *local) PauseTrigger(ctx context.Context, ref, reason string) (*api.Trigger, error) {
	return viaService(ctx, l, func(svc *service.Service, who *service.Caller) (*api.Trigger, error) {
		t, err := svc.PauseTrigger(ctx, who, ref, reason)
		return &t, err
	})
}

func (l *local) ResumeTrigger(ctx context.Context, ref string) (*api.Trigger, error) {
	return viaService(ctx, l, func(svc *service.Service, who *service.Caller) (*api.Trigger, error) {
		t, err := svc.ResumeTrigger(ctx, who, ref)
		return &t, err
	})
}

func (l *local) DeleteTrigger(ctx context.Context, ref string) error {
	_, err := viaService(ctx, l, func(svc *service.Service, who *service.Caller) (struct{}, error) {
		return struct{}{}, svc.DeleteTrigger(ctx, who, ref)
	})
	return err
}
