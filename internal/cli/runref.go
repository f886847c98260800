package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/internal/realpath"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// A command whose arguments name runs says which in its annotations:
// runArgs "1" (the first argument), "*" (every argument) or "journals"
// (every argument, a run or a system stream named whole, as an audit
// takes them: service.ResolveJournal). The root's pre-run hook replaces
// each run reference with the whole id it names (resolveRunArgs), so
// every such command takes what `keel runs list` and the web UI show.
const runArgsKey = "keel.runArgs"

var (
	firstArgIsRun   = map[string]string{runArgsKey: "1"}
	argsAreRuns     = map[string]string{runArgsKey: "*"}
	argsAreJournals = map[string]string{runArgsKey: "journals"}
)

// lastRef is the RUN argument naming the newest run in this workspace
// (the current directory, or a directory it is in).
const lastRef = service.LastRef

// runRefHelp is what a command's help says about its RUN arguments.
const runRefHelp = "RUN is a run id, a unique prefix of one (at least 4 characters; also the web UI's short form 01m9…whbcbs), or \"last\": the newest run in this workspace (the current directory)."

// annotated returns annotations with the runArgs entry of runs added.
func annotated(runs, annotations map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range annotations {
		out[k] = v
	}
	for k, v := range runs {
		out[k] = v
	}
	return out
}

// resolveRunArgs replaces, in place, the arguments of cmd that name runs
// with the whole ids they name, on the backend of this invocation (the
// local journal, or the server with --server, which resolves prefixes
// itself with the same rule: service.ResolveRun).
func (a *app) resolveRunArgs(cmd *cobra.Command, args []string) error {
	which := cmd.Annotations[runArgsKey]
	if which == "" || len(args) == 0 {
		return nil
	}
	n := len(args)
	if which == "1" {
		n = 1
	}
	ctx := cmd.Context()
	var b runRefBackend
	if a.serverURL() == "" {
		store, err := a.openStore(ctx)
		if err != nil {
			return err
		}
		defer store.Close()
		b = &local{a: a, store: store}
	} else {
		if cmd.Annotations[serverForm] == "" {
			return nil // the command has no server form, and says so
		}
		cl, err := a.apiClient()
		if err != nil {
			return err
		}
		b = &remote{Client: cl, a: a}
	}
	for i := range n {
		if which == "journals" && journal.IsSystem(args[i]) {
			continue // the service finds it (service.ResolveJournal)
		}
		id, err := resolveRunRef(ctx, b, args[i])
		if errors.Is(err, errRunNotFound) {
			// The command reports it (after its own flags), and Main
			// says it as "no run" (notFound).
			a.missingRuns = append(a.missingRuns, args[i])
			continue
		}
		if err != nil {
			return err
		}
		args[i] = id
	}
	return nil
}

// runFlag resolves ref, the value of a --run flag, as a RUN argument
// is resolved: a prefix, the web UI's short form, "last"; one that
// names no run is reported as a RUN argument's is (Main says "no run").
func (a *app) runFlag(ctx context.Context, b runRefBackend, ref string) (string, error) {
	id, err := resolveRunRef(ctx, b, ref)
	if errors.Is(err, errRunNotFound) {
		a.missingRuns = append(a.missingRuns, ref)
		return "", fmt.Errorf("%s: %w", ref, errRunNotFound)
	}
	return id, err
}

// errRunNotFound is resolveRunRef's error for a run reference that
// names no run (and is long enough to be a prefix).
var errRunNotFound = errors.New("no such run")

// runRefBackend resolves run references (runsBackend's part).
type runRefBackend interface {
	ResolveRun(ctx context.Context, ref string) (string, error)
	LastRun(ctx context.Context, dir string) (string, error)
}

// resolveRunRef returns the run id ref names (service.ResolveRun, every
// front end's rule), or a usage error saying why it names none.
func resolveRunRef(ctx context.Context, b runRefBackend, ref string) (string, error) {
	if ref == lastRef {
		dir, err := os.Getwd()
		if err != nil {
			return "", err
		}
		return b.LastRun(ctx, realpath.Resolve(dir))
	}
	id, err := b.ResolveRun(ctx, ref)
	switch code := errorCode(err); {
	case code == api.CodeNotFound && len(ref) > service.MaxRunRef:
		return "", usagef("%v", err)
	case code == api.CodeInvalidRequest || code == api.CodeNotFound && len(strings.TrimSpace(ref)) < journal.MinRunPrefix:
		return "", usagef("%v (%s)", err, runRefHelp)
	case code == api.CodeNotFound:
		return ref, errRunNotFound
	}
	return id, err
}

// noRunHere is LastRun's error when no run worked in a directory: the
// service's refusal, with how keel (this invocation's) lists every run.
func noRunHere(err error, keel string) error {
	if se := (*service.Error)(nil); errors.As(err, &se) {
		err = errors.New(se.Message)
	}
	return usagef("%v: `%s runs list` shows every run, by id", err, keel)
}

func (l *local) ResolveRun(ctx context.Context, ref string) (string, error) {
	return service.ResolveRun(ctx, l.store, ref, "")
}

// LastRun is the newest run that worked in dir (service.LastRun).
func (l *local) LastRun(ctx context.Context, dir string) (string, error) {
	id, err := service.LastRun(ctx, l.store, dir)
	if errorCode(err) == api.CodeNotFound {
		return "", noRunHere(err, l.a.keelFor())
	}
	return id, err
}

// ResolveRun asks the server, which resolves ref by the same rule.
func (r *remote) ResolveRun(ctx context.Context, ref string) (string, error) {
	run, err := r.Client.Run(ctx, ref)
	if err != nil {
		return "", err
	}
	return run.ID, nil
}

// LastRun lists the server's runs, newest first, for one whose
// workspace is dir (a server on this machine; service.LastIn).
func (r *remote) LastRun(ctx context.Context, dir string) (string, error) {
	runs, err := r.Client.Runs(ctx, nil)
	if err != nil {
		return "", err
	}
	id, err := service.LastIn(runs, dir)
	if err != nil {
		return "", noRunHere(err, r.a.keelFor())
	}
	return id, nil
}
