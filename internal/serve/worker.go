package serve

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/cluster"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/redact"
	"github.com/keel-run/keel/service"
)

// dialTemporal connects to the Temporal frontend, logging through logger.
func dialTemporal(ctx context.Context, hostPort string, logger *slog.Logger) (client.Client, error) {
	return cluster.Dial(ctx, hostPort, &client.Options{Logger: tlog.NewStructuredLogger(logger.With("component", "temporal"))})
}

// Worker is one keel worker: it executes the steps of runs a server
// hands out through Temporal, on the journal every server and worker
// shares.
type Worker struct {
	// Temporal is the Temporal frontend, HOST:PORT.
	Temporal string
	// Roots are the directories runs may work in, or below; a run whose
	// workspace is elsewhere is refused.
	Roots   []string
	Runtime *agent.Runtime
	// Wire builds a run's live parts (the builder's).
	Wire agent.WireFunc
	// Driver are the workflow's settings (the same on every worker);
	// Slots the steps executing at once.
	Driver cluster.Driver
	Slots  int
	// Journal is the journal's address, printed redacted.
	Journal string
	// Metrics, when set, count the runs this worker holds.
	Metrics *Metrics
	Logger  *slog.Logger
	Out     io.Writer
}

// Run polls Temporal until ctx ends.
func (w *Worker) Run(ctx context.Context) error {
	c, err := dialTemporal(ctx, w.Temporal, w.Logger)
	if err != nil {
		return err
	}
	defer c.Close()
	roots := w.Roots
	wire := func(ctx context.Context, rc *agent.RunCreated) (*agent.Wiring, io.Closer, error) {
		if rc.Workspace != "" && !UnderRoot(rc.Workspace, roots) {
			return nil, nil, fmt.Errorf("the run's workspace %s is not under this worker's workspace roots (%s)", rc.Workspace, strings.Join(roots, ", "))
		}
		return w.Wire(ctx, rc)
	}
	cw := cluster.NewWorker(w.Runtime, &cluster.WorkerOptions{Wire: wire, Principals: service.Principals(identity.NewDirectory(w.Runtime.Store(), nil)),
		Driver: w.Driver, Slots: w.Slots, ControlStream: service.ControlStream, CancelType: service.CancelRequested, Logger: w.Logger})
	w.Metrics.setActive(cw.Holding)
	fmt.Fprintf(w.Out, "keel worker: polling Temporal at %s (queues %s and %s) · journal %s · %d slots · workspace roots %s\n",
		w.Temporal, cluster.TaskQueue, cw.Queue(), redact.DSN(w.Journal), w.Slots, strings.Join(roots, ", "))
	if err := cw.Run(ctx, c); err != nil {
		return err
	}
	fmt.Fprintln(w.Out, "keel worker: stopped; the steps it executed were paused, and its runs continue on another worker (those between two steps once their next step finds this worker gone: up to about twice --pin-timeout)")
	return nil
}

// Scheduler is keel scheduler: a service on a local journal that fires
// its schedules and run triggers, sends notifications and executes those
// runs in this process, without the API.
type Scheduler struct {
	// Store is the journal, at the address Journal (printed redacted).
	Store   journal.Store
	Journal string
	Runtime *agent.Runtime
	Service *service.Options
	Out     io.Writer
}

// Run holds the journal's lease and runs the schedules until ctx ends,
// then pauses the runs it executes (they resume at the next start).
func (s *Scheduler) Run(ctx context.Context) error {
	release, err := Lease(ctx, s.Store, s.Journal, "keel scheduler")
	if err != nil {
		return err
	}
	defer release()
	svc := service.New(s.Runtime, s.Service)
	resumed, err := svc.Start(ctx)
	if err != nil {
		return err
	}
	scheds, _ := svc.Scheduler().List(ctx)
	trigs, _ := svc.TriggerHub().List(ctx)
	fmt.Fprintf(s.Out, "keel scheduler: %d schedule(s), %d trigger(s) · journal %s · %d workers · %d notification sink(s)", len(scheds), len(trigs), redact.DSN(s.Journal), s.Service.Workers, len(s.Service.Sinks))
	if len(resumed) > 0 {
		fmt.Fprintf(s.Out, " · resuming %d run(s)", len(resumed))
	}
	fmt.Fprintln(s.Out, " · Ctrl-C stops")
	<-ctx.Done()
	fmt.Fprintln(s.Out, "keel scheduler: stopping; pausing executing runs")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := svc.Shutdown(sctx); err != nil {
		return err
	}
	fmt.Fprintln(s.Out, "keel scheduler: stopped; executing runs were paused and resume at the next start")
	return nil
}
