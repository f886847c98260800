package cli

import (
	"context"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/serve"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/service"
)

func (a *app) schedulerCmd() *cobra.Command {
	var workers int
	var logLevel string
	var secretEnv []string
	cmd := &cobra.Command{
		Use:   "scheduler",
		Short: "Run the schedules, run triggers and notifications of your journal, in the foreground",
		Long: `Scheduler is keel serve without the API and the web UI, for keel run users:
it fires the schedules of your local journal (keel schedules create), starts
the runs of run triggers, sends notifications, and executes those runs in
this process until you stop it (Ctrl-C pauses executing runs cleanly; the
next start resumes them, and catches up the fires it missed by each
schedule's catch-up window and overlap policy). It also executes runs that
keel schedules trigger or backfill created, and, like keel serve, resumes
runs a stopped process left running. Webhook triggers need keel serve: they
are reached over HTTP.

A SQLite journal takes one keel scheduler or keel serve at a time.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.server != "" {
				return usagef("keel scheduler runs the schedules of a local journal; a team server runs its own")
			}
			if workers < 1 {
				return usagef("--workers %d: want at least 1", workers)
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return usagef("--log-level %q: want debug, info, warn or error", logLevel)
			}
			if err := a.checkSecretEnv(secretEnv); err != nil {
				return err
			}
			return a.runScheduler(cmd.Context(), workers, level, secretEnv)
		},
	}
	cmd.Flags().IntVar(&workers, "workers", 2, "runs executing at once; more wait in a queue")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.Flags().StringArrayVar(&secretEnv, "secret-env", nil, "NAME of a variable of this environment that schedules' runs may ask for as a secret (repeatable; docs/security.md)")
	return cmd
}

// runScheduler is keel scheduler: a service on the local journal that
// executes runs here, with its schedules, triggers and notifications,
// until ctx ends.
func (a *app) runScheduler(ctx context.Context, workers int, level slog.Level, secretEnv []string) error {
	logger := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level}))
	store, err := a.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	rt, flush, err := a.newRuntime(ctx, store, &agent.RuntimeOptions{Logger: logger}, nil)
	if err != nil {
		return err
	}
	defer flush()
	// Runs created by keel schedules trigger, backfill (or a crash) are
	// taken up after they were quiet this long.
	o := &service.Options{Builder: newBuilder(a, store, logger), Workers: workers, Logger: logger, Adopt: 5 * time.Second, OwnerOnly: true,
		WorkspaceRoots: a.cfg.Serve.WorkspaceRoots, SecretEnv: secretEnv}
	if m := a.cfg.Model; m != "" {
		s, err := model.ParseSpec(m)
		if err != nil {
			return usagef("model in config.toml: %v", err)
		}
		o.DefaultModel = s.String()
	}
	if err := a.unattended(store, o, true); err != nil {
		return err
	}
	return (&serve.Scheduler{Store: store, Journal: a.dbPath(), Runtime: rt, Service: o, Out: a.stderr}).Run(ctx)
}
