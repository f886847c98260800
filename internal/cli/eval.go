package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/eval"
	"github.com/keel-run/keel/internal/evalrun"
	"github.com/keel-run/keel/internal/knobs"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
	"github.com/keel-run/keel/visible"
)

func (a *app) evalCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "eval", Short: "Evaluate agents on suites of cases: run trials, freeze runs into cases, compare configurations"}
	cmd.AddCommand(a.evalRunCmd(), a.evalListCmd(), a.evalCompareCmd(), a.evalReportCmd(), a.evalFreezeCmd())
	return cmd
}

// evalsBackend is keel eval list's backend (see backend.go): the
// evaluations of this machine's Keel home or, with --server, the
// server's (an admin's). The other eval commands run or read files here.
type evalsBackend interface {
	Evals(ctx context.Context) (*api.EvalList, error)
}

// clientEvalReport refuses keel eval report with --server, saying where
// the server's report is: the command reads this machine's results.
func (a *app) clientEvalReport(_ *cobra.Command, args []string) error {
	return usagef("keel eval report is not supported with --server (or KEEL_SERVER): it reads this machine's evaluations ($KEEL_HOME/evals, or a result.json file); the server's report of %[1]s is its web UI's page /ui/evals/%[1]s and GET /v1/evals/%[1]s, and keel --server URL eval list lists its evaluations", visible.String(args[0]))
}

func (a *app) evalListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{Use: "list", Annotations: bothForms, Args: cobra.NoArgs,
		Short: "List the evaluations kept ($KEEL_HOME/evals; with --server, the server's), newest first",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				list, err := b.Evals(ctx)
				if err != nil {
					return err
				}
				return tui.Evals(a.stdout, list, asJSON, time.Now())
			}, "json")
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "write JSON lines")
	return cmd
}

// evalError is err as the command line says it: the caller's fault
// (evalrun.ErrRefused) is a usage error.
func evalError(err error) error {
	if errors.Is(err, evalrun.ErrRefused) {
		return &usageError{err}
	}
	return err
}

type evalRunFlags struct {
	cfg     eval.Config
	sources []string
	env     []string
	sandbox string
	name    string
	keep    bool
	json    bool
	html    string
	workDir string
	passK   int
}

func (a *app) evalRunCmd() *cobra.Command {
	f := &evalRunFlags{}
	cmd := &cobra.Command{
		Use:   "run SUITE",
		Short: "Run every case of a suite --trials times as journaled runs and report",
		Long: `Run executes each case of SUITE (a case file, a suite.toml, or a directory
of cases, SWE-bench-style instances and Harbor tasks; docs/eval.md) --trials
times. Each trial is a normal journaled run in a fresh workspace, labelled
eval.id, eval.suite, eval.case, eval.trial, eval.attempt and eval.config
(keel cost --by label groups their cost), under the sandbox and --policy; what a
run asks is decided by --approve. After the run, the case's checks run in
the run's sandbox. A trial is passed, failed (a check failed), limit (the
run hit a limit) or error: an infrastructure failure (the sandbox, the
provider, the setup) that is retried --retries times and never counted
against the agent.

--model is a model spec, or "recorded" to replay each case's recordings
(trial t uses recording t mod n). With --live SPEC, a recorded trial is
answered from its recording until the run diverges from it (a tool
result other than the recorded one, or the recording exhausted), then by
SPEC. --budget caps the dollars of the whole
evaluation. The result is kept in $KEEL_HOME/evals/ID (result.json,
report.html); keel eval compare A B compares two of them.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.evalRun(cmd.Context(), args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.cfg.Model, "model", "m", eval.Recorded, "model spec, or \"recorded\": each case's recorded trajectories")
	fl.StringVar(&f.cfg.Live, "live", "", "with --model recorded: the model spec that answers from the first divergence from the recording on (recorded-then-live)")
	fl.IntVarP(&f.cfg.Trials, "trials", "k", 1, "trials per case")
	fl.IntVar(&f.cfg.Concurrency, "concurrency", 1, "trials that run at once")
	fl.IntVar(&f.cfg.Retries, "retries", 2, "retries of a trial after an infrastructure error")
	fl.Float64Var(&f.cfg.Budget, "budget", 0, "US dollars the whole evaluation may spend (0: no cap beyond each run's --max-cost default)")
	fl.IntVar(&f.cfg.MaxSteps, "max-steps", 0, "step limit of each run (0: the case's, else keel run's default)")
	fl.StringVar(&f.cfg.Policy, "policy", "", "policy file of the runs (default: Keel's)")
	fl.StringVar(&f.cfg.Approve, "approve", "deny", "what to decide when a run asks: deny or allow")
	fl.StringVar(&f.cfg.Name, "config-name", "", "name of this configuration in reports (default: model and policy)")
	fl.StringVar(&f.name, "name", "", "id of the evaluation (default: a new one)")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "KEY=VALUE added to every case's sandbox environment (repeatable)")
	fl.StringArrayVar(&f.sources, "source", nil, "OWNER/NAME=DIR: a clone or mirror of a repository the cases name (repeatable)")
	fl.StringVar(&f.sandbox, "sandbox", "", "sandbox backend: linux (default) or none (NO isolation)")
	fl.StringVar(&f.workDir, "work-dir", "", "where trial workspaces are made (default $KEEL_HOME/evals/ID/work)")
	fl.BoolVar(&f.keep, "keep", false, "keep each trial's workspace after its checks")
	fl.BoolVar(&f.json, "json", false, "write the report as JSON")
	fl.StringVar(&f.html, "html", "", "also write the HTML report to this file")
	fl.IntVar(&f.passK, "pass-k", 0, "k of pass@k and pass^k (default: --trials)")
	return cmd
}

func (a *app) evalRun(ctx context.Context, suitePath string, f *evalRunFlags) error {
	ev, err := evalrun.PrepareEval(&evalrun.EvalParams{Home: a.home, Suite: suitePath, Sources: f.sources, Env: f.env, Config: f.cfg, ID: f.name, WorkDir: f.workDir, Keep: f.keep})
	if err != nil {
		return evalError(err)
	}
	eng, err := loadPolicy(f.cfg.Policy)
	if err != nil {
		return err
	}
	sbKind, err := a.sandboxKind(f.sandbox)
	if err != nil {
		return err
	}
	store, err := a.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	x, done, err := a.newEvalExec(ctx, store, eng, sbKind, policy.Effect(f.cfg.Approve))
	if err != nil {
		return err
	}
	defer done()
	fmt.Fprintf(a.stderr, "keel: eval %s: suite %s, %d cases × %d trials, model %s\n", ev.ID, ev.Suite.Name, len(ev.Suite.Cases), f.cfg.Trials, f.cfg.Model)
	rep, err := ev.Run(ctx, store, x, func(t *eval.Trial) {
		fmt.Fprintf(a.stderr, "keel: eval %s: %s #%d attempt %d: %s run %s", ev.ID, t.Case, t.Trial, t.Attempt, t.Verdict, tui.OrDash(t.RunID))
		if t.Error != "" {
			fmt.Fprintf(a.stderr, " (%s)", agent.Clip(t.Error, 160))
		}
		fmt.Fprintln(a.stderr)
	}, f.passK, f.html)
	if err != nil {
		return err
	}
	if f.json {
		return rep.WriteJSON(a.stdout)
	}
	err = rep.WriteText(a.stdout)
	fmt.Fprintf(a.stdout, "\nresult: %s\nreport: %s\n", filepath.Join(ev.Dir, "result.json"), filepath.Join(ev.Dir, "report.html"))
	return err
}

// loadResult reads an evaluation's result: an id in $KEEL_HOME/evals or a
// result.json file.
func (a *app) loadResult(ref string, k int) (*eval.Result, error) {
	if err := service.CheckEvalK(k); err != nil {
		return nil, &usageError{err}
	}
	res, err := evalrun.LoadResult(a.home, ref)
	return res, evalError(err)
}

func (a *app) evalCompareCmd() *cobra.Command {
	var jsonOut bool
	var html string
	var k int
	cmd := &cobra.Command{
		Use:   "compare A B",
		Short: "Compare two evaluations of a suite: the difference and whether it exceeds the noise",
		Long: `Compare reports B's success rate minus A's with Newcombe's 95% interval
(the difference exceeds the noise of the trials when the interval excludes
0), the cases whose trials disagree (flaky), and the per-trial difference
in asks, policy denials, invalid calls, cost, tokens, time and steps. A and
B are evaluation ids ($KEEL_HOME/evals) or result.json files.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ra, err := a.loadResult(args[0], k)
			if err != nil {
				return err
			}
			rb, err := a.loadResult(args[1], k)
			if err != nil {
				return err
			}
			c := eval.Compare(eval.NewReport(ra, k), eval.NewReport(rb, k))
			if html != "" {
				if err := evalrun.WriteHTML(html, c); err != nil {
					return err
				}
			}
			if jsonOut {
				return c.WriteJSON(a.stdout)
			}
			return c.WriteText(a.stdout)
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "write the comparison as JSON")
	cmd.Flags().StringVar(&html, "html", "", "also write the HTML report of both to this file")
	cmd.Flags().IntVar(&k, "pass-k", 0, "k of pass@k and pass^k (default: the trials of each)")
	return cmd
}

func (a *app) evalReportCmd() *cobra.Command {
	var jsonOut bool
	var html string
	var k int
	cmd := &cobra.Command{
		Use:   "report EVAL",
		Short: "Print an evaluation's report again (text, --json, --html FILE)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := a.loadResult(args[0], k)
			if err != nil {
				return err
			}
			rep := eval.NewReport(res, k)
			if html != "" {
				if err := evalrun.WriteHTML(html, nil, rep); err != nil {
					return err
				}
			}
			if jsonOut {
				return rep.WriteJSON(a.stdout)
			}
			return rep.WriteText(a.stdout)
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "write the report as JSON")
	cmd.Flags().StringVar(&html, "html", "", "write the HTML report to this file")
	cmd.Flags().IntVar(&k, "pass-k", 0, "k of pass@k and pass^k (default: the trials)")
	return cmd
}

// newEvalExec returns the executor of an evaluation's trials in this
// process (evalrun.Exec) and what ends it.
func (a *app) newEvalExec(ctx context.Context, store journal.Store, eng *policy.Engine, sbKind string, approve policy.Effect) (*evalrun.Exec, func(), error) {
	k, err := knobs.Parse(a.getenv("KEEL_DEBUG"))
	if err != nil {
		return nil, nil, err
	}
	rt, flush, err := a.newRuntime(ctx, store, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	b := newBuilder(a, store, slog.New(slog.DiscardHandler))
	svc := service.New(rt, &service.Options{Builder: b, NoExecution: true})
	x := &evalrun.Exec{Service: svc, Builder: b, Policy: eng, Sandbox: sbKind, Approve: approve, Person: a.person(""), Fault: k.EvalFault}
	return x, func() { _ = svc.Shutdown(context.WithoutCancel(ctx)); flush() }, nil
}
