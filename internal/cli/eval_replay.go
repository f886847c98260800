package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/internal/evalrun"
)

func (a *app) runsReplayCmd() *cobra.Command {
	var workspace string
	var jsonOut bool
	cmd := &cobra.Command{
		Use:         "replay RUN",
		Annotations: firstArgIsRun,
		Short:       "Re-execute a run from its journal with its recorded model answers and report the first divergence",
		Long: `Replay re-executes RUN as a new run (labelled replay.of=RUN): the same task,
settings, policy and sandbox, its workspace restored to the run's start (its
git commit and first checkpoint) in a new directory, its model answered by
RUN's own journaled answers, its approvals decided as they were. Tools,
sandbox, gate and journal run for real under this Keel. It then compares
the two journals event by event and reports the first divergence: a request
(what the model was sent), a gate decision, a tool result (exit status or
output; durations, clock times and addresses masked) or the end. Exit
status 0 when none, 1 when they diverge.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.replayRun(cmd.Context(), args[0], workspace, jsonOut)
		},
	}
	cmd.Flags().StringVarP(&workspace, "workspace", "w", "", "empty directory for the re-execution's workspace (default: $KEEL_HOME/replays/ID/workspace)")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "write the comparison as JSON")
	return cmd
}

func (a *app) replayRun(ctx context.Context, id, workspace string, jsonOut bool) error {
	store, err := a.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	rt, flush, err := a.newRuntime(ctx, store, nil, nil)
	if err != nil {
		return err
	}
	defer flush()
	r, err := evalrun.Replay(ctx, &evalrun.ReplayParams{Run: id, Workspace: workspace, Home: a.home, Runtime: rt,
		Builder: newBuilder(a, store, slog.New(slog.DiscardHandler)), Person: a.person(""), Warn: a.stderr})
	if err != nil {
		return evalError(err)
	}
	if jsonOut {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"run": id, "replay": r.Replay, "stats": r.Stats, "divergence": r.Stats.Divergence}); err != nil {
			return err
		}
	} else {
		r.Stats.WriteText(a.stdout, id, r.Replay)
	}
	if r.Stats.Divergence != nil {
		return &exitError{1}
	}
	return nil
}

func (a *app) evalFreezeCmd() *cobra.Command {
	var (
		out, name, mount string
		checks, passed   []string
		files            []string
		patch            bool
		sbFlag           string
	)
	cmd := &cobra.Command{
		Use:         "freeze RUN --check CMD -o DIR",
		Annotations: firstArgIsRun,
		Short:       "Turn a journaled run into an eval case: its task, starting files, settings, recorded answers and your checks",
		Long: `Freeze writes DIR/case.toml and DIR/trajectory.json: RUN's task, system
prompt, environment, setup and mount path; its workspace at its start (the
git commit it started from in its workspace, and, when it started from
uncommitted files, its first checkpoint's files in DIR/files); its model
answers and tool results as a recording; and the checks you give
(--check COMMAND run in the sandbox, with --passed TEST ids its output must
report passed; --file PATH[=CONTENT]; --patch: the run's final git diff).
The checks run now on RUN's files at its end (its newest checkpoint over
its starting commit), and the verdict
(pass or fail) is recorded as the case's expect, so that keel eval run DIR
--model recorded shows whether a later Keel reproduces it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return usagef("freeze needs -o DIR")
			}
			if len(checks)+len(files) == 0 && !patch {
				return usagef("freeze needs at least one --check, --file or --patch: a case without checks has no verdict")
			}
			return a.freeze(cmd.Context(), &evalrun.FreezeParams{Run: args[0], Out: out, Name: name, MountPath: mount, Sandbox: sbFlag,
				Checks: checks, Passed: passed, Files: files, Patch: patch})
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&out, "output", "o", "", "directory to write the case into (created; must be empty)")
	fl.StringVar(&name, "name", "", "name of the case (default: the run id)")
	fl.StringArrayVar(&checks, "check", nil, "shell command run in the sandbox after the run; exit 0 passes (repeatable)")
	fl.StringArrayVar(&passed, "passed", nil, "test id the last --check's output must report passed (repeatable)")
	fl.StringArrayVar(&files, "file", nil, "PATH or PATH=CONTENT: a workspace file that must exist (with that content) (repeatable)")
	fl.BoolVar(&patch, "patch", false, "check that a trial's git diff equals the run's")
	fl.StringVar(&mount, "mount-path", "", "mount path of the case (default: the run's)")
	fl.StringVar(&sbFlag, "sandbox", "", "sandbox to run the checks in now (default: linux)")
	return cmd
}

func (a *app) freeze(ctx context.Context, p *evalrun.FreezeParams) error {
	sbKind, err := a.sandboxKind(p.Sandbox)
	if err != nil {
		return err
	}
	store, err := a.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	p.Sandbox, p.Home, p.Store, p.Warn = sbKind, a.home, store, a.stderr
	p.Builder = newBuilder(a, store, slog.New(slog.DiscardHandler))
	f, err := evalrun.Freeze(ctx, p)
	if err != nil {
		return evalError(err)
	}
	fmt.Fprintf(a.stdout, "froze run %s into %s: verdict %s; run it again with keel eval run %s --model recorded\n", p.Run, f.Dir, f.Verdict, f.Dir)
	return nil
}
