package cli

import (
	"context"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/journal"
)

// A command that works both on the local journal and, with --server, on
// a team server is written once, against a small interface of its
// command group (approvalsBackend, agentsBackend, ...). Each interface
// has two implementations:
//
//   - local (GROUP_local.go): the journal database, in this process;
//   - remote (GROUP_remote.go): the team server, through the Go client.
//
// The command reads its flags, calls a.open, uses the group's methods
// and prints the result with one printing function, so local and remote
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
	// Close releases the journal (local) or nothing (remote).
	Close() error
}

// local is the backend of the journal database named by --db.
type local struct {
	a     *app
	store journal.Store
}

func (l *local) Close() error { return l.store.Close() }

// remote is the backend of the team server named by --server.
type remote struct {
	a  *app
	cl *client.Client
}

func (r *remote) Close() error { return nil }

// open returns the backend of this invocation: the team server when one
// is named (--server or KEEL_SERVER), else the local journal. Before the
// remote one, it refuses the flags of cmd set on the command line that
// are not in remoteFlags: they configure this process, and the server's
// own settings apply.
func (a *app) open(ctx context.Context, cmd *cobra.Command, remoteFlags ...string) (backend, error) {
	if a.serverURL() == "" {
		store, err := a.openStore(ctx)
		if err != nil {
			return nil, err
		}
		return &local{a: a, store: store}, nil
	}
	if err := only(cmd, remoteFlags...); err != nil {
		return nil, err
	}
	cl, err := a.apiClient()
	if err != nil {
		return nil, err
	}
	return &remote{a: a, cl: cl}, nil
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
	if len(bad) > 0 {
		return usagef("with --server, %s cannot be used: the server's own settings apply", strings.Join(bad, ", "))
	}
	return nil
}

// withBackend calls fn with the backend of cmd (see open, with
// remoteFlags) and closes it.
func (a *app) withBackend(cmd *cobra.Command, fn func(ctx context.Context, b backend) error, remoteFlags ...string) error {
	ctx := cmd.Context()
	b, err := a.open(ctx, cmd, remoteFlags...)
	if err != nil {
		return err
	}
	defer b.Close()
	return fn(ctx, b)
}
