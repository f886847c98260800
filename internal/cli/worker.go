package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/cluster"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/assemble/builder"
	"github.com/keel-run/keel/internal/realpath"
	"github.com/keel-run/keel/redact"
	"github.com/keel-run/keel/service"
)

// workerFlags are keel worker's own flags (the workflow's settings, which
// must be the same on every worker), beside serve's.
type workerFlags struct {
	pinTimeout, heartbeat time.Duration
	maxSteps              int
}

func (a *app) workerCmd() *cobra.Command {
	f := &serveFlags{worker: true}
	wf := &workerFlags{}
	cmd := a.serveCommand(f)
	cmd.Use = "worker"
	cmd.Short = "Execute runs handed out through Temporal (the cluster shape)"
	cmd.Long = `Worker executes runs that keel serve --temporal hands out, on the same
journal (a PostgreSQL database every server and worker shares) and the same
Temporal service: each run is a Temporal workflow whose activities perform
its next model call or gate-and-tools batch, with the run's sandbox and
workspace pinned to the worker holding it. The journal stays the record: a
worker that dies loses nothing recorded, and the run continues on another
worker (workspaces on storage every worker mounts at the same path) after
--pin-timeout. A run waiting for a person holds no worker.

  keel worker --db postgres://keel@db/keel --temporal temporal:7233 --workspace-root /srv/work

Model, sandbox, policy and limit flags are keel serve's; see docs/deploy.md.`
	cmd.Flags().Lookup("addr").Hidden = true
	cmd.Flags().Lookup("adopt").Hidden = true
	cmd.Flags().Lookup("workers").Usage = "steps this worker executes at once"
	cmd.Flags().DurationVar(&wf.pinTimeout, "pin-timeout", time.Minute, "how long a run waits for the worker holding it before another worker takes it (same on every worker)")
	cmd.Flags().DurationVar(&wf.heartbeat, "step-heartbeat", 20*time.Second, "a step's heartbeat timeout: how soon a dead worker is noticed (same on every worker)")
	cmd.Flags().IntVar(&wf.maxSteps, "max-steps-per-history", 500, "steps after which a run's workflow continues as new (same on every worker)")
	run := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if f.temporal == "" {
			return usagef("keel worker needs --temporal HOST:PORT (the Temporal frontend keel serve --temporal uses)")
		}
		f.driver = cluster.Driver{PinTimeout: wf.pinTimeout, Heartbeat: wf.heartbeat, MaxSteps: wf.maxSteps}
		return run(cmd, args)
	}
	return cmd
}

// dialTemporal connects to the Temporal frontend, logging through logger.
func dialTemporal(ctx context.Context, hostPort string, logger *slog.Logger) (client.Client, error) {
	return cluster.Dial(ctx, hostPort, &client.Options{Logger: tlog.NewStructuredLogger(logger.With("component", "temporal"))})
}

// dispatcher is serve's --temporal: the runs the server would execute are
// handed to the workers.
func (a *app) dispatcher(ctx context.Context, f *serveFlags, logger *slog.Logger) (*cluster.Dispatcher, func(), error) {
	if f.temporal == "" {
		return nil, func() {}, nil
	}
	c, err := dialTemporal(ctx, f.temporal, logger)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(a.stderr, "keel serve: handing runs to keel workers through Temporal at %s\n", f.temporal)
	return cluster.NewDispatcher(c), c.Close, nil
}

// runWorker is keel worker after serve's wiring is set up.
func (a *app) runWorker(ctx context.Context, f *serveFlags, rt *agent.Runtime, b *builder.Builder, active *atomic.Pointer[func() int], logger *slog.Logger) error {
	roots, err := dirs("--workspace-root", f.workspaceRoots, a.cfg.Serve.WorkspaceRoots)
	if err != nil {
		return err
	}
	c, err := dialTemporal(ctx, f.temporal, logger)
	if err != nil {
		return err
	}
	defer c.Close()
	wire := func(ctx context.Context, rc *agent.RunCreated) (*agent.Wiring, io.Closer, error) {
		if rc.Workspace != "" && !underRoot(rc.Workspace, roots) {
			return nil, nil, fmt.Errorf("the run's workspace %s is not under this worker's workspace roots (%s)", rc.Workspace, strings.Join(roots, ", "))
		}
		return b.Wire(ctx, rc)
	}
	w := cluster.NewWorker(rt, &cluster.WorkerOptions{Wire: wire, Principals: service.Principals(identity.NewDirectory(rt.Store(), nil)),
		Driver: f.driver, Slots: f.workers, ControlStream: service.ControlStream, CancelType: service.CancelRequested, Logger: logger})
	holding := w.Holding
	active.Store(&holding)
	fmt.Fprintf(a.stderr, "keel worker: polling Temporal at %s (queues %s and %s) · journal %s · %d slots · workspace roots %s\n",
		f.temporal, cluster.TaskQueue, w.Queue(), redact.DSN(a.dbPath()), f.workers, strings.Join(roots, ", "))
	if err := w.Run(ctx, c); err != nil {
		return err
	}
	fmt.Fprintln(a.stderr, "keel worker: stopped; the steps it executed were paused, and its runs continue on another worker (those between two steps once their next step finds this worker gone: up to about twice --pin-timeout)")
	return nil
}

// underRoot reports whether dir (symbolic links resolved) is one of roots
// or below one. No roots: nothing is.
func underRoot(dir string, roots []string) bool {
	d := realpath.Resolve(dir)
	for _, r := range roots {
		if realpath.Within(d, realpath.Resolve(r)) {
			return true
		}
	}
	return false
}
