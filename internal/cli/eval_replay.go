package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/oklog/ulid/v2"
	"github.com/spf13/cobra"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/eval"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/internal/assemble/builder"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/service"
)

// LabelReplayOf labels a re-execution by keel runs replay with the run it
// re-executes.
const LabelReplayOf = "replay.of"

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

// journalRecording writes the run of events as a recording the replay
// model answers from.
func journalRecording(events []journal.Event, created *agent.RunCreated, path string) error {
	b, err := eval.Trajectory(events, func(rel string) ([]byte, error) { return readArtifact(created, rel) })
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// restoreStart puts the files of the run's start into ws: a clone of its
// repository at the git commit it started from, then its first
// checkpoint's files.
func restoreStart(ctx context.Context, events []journal.Event, created *agent.RunCreated, ws string, warn io.Writer) error {
	return restoreFiles(ctx, events, created, ws, false, warn)
}

// restoreFiles puts into ws a clone of the run's repository at the git
// commit it started from (from its workspace, else from the repository
// the workspace was cloned from: an evaluation deletes its trials'
// workspaces), then the files of its first checkpoint (last false) or
// of its newest one (last true: the run's files at its end, whatever
// was done to its workspace since). When the commit is nowhere to be
// found but the run has a checkpoint, the files come from the
// checkpoint store alone, without git, and a warning says so on warn.
func restoreFiles(ctx context.Context, events []journal.Event, created *agent.RunCreated, ws string, last bool, warn io.Writer) error {
	var first int64
	for _, e := range events {
		if e.Type == journal.WorkspaceCheckpoint || (last && e.Type == journal.WorkspaceRestored) {
			first = e.Seq
			if !last {
				break
			}
		}
	}
	cloned := false
	if created.Git != nil && created.Git.Commit != "" {
		err := cloneStart(ctx, created, ws)
		switch {
		case err == nil:
			cloned = true
		case first == 0:
			return err
		default:
			fmt.Fprintf(warn, "keel: warning: %v\nkeel: the run's files come from its checkpoint in Keel's store, without the git repository: what reads git may differ\n", err)
		}
	}
	if first == 0 {
		if !cloned {
			return fmt.Errorf("run %s has neither a git commit at its start nor a workspace checkpoint: its starting files are unknown", events[0].RunID)
		}
		return nil
	}
	cp, _, err := checkpoint.At(events, first)
	if err != nil {
		return err
	}
	// The store is opened for a directory that exists (git will not
	// run on a work tree that is gone); the snapshot is the same.
	work := created.Workspace
	if _, err := os.Stat(work); err != nil {
		work = filepath.Dir(ws)
	}
	src, err := checkpoint.OpenCheckpoints(ctx, cp.Store, work)
	if err != nil {
		return err
	}
	if !cloned {
		_, err = src.Materialize(ctx, cp.Tree, ws)
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(ws), ".start-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	files := filepath.Join(tmp, "files")
	if _, err := src.Materialize(ctx, cp.Tree, files); err != nil {
		return err
	}
	return exec.CommandContext(ctx, "cp", "-a", files+"/.", ws).Run()
}

// cloneStart clones into ws a repository that has the commit the run
// started on, checked out: the run's workspace if it still has it,
// else the repository it was cloned from (GitStart.Origin), whose URL
// the clone keeps as its origin.
func cloneStart(ctx context.Context, created *agent.RunCreated, ws string) error {
	g := created.Git
	var errs []string
	for _, src := range []string{created.Workspace, g.Origin} {
		if src == "" {
			continue
		}
		err := runGit(ctx, "", "clone", "-q", "--no-checkout", src, ws)
		if err == nil {
			err = runGit(ctx, ws, "checkout", "-q", "--detach", g.Commit)
		}
		if err == nil && g.Origin != "" && src != g.Origin {
			err = runGit(ctx, ws, "remote", "set-url", "origin", g.Origin)
		}
		if err == nil {
			return nil
		}
		errs = append(errs, err.Error())
		if err := os.RemoveAll(ws); err != nil {
			return err
		}
	}
	where := "its workspace " + created.Workspace
	if g.Origin != "" {
		where += " nor in " + g.Origin + ", the repository it was cloned from"
	} else {
		where += " (no origin was recorded to clone it from)"
	}
	return fmt.Errorf("the commit %s the run started on is not in %s: %s", agent.Clip(g.Commit, 12), where, strings.Join(errs, "; "))
}

// caseRepo is the repository a frozen case clones: the run's workspace,
// or when it is gone the repository it was cloned from.
func caseRepo(created *agent.RunCreated) string {
	if _, err := os.Stat(created.Workspace); err != nil && created.Git.Origin != "" {
		return created.Git.Origin
	}
	return created.Workspace
}

func runGit(ctx context.Context, dir string, args ...string) error {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (a *app) replayRun(ctx context.Context, id, workspace string, jsonOut bool) error {
	store, err := a.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	orig, err := journal.ReadVerified(ctx, store, id)
	if err != nil {
		return err
	}
	st, err := agent.Fold(id, orig)
	if err != nil {
		return err
	}
	created := st.Created
	newID := strings.ToLower(ulid.Make().String())
	dir := filepath.Join(a.home, "replays", newID)
	ws := workspace
	if ws == "" {
		ws = filepath.Join(dir, "workspace")
	} else if ws, err = filepath.Abs(ws); err != nil {
		return err
	} else if err := emptyDir(ws); err != nil {
		return err
	}
	// Until the re-execution is journaled, a failure leaves nothing
	// behind: not its directory, nor files in --workspace.
	journaled := false
	_, statErr := os.Stat(ws)
	wsExisted := workspace != "" && statErr == nil
	defer func() {
		if journaled {
			return
		}
		_ = os.RemoveAll(dir)
		if workspace != "" {
			_ = os.RemoveAll(ws)
			if wsExisted {
				_ = os.Mkdir(ws, 0o755)
			}
		}
	}()
	recPath := filepath.Join(dir, "trajectory.json")
	if err := journalRecording(orig, created, recPath); err != nil {
		return err
	}
	if err := restoreStart(ctx, orig, created, ws, a.stderr); err != nil {
		return fmt.Errorf("restore the run's starting files: %w", err)
	}
	c := *created
	c.Model = "replay:" + recPath
	c.Workspace = ws
	c.StateDir = assemble.StateDir(a.home, ws)
	c.Git = builder.GitStart(ctx, ws)
	c.Labels = map[string]string{}
	for k, v := range created.Labels {
		c.Labels[k] = v
	}
	c.Labels[LabelReplayOf] = id
	rt, flush, err := a.newRuntime(ctx, store, nil, nil)
	if err != nil {
		return err
	}
	defer flush()
	b := newBuilder(a, store, slog.New(slog.DiscardHandler))
	svc := service.New(rt, &service.Options{Builder: b, NoExecution: true})
	defer func() { _ = svc.Shutdown(context.WithoutCancel(ctx)) }()
	_, closer, err := b.Wire(ctx, &c)
	if err != nil {
		return err
	}
	w := builtWiring(closer)
	defer w.Close()
	c.Tools = w.ToolInfos()
	replayID, err := svc.Journal(ctx, service.Local(a.person("")), &c, newID)
	if err != nil {
		return err
	}
	journaled = true
	fmt.Fprintf(a.stderr, "keel: re-executing run %s as %s in %s\n", id, replayID, ws)
	decided := map[string]*agent.ApprovalResolved{}
	for _, t := range st.Turns {
		for _, call := range t.Calls {
			if call.Resolved != nil {
				decided[call.ID] = call.Resolved
			}
		}
	}
	params := w.execParams(nil)
	params.Wait = false
	params.Principals = identity.NewDirectory(rt.Store(), nil).Check
	if _, err := executeUnattended(ctx, rt, replayID, params, func(p agent.PendingApproval) (policy.Effect, string) {
		if d := decided[p.CallID]; d != nil {
			return d.Decision, "as decided in run " + id
		}
		return policy.Deny, "not asked in run " + id
	}); err != nil {
		return err
	}
	rep, err := journal.ReadVerified(ctx, store, replayID)
	if err != nil {
		return err
	}
	stats, err := eval.Diverge(orig, rep, nil)
	if err != nil {
		return err
	}
	if jsonOut {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"run": id, "replay": replayID, "stats": stats, "divergence": stats.Divergence}); err != nil {
			return err
		}
	} else {
		stats.WriteText(a.stdout, id, replayID)
	}
	if stats.Divergence != nil {
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
			return a.freeze(cmd.Context(), args[0], out, name, mount, sbFlag, checks, passed, files, patch)
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

func (a *app) freeze(ctx context.Context, id, out, name, mount, sbFlag string, checks, passed, files []string, patch bool) error {
	out, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	if err := emptyDir(out); err != nil {
		return err
	}
	store, err := a.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	events, err := journal.ReadVerified(ctx, store, id)
	if err != nil {
		return err
	}
	st, err := agent.Fold(id, events)
	if err != nil {
		return err
	}
	created := st.Created
	if st.Ended == nil {
		return usagef("run %s has not ended (%s): freeze a finished run", id, st.Status)
	}
	if name == "" {
		name = id
	}
	if mount == "" {
		mount = created.MountPath
	}
	if err := journalRecording(events, created, filepath.Join(out, "trajectory.json")); err != nil {
		return err
	}
	c := &eval.Case{Name: name, Task: created.Task, System: created.System, Env: created.Env, Setup: created.Setup,
		Recordings: []string{"trajectory.json"}, Workspace: eval.Workspace{MountPath: mount},
		// The run's own bounds (0 in a case: the evaluation's, else Keel's
		// defaults).
		MaxSteps: created.Limits.MaxSteps, Timeout: eval.Duration(created.Limits.Timeout)}
	if len(created.Network) > 0 || len(created.SecretEnv) > 0 {
		// An evaluation's trials have no network and no secrets: say so
		// rather than freeze a case that quietly differs.
		fmt.Fprintf(a.stderr, "keel: note: the run allowed hosts %v and held secrets %v; a frozen case runs without network or secrets, so calls that used them will differ\n",
			created.Network, created.SecretEnv)
	}
	if created.Git != nil && created.Git.Commit != "" {
		c.Workspace.Git, c.Workspace.Commit = caseRepo(created), created.Git.Commit
	}
	if created.Git == nil || len(created.Git.Dirty) > 0 {
		// The start had files git does not hold: keep the first
		// checkpoint's.
		start := filepath.Join(out, "start")
		if err := restoreStart(ctx, events, &agent.RunCreated{Workspace: created.Workspace}, start, a.stderr); err != nil {
			return fmt.Errorf("the run's starting files: %w", err)
		}
		if err := os.Rename(start, filepath.Join(out, "files")); err != nil {
			return err
		}
		c.Workspace.Files = "files"
	}
	// The checks run now on the run's files at its end (its newest
	// checkpoint over its starting commit), in a new directory: not on
	// its workspace, which may have changed since.
	tmp, err := os.MkdirTemp("", "keel-freeze-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	ws := filepath.Join(tmp, "workspace")
	if err := restoreFiles(ctx, events, created, ws, true, a.stderr); err != nil {
		return fmt.Errorf("the run's files at its end: %w", err)
	}
	sbKind, err := a.sandboxKind(sbFlag)
	if err != nil {
		return err
	}
	wc := *created
	wc.Workspace, wc.Sandbox, wc.Setup = ws, sbKind, ""
	wc.StateDir = assemble.StateDir(a.home, ws)
	wc.Model = "replay:" + filepath.Join(out, "trajectory.json")
	wc.MCP, wc.SQL, wc.OpenAPI = nil, nil, nil
	b := newBuilder(a, store, slog.New(slog.DiscardHandler))
	wiring, closer, err := b.Wire(ctx, &wc)
	if err != nil {
		return err
	}
	defer closer.Close()
	sh := sandboxShell(wiring.Env.Sandbox)
	if patch {
		code, diff, err := sh(ctx, eval.PatchCommand, 0)
		if err != nil {
			return err
		}
		if code != 0 || strings.TrimSpace(diff) == "" {
			return usagef("--patch: the run's files at its end have no git diff to check (exit status %d): %s", code, agent.Clip(diff, 200))
		}
		c.Checks = append(c.Checks, eval.Check{Name: "patch", Patch: diff})
	}
	for i, cmd := range checks {
		ch := eval.Check{Run: cmd}
		if i == len(checks)-1 {
			ch.Passed = passed
		}
		c.Checks = append(c.Checks, ch)
	}
	for _, f := range files {
		p, content, hasContent := strings.Cut(f, "=")
		ch := eval.Check{File: p}
		if hasContent {
			ch.Equals = content
		}
		c.Checks = append(c.Checks, ch)
	}
	results, err := eval.RunChecks(ctx, c, ws, sh)
	if err != nil {
		return err
	}
	u, err := eval.Measure(events)
	if err != nil {
		return err
	}
	ok := true
	for _, r := range results {
		ok = ok && r.Passed
		mark := "passed"
		if !r.Passed {
			mark = "FAILED: " + r.Detail
		}
		fmt.Fprintf(a.stderr, "keel: check %s: %s\n", r.Name, mark)
	}
	v := eval.Classify(u, ok)
	if v == eval.Infra {
		return fmt.Errorf("run %s ended on an infrastructure failure (%s): not a case to freeze", id, u.Infra)
	}
	c.Expect = "fail"
	if v == eval.Passed {
		c.Expect = "pass"
	}
	f, err := os.Create(filepath.Join(out, "case.toml"))
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(f, "# Frozen from run %s by keel eval freeze: its verdict was %s (%s).\n", id, v, u.Status+" "+u.Reason)
	if err := toml.NewEncoder(f).Encode(c); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "froze run %s into %s: verdict %s; run it again with keel eval run %s --model recorded\n", id, out, v, out)
	return nil
}
