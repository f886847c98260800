package cli

import (
	"context"
	"log/slog"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/internal/evalrun"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/service"
)

// A command that works both on the local journal and, with --server, on
// a team server is written once, against a small interface of its
// command group (approvalsBackend, agentsBackend, ...). Each interface
// has two implementations:
//
//   - local: the service (package service) on the journal database, in
//     this process, as the person at the command line (a
//     *service.Session);
//   - remote: the team server, through the Go client (*client.Client).
//
// The session and the client have the same signatures, so a group made
// of their operations needs no code here; what a group adds (a check in
// the command line's words, an operation of this process) is a method
// of local or remote (GROUP_local.go, GROUP_remote.go). The command
// reads its flags, calls a.open, uses the group's methods and prints the
// result with one printing function of internal/tui, so local and remote
// output cannot drift. backend is the union of the group interfaces: a
// group that is added to it must be implemented by both sides, or the
// package does not compile. docs/architecture.md ("The command line")
// describes how to add a command.
type backend interface {
	approvalsBackend
	agentsBackend
	tokensBackend
	auditBackend
	runsBackend
	execBackend
	rewindBackend
	inputsBackend
	schedulesBackend
	triggersBackend
	memoryBackend
	skillsBackend
	costBackend
	evalsBackend
	// Close releases the journal (local) or nothing (remote).
	Close() error
}

// local is the backend of the journal database named by --db: the
// service on it, which executes nothing (a command that continues a run
// does so in this process).
type local struct {
	*service.Session
	a     *app
	store journal.Store
	// done shuts the service down (nil: there is none).
	done func()
}

func (l *local) Close() error {
	if l.done != nil {
		l.done()
	}
	return l.store.Close()
}

// remote is the backend of the team server named by --server.
type remote struct {
	*client.Client
	a *app
	// elsewhere is the last decision's api.Run.Elsewhere.
	elsewhere string
}

func (r *remote) Close() error { return nil }

// open returns the backend of this invocation: the team server when one
// is named (--server or KEEL_SERVER), else the local journal. Before the
// remote one, it refuses the flags of cmd set on the command line that
// are not in remoteFlags: they configure this process, and the server's
// own settings apply.
func (a *app) open(ctx context.Context, cmd *cobra.Command, remoteFlags ...string) (backend, error) {
	return a.openAs(ctx, cmd, "", remoteFlags...)
}

// openAs is open for a command that acts as person by (its --by flag;
// "": the person at the command line). A server records its token's
// person instead.
func (a *app) openAs(ctx context.Context, cmd *cobra.Command, by string, remoteFlags ...string) (backend, error) {
	if a.serverURL() == "" {
		store, err := a.openStore(ctx)
		if err != nil {
			return nil, err
		}
		l := &local{a: a, store: store}
		if err := l.serve(ctx, by); err != nil {
			store.Close()
			return nil, err
		}
		return l, nil
	}
	if err := only(cmd, remoteFlags...); err != nil {
		return nil, err
	}
	cl, err := a.apiClient()
	if err != nil {
		return nil, err
	}
	return &remote{Client: cl, a: a}, nil
}

// serve starts the service on the local journal, as the journal's owner
// (by), as the server's routes do: it checks and journals; it creates
// the runs of the fires asked for, which it does not execute (keel
// scheduler on the journal does).
func (l *local) serve(ctx context.Context, by string) error {
	a := l.a
	rt, flush, err := a.newRuntime(ctx, l.store, nil, nil)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	o := &service.Options{Builder: newBuilder(a, l.store, logger), NoExecution: true, Directory: l.directory(), Logger: logger,
		WorkspaceRoots: a.cfg.Serve.WorkspaceRoots, Skills: a.skillHost(l.store), Evals: evalrun.Host{Home: a.home}}
	if m := a.cfg.Model; m != "" {
		if s, err := model.ParseSpec(m); err == nil {
			o.DefaultModel = s.String()
		}
	}
	if err := a.unattended(l.store, o, false); err != nil {
		flush()
		return err
	}
	svc := service.New(rt, o)
	l.Session = svc.For(service.Local(a.person(by)))
	l.done = func() { _ = svc.Shutdown(context.WithoutCancel(ctx)); flush() }
	return nil
}

// session calls fn with the local backend of store, which the caller
// holds and closes, acting as person by: for the operations of a command
// that holds the journal already (an execution's decisions at the
// terminal, keel chat's /undo).
func (a *app) session(ctx context.Context, store journal.Store, by string, fn func(l *local) error) error {
	l := &local{a: a, store: store}
	if err := l.serve(ctx, by); err != nil {
		return err
	}
	defer l.done()
	return fn(l)
}

// only refuses flags set on the command line that the server form does
// not support: they configure this process, and the server's settings
// apply.
func only(cmd *cobra.Command, supported ...string) error {
	var bad []string
	cmd.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
		if f.Changed && !slices.Contains(supported, f.Name) {
			bad = append(bad, "--"+f.Name)
		}
	})
	if slices.Contains(bad, "--by") {
		return usagef("with --server, --by cannot be used: the server records the person your token names")
	}
	if len(bad) > 0 {
		return usagef("with --server, %s cannot be used: the server's own settings apply", strings.Join(bad, ", "))
	}
	return nil
}

// withBackend calls fn with the backend of cmd (see open, with
// remoteFlags) and closes it. The refusals of the local service and of a
// server are reported alike, by Main (failure).
func (a *app) withBackend(cmd *cobra.Command, fn func(ctx context.Context, b backend) error, remoteFlags ...string) error {
	return a.withBackendAs(cmd, "", fn, remoteFlags...)
}

// withBackendAs is withBackend acting as person by (see openAs).
func (a *app) withBackendAs(cmd *cobra.Command, by string, fn func(ctx context.Context, b backend) error, remoteFlags ...string) error {
	ctx := cmd.Context()
	b, err := a.openAs(ctx, cmd, by, remoteFlags...)
	if err != nil {
		return err
	}
	defer b.Close()
	return fn(ctx, b)
}
