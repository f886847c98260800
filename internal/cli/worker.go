package cli

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/cluster"
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
