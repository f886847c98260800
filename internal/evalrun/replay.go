package evalrun

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/oklog/ulid/v2"

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

// Recording writes the run of events (created is its run.created) as a
// recording the replay model answers from, at path.
func Recording(events []journal.Event, created *agent.RunCreated, path string) error {
	b, err := eval.Trajectory(events, func(rel string) ([]byte, error) { return assemble.ReadArtifact(created, rel) })
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
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
	src, err := checkpoint.ReadCheckpoints(ctx, cp.Store, work)
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

// ReplayParams says what [Replay] re-executes and with what.
type ReplayParams struct {
	// Run is the run to re-execute.
	Run string
	// Workspace is the re-execution's workspace, new or empty (""
	// means Home/replays/ID/workspace).
	Workspace string
	// Home is Keel's home: the recording is kept in Home/replays/ID.
	Home string
	// Runtime is this process's runtime on the run's journal; Builder
	// wires the re-execution.
	Runtime *agent.Runtime
	Builder *builder.Builder
	// Person is who re-executes.
	Person string
	// Warn gets notes (the re-execution's id and workspace, restored
	// files' warnings).
	Warn io.Writer
}

// Replayed is what a [Replay] did: the re-execution's id and how its
// journal compares with the run's.
type Replayed struct {
	Run, Replay string
	Stats       *eval.ReplayStats
}

// Replay re-executes a run as a new run (labelled [LabelReplayOf]): the
// same task, settings, policy and sandbox, its workspace restored to the
// run's start (its git commit and first checkpoint) in a new directory,
// its model answered by the run's own journaled answers, its approvals
// decided as they were; then it compares the two journals (eval.Diverge).
// Until the re-execution is journaled, a failure leaves nothing behind.
func Replay(ctx context.Context, p *ReplayParams) (*Replayed, error) {
	store := p.Runtime.Store()
	orig, err := journal.ReadVerified(ctx, store, p.Run)
	if err != nil {
		return nil, err
	}
	st, err := agent.Fold(p.Run, orig)
	if err != nil {
		return nil, err
	}
	created := st.Created
	newID := strings.ToLower(ulid.Make().String())
	dir := filepath.Join(p.Home, "replays", newID)
	ws := p.Workspace
	if ws == "" {
		ws = filepath.Join(dir, "workspace")
	} else if ws, err = filepath.Abs(ws); err != nil {
		return nil, err
	} else if err := EmptyDir(ws, "--workspace"); err != nil {
		return nil, err
	}
	journaled := false
	_, statErr := os.Stat(ws)
	wsExisted := p.Workspace != "" && statErr == nil
	defer func() {
		if journaled {
			return
		}
		_ = os.RemoveAll(dir)
		if p.Workspace != "" {
			_ = os.RemoveAll(ws)
			if wsExisted {
				_ = os.Mkdir(ws, 0o755)
			}
		}
	}()
	recPath := filepath.Join(dir, "trajectory.json")
	if err := Recording(orig, created, recPath); err != nil {
		return nil, err
	}
	if err := restoreFiles(ctx, orig, created, ws, false, p.Warn); err != nil {
		return nil, fmt.Errorf("restore the run's starting files: %w", err)
	}
	c := *created
	c.Model = "replay:" + recPath
	c.Workspace = ws
	c.StateDir = assemble.StateDir(p.Home, ws)
	c.Git = builder.GitStart(ctx, ws)
	c.Labels = map[string]string{}
	for k, v := range created.Labels {
		c.Labels[k] = v
	}
	c.Labels[LabelReplayOf] = p.Run
	svc := service.New(p.Runtime, &service.Options{Builder: p.Builder, NoExecution: true})
	defer func() { _ = svc.Shutdown(context.WithoutCancel(ctx)) }()
	_, closer, err := p.Builder.Wire(ctx, &c)
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	run := closer.(*assemble.Run)
	c.Tools = run.ToolInfos()
	replayID, err := svc.Journal(ctx, service.Local(p.Person), &c, newID)
	if err != nil {
		return nil, err
	}
	journaled = true
	fmt.Fprintf(p.Warn, "keel: re-executing run %s as %s in %s\n", p.Run, replayID, ws)
	decided := map[string]*agent.ApprovalResolved{}
	for _, t := range st.Turns {
		for _, call := range t.Calls {
			if call.Resolved != nil {
				decided[call.ID] = call.Resolved
			}
		}
	}
	params := &agent.ExecParams{Wiring: run.Wiring}
	params.Principals = identity.NewDirectory(store, nil).Check
	if _, err := Unattended(ctx, svc, replayID, params, func(pa agent.PendingApproval) (policy.Effect, string) {
		if d := decided[pa.CallID]; d != nil {
			return d.Decision, "as decided in run " + p.Run
		}
		return policy.Deny, "not asked in run " + p.Run
	}); err != nil {
		return nil, err
	}
	rep, err := journal.ReadVerified(ctx, store, replayID)
	if err != nil {
		return nil, err
	}
	stats, err := eval.Diverge(orig, rep, nil)
	if err != nil {
		return nil, err
	}
	return &Replayed{Run: p.Run, Replay: replayID, Stats: stats}, nil
}
