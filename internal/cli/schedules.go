package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// schedulesBackend is what the schedule commands need of a journal or a
// team server: the service's schedule operations (service/schedules.go).
type schedulesBackend interface {
	CreateSchedule(ctx context.Context, req *api.CreateSchedule) (*api.Schedule, error)
	Schedules(ctx context.Context) ([]api.Schedule, error)
	Schedule(ctx context.Context, ref string) (*api.Schedule, error)
	Fires(ctx context.Context, ref string, p *client.FiresParams) ([]api.Fire, error)
	PauseSchedule(ctx context.Context, ref, reason string) (*api.Schedule, error)
	ResumeSchedule(ctx context.Context, ref string) (*api.Schedule, error)
	TriggerSchedule(ctx context.Context, ref string, req *api.TriggerSchedule) (*api.Fire, error)
	BackfillSchedule(ctx context.Context, ref string, req *api.Backfill) ([]api.Fire, error)
	DeleteSchedule(ctx context.Context, ref string) error
}

func (a *app) schedulesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedules",
		Short: "Start runs on their own: cron and interval schedules",
		Long: `A schedule starts runs of an agent at the times of a cron expression or an
interval, in a time zone. Every nominal fire time gets one record in the
journal with its outcome (fired with its run, caught up, skipped for
overlap, missed outside the catch-up window, failed and why), so a fire
never goes missing without a trace, and never happens twice (several
servers, restarts, clock jumps). See docs/schedules.md.

Schedules fire where something runs them: keel serve (or keel serve
--temporal, on Temporal Schedules), or keel scheduler in the foreground on
your own journal. These commands work on the local journal (--db), or on a
team server with --server.`,
	}
	cmd.AddCommand(a.schedulesCreateCmd(), a.schedulesListCmd(), a.schedulesShowCmd(),
		a.changeCmd("pause", "Pause a schedule (the times while paused are not fires)", true, func(ctx context.Context, b backend, name, reason string) (string, error) {
			s, err := b.PauseSchedule(ctx, name, reason)
			if err != nil {
				return "", err
			}
			return "paused schedule " + s.Name, nil
		}),
		a.changeCmd("resume", "Resume a paused schedule from now", false, func(ctx context.Context, b backend, name, _ string) (string, error) {
			s, err := b.ResumeSchedule(ctx, name)
			if err != nil {
				return "", err
			}
			next := "none"
			if s.Next != nil {
				next = s.Next.Local().Format("2006-01-02 15:04 MST")
			}
			return "resumed schedule " + s.Name + "; next fire " + next, nil
		}),
		a.schedulesTriggerCmd(), a.schedulesBackfillCmd(),
		a.changeCmd("delete", "Delete a schedule (its records stay in the journal; its runs go on)", false, func(ctx context.Context, b backend, name, _ string) (string, error) {
			return "deleted schedule " + name, b.DeleteSchedule(ctx, name)
		}))
	return cmd
}

// unattendedRunFlags are the flags of a schedule's or trigger's runs: the run
// request of POST /v1/runs, with the task as a template.
type unattendedRunFlags struct {
	task, model, workspace, mountPath, agent, onBehalfOf, sandbox, policy, setup, timeout string
	maxSteps                                                                              int
	maxCost                                                                               float64
	network, env, notify, secretEnv                                                       []string
	labels                                                                                map[string]string
}

// names of the run flags, all of which the server form takes.
var unattendedRunFlagNames = []string{"task", "model", "workspace", "mount-path", "agent", "on-behalf-of", "sandbox", "policy", "setup", "timeout", "max-steps", "max-cost",
	"allow-host", "env", "secret-env", "notify", "label"}

func (f *unattendedRunFlags) bind(fs *pflag.FlagSet, what string) {
	fs.StringVar(&f.task, "task", "", "the runs' task, a Go template ("+what+")")
	fs.StringVarP(&f.model, "model", "m", "", "model of the runs (default: the server's, or model in config.toml)")
	fs.StringVar(&f.workspace, "workspace", ".", "directory the runs work in (on the server: under its workspace roots)")
	fs.StringVar(&f.mountPath, "mount-path", "", "where the sandbox shows the workspace (default /workspace)")
	fs.StringVar(&f.agent, "agent", "", "agent the runs execute as (default: your token's only agent; keel-cli locally)")
	fs.StringVar(&f.onBehalfOf, "on-behalf-of", "", "user an assistant agent acts for")
	fs.StringVar(&f.sandbox, "sandbox", "", "sandbox of the runs (default: the server's)")
	fs.StringVar(&f.policy, "policy", "", "policy file of the runs (TOML; default: the server's; another needs an admin token), or default (Keel's)")
	fs.StringVar(&f.setup, "setup", "", "setup script run in the sandbox before each run")
	fs.StringVar(&f.timeout, "timeout", "", "wall time of one execution of a run (\"30m\")")
	fs.IntVar(&f.maxSteps, "max-steps", service.DefaultMaxSteps, "model calls of a run (0: no limit)")
	fs.Float64Var(&f.maxCost, "max-cost", service.DefaultMaxCost, "model cost of a run in US dollars (0: no limit)")
	fs.StringArrayVar(&f.network, "allow-host", nil, "host the runs' commands may reach (repeatable)")
	fs.StringArrayVar(&f.env, "env", nil, "KEY=VALUE in the runs' environment (repeatable; journaled: for a secret use --secret-env)")
	fs.StringArrayVar(&f.secretEnv, "secret-env", nil, "NAME of a variable of the environment of the process that fires the schedule (keel serve or keel scheduler, which must offer it with --secret-env NAME) passed into the runs as a secret (repeatable)")
	fs.StringArrayVar(&f.notify, "notify", nil, "notification sink told when a run waits for a person or fails (repeatable; [notify.sinks] of the server's config.toml)")
	fs.StringToStringVar(&f.labels, "label", nil, "label of the runs, KEY=VALUE (repeatable)")
}

// request returns the runs' request.
func (f *unattendedRunFlags) request(fs *pflag.FlagSet) (api.CreateRun, error) {
	if strings.TrimSpace(f.task) == "" {
		return api.CreateRun{}, usagef("--task: what should the runs do?")
	}
	r := api.CreateRun{Task: f.task, Model: f.model, MountPath: f.mountPath, Agent: f.agent, OnBehalfOf: f.onBehalfOf, Sandbox: f.sandbox, Setup: f.setup,
		Network: f.network, Env: f.env, SecretEnv: f.secretEnv, Labels: f.labels}
	ws, err := filepath.Abs(f.workspace)
	if err != nil {
		return r, usagef("--workspace: %v", err)
	}
	r.Workspace = ws
	switch f.policy {
	case "", "default", "server":
		r.Policy = f.policy
	default:
		b, err := os.ReadFile(f.policy)
		if err != nil {
			return r, usagef("--policy: %v", err)
		}
		// Named as keel run --policy names it: refusals name the file.
		if r.PolicyFile, err = filepath.Abs(f.policy); err != nil {
			return r, usagef("--policy: %v", err)
		}
		r.Policy = string(b)
	}
	if fs.Changed("max-steps") {
		r.Limits.MaxSteps = &f.maxSteps
	}
	if fs.Changed("max-cost") {
		r.Limits.MaxCost = &f.maxCost
	}
	r.Limits.Timeout = f.timeout
	return r, nil
}

func (a *app) schedulesCreateCmd() *cobra.Command {
	var rf unattendedRunFlags
	var p api.CreateSchedule
	var start, end string
	cmd := &cobra.Command{
		Use:   "create NAME (--cron 'MIN HOUR DOM MON DOW' | --every DURATION) --task TEMPLATE [flags]",
		Short: "Create a schedule",
		Long: `Create a schedule: when (--cron or --every, in --time-zone), what a fire does
while a run of the schedule has not ended (--overlap: skip, buffer_one,
buffer_all, cancel_other, terminate_other, allow_all), how late a fire may
still start (--catchup-window), and the runs (--task, --model, --workspace,
--agent...). The task is a Go template: {{.Time}} is the fire's nominal
time in the schedule's zone, {{.Previous}} the previous fire's, {{.Schedule}}
its name and {{.Source}} schedule, manual or backfill.

Runs that could stop to ask a person (the policy asks about some calls, as
Keel's default policy does) need somebody to tell: --notify SINK, or a policy
whose [approval] gives a timeout and a default decision.

  keel schedules create nightly --cron '0 3 * * *' --time-zone Europe/Berlin \
      --task 'summarise the issues opened since {{.Previous}}' --notify oncall`,
		Args:        cobra.ExactArgs(1),
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, args []string) error {
			run, err := rf.request(cmd.Flags())
			if err != nil {
				return err
			}
			req := p
			req.Name, req.Run, req.Notify = args[0], run, rf.notify
			for _, t := range []struct {
				flag, text string
				into       **time.Time
			}{{"start", start, &req.Start}, {"end", end, &req.End}} {
				if t.text == "" {
					continue
				}
				v, err := time.Parse(time.RFC3339, t.text)
				if err != nil {
					return usagef("--%s %q: want a time such as 2026-12-24T09:00:00+01:00", t.flag, t.text)
				}
				*t.into = &v
			}
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				s, err := b.CreateSchedule(ctx, &req)
				if err != nil {
					return err
				}
				fmt.Fprintf(tui.Esc(a.stdout), "created schedule %s (%s)\n", s.Name, s.ID)
				tui.ScheduleWarnings(a.stdout, s)
				return nil
			}, append([]string{"cron", "every", "offset", "time-zone", "jitter", "start", "end", "overlap", "catchup-window", "pause-after-failures"}, unattendedRunFlagNames...)...)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&p.Cron, "cron", "", "five cron fields ('0 9 * * MON-FRI') or @hourly, @daily, @weekly, @monthly, @yearly")
	fs.StringVar(&p.Every, "every", "", "an interval instead of --cron (\"1h\": at every multiple since the Unix epoch)")
	fs.StringVar(&p.Offset, "offset", "", "shift of an interval's fires (--every 1h --offset 15m: at :15)")
	fs.StringVar(&p.TimeZone, "time-zone", "", "IANA time zone of the cron fields (default UTC)")
	fs.StringVar(&p.Jitter, "jitter", "", "delay each fire by a deterministic share of this")
	fs.StringVar(&start, "start", "", "no fire before this time (RFC 3339; default: now)")
	fs.StringVar(&end, "end", "", "no fire after this time (RFC 3339)")
	fs.StringVar(&p.Overlap, "overlap", "", "skip (default), buffer_one, buffer_all, cancel_other, terminate_other or allow_all")
	fs.StringVar(&p.CatchupWindow, "catchup-window", "", "how late a fire may be found and still start a run (default a year)")
	fs.IntVar(&p.PauseAfterFailures, "pause-after-failures", 0, "pause after this many consecutive failed fires (0: never)")
	rf.bind(fs, "{{.Time}}, {{.Previous}}, {{.Schedule}}, {{.Source}}")
	return cmd
}

func (a *app) schedulesListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:         "list",
		Short:       "List schedules: next fire, last outcome, counts, credential warnings",
		Args:        cobra.NoArgs,
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				list, err := b.Schedules(ctx)
				if err != nil {
					return err
				}
				return tui.Schedules(a.stdout, list, asJSON)
			}, "json")
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON lines")
	return cmd
}

func (a *app) schedulesShowCmd() *cobra.Command {
	var asJSON bool
	var p client.FiresParams
	cmd := &cobra.Command{
		Use:         "show NAME",
		Short:       "Show a schedule and its fire records (one per nominal fire time)",
		Args:        cobra.ExactArgs(1),
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				s, err := b.Schedule(ctx, args[0])
				if err != nil {
					return err
				}
				fires, err := b.Fires(ctx, s.ID, &p)
				if err != nil {
					return err
				}
				if asJSON {
					enc := json.NewEncoder(a.stdout)
					if err := enc.Encode(s); err != nil {
						return err
					}
					for _, f := range fires {
						if err := enc.Encode(f); err != nil {
							return err
						}
					}
					return nil
				}
				tui.Schedule(a.stdout, s)
				return tui.Fires(a.stdout, fires)
			}, "json", "last", "outcome")
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "the schedule, then each record, as JSON lines")
	cmd.Flags().IntVar(&p.Last, "last", 20, "the newest N records (0: all)")
	cmd.Flags().StringVar(&p.Outcome, "outcome", "", "only records with this outcome (fired, caught_up, skipped, missed, buffered, failed)")
	return cmd
}

func (a *app) schedulesTriggerCmd() *cobra.Command {
	var overlap string
	cmd := &cobra.Command{
		Use:   "trigger NAME",
		Short: "Fire a schedule now (its overlap policy applies unless --overlap)",
		Long: `Fire a schedule now, outside its spec: the fire is recorded (key manual:...,
with your name) and its run is created with the rights of the schedule's
creator. On a team server (--server) the server executes it; on the local
journal, keel scheduler on the journal does. While keel serve holds a
local SQLite journal, fire through it (keel --server URL schedules
trigger NAME): it executes only the runs it makes, so a local fire is
refused.`,
		Args:        cobra.ExactArgs(1),
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				f, err := b.TriggerSchedule(ctx, args[0], &api.TriggerSchedule{Overlap: overlap})
				if err != nil {
					return err
				}
				if err := tui.Fires(a.stdout, []api.Fire{*f}); err != nil {
					return err
				}
				if _, ok := b.(*local); ok && f.RunID != "" && f.Outcome == "fired" {
					// Nothing in this process executes it (a server does).
					fmt.Fprintf(a.stderr, "keel: run %s is queued: keel scheduler on this journal executes it (or %s runs resume %s)\n", f.RunID, a.keelFor(), f.RunID)
				}
				return nil
			}, "overlap")
		},
	}
	cmd.Flags().StringVar(&overlap, "overlap", "", "overlap policy of this fire (default: the schedule's)")
	return cmd
}

func (a *app) schedulesBackfillCmd() *cobra.Command {
	var from, to, overlap string
	cmd := &cobra.Command{
		Use:   "backfill NAME --from TIME --to TIME",
		Short: "Fire a schedule at its nominal times in a past range, as if it had run then",
		Long: `Fire a schedule at each of its nominal times after --from and up to --to
(RFC 3339 times), as if it had run then: each gets a record (key
backfill:...) and a run, one after the other by default (--overlap
buffer_all). The catch-up window does not apply; at most 10,000 fires.`,
		Args:        cobra.ExactArgs(1),
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.Backfill{Overlap: overlap}
			for _, t := range []struct {
				flag, text string
				into       *time.Time
			}{{"from", from, &req.From}, {"to", to, &req.To}} {
				v, err := time.Parse(time.RFC3339, t.text)
				if err != nil {
					return usagef("--%s %q: want a time such as 2026-12-01T00:00:00Z", t.flag, t.text)
				}
				*t.into = v
			}
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				fires, err := b.BackfillSchedule(ctx, args[0], &req)
				if err != nil {
					return err
				}
				return tui.Fires(a.stdout, fires)
			}, "from", "to", "overlap")
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "start of the range (exclusive)")
	cmd.Flags().StringVar(&to, "to", "", "end of the range (inclusive)")
	cmd.Flags().StringVar(&overlap, "overlap", "", "overlap policy of the backfill (default buffer_all)")
	return cmd
}

// changeCmd is the command VERB NAME that changes one schedule or
// trigger: do does it and says what it did. With reason, it takes
// --reason, which do gets.
func (a *app) changeCmd(verb, short string, reason bool, do func(ctx context.Context, b backend, name, reason string) (string, error)) *cobra.Command {
	var why string
	var remote []string
	cmd := &cobra.Command{
		Use:         verb + " NAME",
		Short:       short,
		Args:        cobra.ExactArgs(1),
		Annotations: bothForms,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				done, err := do(ctx, b, args[0], why)
				if err != nil {
					return err
				}
				fmt.Fprintln(tui.Esc(a.stdout), done)
				return nil
			}, remote...)
		},
	}
	if reason {
		cmd.Flags().StringVar(&why, "reason", "", "why (recorded)")
		remote = []string{"reason"}
	}
	return cmd
}
