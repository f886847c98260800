package cli

import (
	"context"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// The memory commands on the local journal go through the service, as
// the server's routes do, as the journal's owner (who sees every scope).

// memoryService returns a service on the local journal that executes
// nothing. Call done when finished.
func (l *local) memoryService(ctx context.Context) (svc *service.Service, done func(), err error) {
	rt, flush, err := l.a.newRuntime(ctx, l.store, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	svc = service.New(rt, &service.Options{NoExecution: true, Directory: l.directory(), Skills: l.a.skillHost(l.store)})
	return svc, func() { _ = svc.Shutdown(context.WithoutCancel(ctx)); flush() }, nil
}

// viaMemory calls op on that service as the person at the command line.
func viaMemory[T any](ctx context.Context, l *local, by string, op func(svc *service.Service, who *service.Caller) (T, error)) (T, error) {
	svc, done, err := l.memoryService(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	defer done()
	v, err := op(svc, service.Local(l.a.person(by)))
	return v, serviceError(err)
}

func (l *local) Memory(ctx context.Context, p *client.MemoryParams) ([]api.MemoryEntry, error) {
	return viaMemory(ctx, l, "", func(svc *service.Service, who *service.Caller) ([]api.MemoryEntry, error) {
		return svc.Memory(ctx, who, &service.MemoryParams{Scopes: p.Scopes, All: p.All})
	})
}

func (l *local) MemoryEntry(ctx context.Context, id string) (*api.MemoryHistory, error) {
	return viaMemory(ctx, l, "", func(svc *service.Service, who *service.Caller) (*api.MemoryHistory, error) {
		h, err := svc.MemoryEntry(ctx, who, id)
		return &h, err
	})
}

func (l *local) EditMemory(ctx context.Context, id, text, by string) (*api.MemoryEntry, error) {
	return viaMemory(ctx, l, by, func(svc *service.Service, who *service.Caller) (*api.MemoryEntry, error) {
		e, err := svc.EditMemory(ctx, who, id, text)
		return &e, err
	})
}

func (l *local) ForgetMemory(ctx context.Context, id, reason, by string) error {
	_, err := viaMemory(ctx, l, by, func(svc *service.Service, who *service.Caller) (struct{}, error) {
		return struct{}{}, svc.ForgetMemory(ctx, who, id, reason)
	})
	return err
}

// The server form: the client's methods (the token's name is who).

func (r *remote) Memory(ctx context.Context, p *client.MemoryParams) ([]api.MemoryEntry, error) {
	return r.cl.Memory(ctx, p)
}

func (r *remote) MemoryEntry(ctx context.Context, id string) (*api.MemoryHistory, error) {
	return r.cl.MemoryEntry(ctx, id)
}

func (r *remote) EditMemory(ctx context.Context, id, text, _ string) (*api.MemoryEntry, error) {
	return r.cl.EditMemory(ctx, id, text)
}

func (r *remote) ForgetMemory(ctx context.Context, id, reason, _ string) error {
	return r.cl.ForgetMemory(ctx, id, reason)
}
