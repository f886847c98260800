package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

func (a *app) runsDiffCmd() *cobra.Command {
	var at int64
	var stat bool
	cmd := &cobra.Command{
		Use:   "diff RUN",
		Short: "Show the files a run changed and their unified diff",
		Long: `Diff compares the run's files with the git commit the run started on
(recorded in run.created), and prints the changed files and their unified
diff. The run's files are its workspace as it left them (its newest
checkpoint) once no process executes it: files changed after it, by
another run or by hand, are named in a note and not counted as its (a
file it changed is shown as it left it); while it may be executing, the
workspace as it is now. New files are compared unless the ignore rules of the
run's start ignore them (a file hidden only by rules the run wrote is shown
and marked; what the run did to git's index hides nothing). When the
tree had uncommitted changes at the start, the diff includes them; the
files are named.

--at EVENT compares the run's first workspace checkpoint with its newest
checkpoint at or before EVENT: what the run changed up to that event, by
any tool, shell commands included (keel runs checkpoints RUN lists them).
A run without checkpoints (journaled before they existed, or without git)
lists its file edits (write_file, edit_file) up to EVENT instead.`,
		Args:        cobra.ExactArgs(1),
		Annotations: annotated(firstArgIsRun, bothForms),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.eventFlag(cmd, "at", at, args[0], false); err != nil {
				return err
			}
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				return a.runsDiff(ctx, b, args[0], at, stat)
			}, "at", "stat")
		},
	}
	cmd.Flags().Int64Var(&at, "at", 0, "list the file edits made up to this event (its sequence number)")
	cmd.Flags().BoolVar(&stat, "stat", false, "only the changed files, not their diff")
	return cmd
}

// runsDiff prints what run id changed (keel runs diff), through b.
func (a *app) runsDiff(ctx context.Context, b backend, id string, at int64, stat bool) error {
	events, err := b.Events(ctx, id)
	if err != nil {
		return err
	}
	if len(events) == 0 {
		return fmt.Errorf("run %s has no events", id)
	}
	if at > events[len(events)-1].Seq {
		return usagef("run %s has %d events; --at %d is past its end", id, len(events), at)
	}
	return tui.Diff(ctx, a.stdout, b, id, events, at, stat)
}

// workspaceDiff is a runsBackend's WorkspaceDiff on this machine, the
// run's secrets sealed (sealDiff); store has the run's journal, whose
// newest checkpoint is where the run left its files (files changed
// since are not its changes) and whose checkpoints stand in when git
// cannot read the start commit (checkpoint.HistoryError).
func (a *app) workspaceDiff(store journal.Store) func(ctx context.Context, id string, created *agent.RunCreated) (*checkpoint.Summary, error) {
	return func(ctx context.Context, id string, created *agent.RunCreated) (*checkpoint.Summary, error) {
		events, err := store.Read(ctx, id, 1)
		if err != nil {
			return nil, err
		}
		sum, err := checkpoint.Changed(ctx, created, events)
		var he *checkpoint.HistoryError
		if errors.As(err, &he) {
			he.Changes = a.sealDiff(id, created, he.Changes)
		}
		if err != nil {
			return nil, fmt.Errorf("diff of run %s: %w", id, err)
		}
		secrets, missing := created.SecretValues(a.getenv)
		if len(missing) > 0 && len(sum.Changes)+len(sum.Before)+len(sum.Outside)+len(sum.Later) > 0 {
			fmt.Fprintf(a.stderr, "keel: note: run %s's secret %s is not set in this environment: this diff cannot hide its value\n", id, strings.Join(missing, ", "))
		}
		return sum.Seal(secrets), nil
	}
}

// sealDiff returns changes with the values of the run's secrets that
// this process's environment holds replaced by placeholders naming them
// (a run that wrote a secret into a file); it says on stderr which
// secrets it cannot hide (not set here).
func (a *app) sealDiff(id string, created *agent.RunCreated, changes []checkpoint.Change) []checkpoint.Change {
	secrets, missing := created.SecretValues(a.getenv)
	if len(missing) > 0 && len(changes) > 0 {
		fmt.Fprintf(a.stderr, "keel: note: run %s's secret %s is not set in this environment: this diff cannot hide its value\n", id, strings.Join(missing, ", "))
	}
	return checkpoint.SealSecrets(changes, secrets)
}

// WorkspaceDiff returns what the run changed, on this machine
// (checkpoint.Changed).
func (l *local) WorkspaceDiff(ctx context.Context, id string, created *agent.RunCreated) (*checkpoint.Summary, error) {
	return l.a.workspaceDiff(l.store)(ctx, id, created)
}

// CheckpointDiff compares the run's checkpoints in the local store.
func (l *local) CheckpointDiff(ctx context.Context, id string, events []journal.Event, at int64) ([]checkpoint.Change, int64, int64, error) {
	changes, from, to, err := checkpoint.Diff(ctx, events, at)
	if err != nil && !errors.Is(err, checkpoint.ErrNone) {
		err = fmt.Errorf("diff of run %s at event %d: %w", id, at, err)
	}
	if created, cerr := agent.Created(events); err == nil && cerr == nil {
		changes = l.a.sealDiff(id, created, changes)
	}
	return changes, from, to, err
}

// WorkspaceDiff asks the server, which has the run's workspace.
func (r *remote) WorkspaceDiff(ctx context.Context, id string, _ *agent.RunCreated) (*checkpoint.Summary, error) {
	d, err := r.Client.Diff(ctx, id, 0)
	if err != nil {
		return nil, err
	}
	if d.Damaged != "" {
		return nil, &checkpoint.HistoryError{Cause: errors.New(d.Damaged), Changes: fileDiffs(d), From: d.From, To: d.To}
	}
	if d.NoCheckpoint {
		return nil, checkpoint.ErrNone
	}
	return &checkpoint.Summary{Changes: fileDiffs(d), At: d.Checkpoint, Later: d.Later, From: d.From, Before: d.Before, Outside: d.Outside}, nil
}

// CheckpointDiff asks the server, which has the run's checkpoints.
func (r *remote) CheckpointDiff(ctx context.Context, id string, _ []journal.Event, at int64) ([]checkpoint.Change, int64, int64, error) {
	d, err := r.Client.Diff(ctx, id, at)
	if err != nil {
		return nil, 0, 0, err
	}
	if d.NoCheckpoint {
		return nil, 0, 0, checkpoint.ErrNone
	}
	return fileDiffs(d), d.From, d.To, nil
}

func fileDiffs(d *api.RunDiff) []checkpoint.Change {
	out := make([]checkpoint.Change, 0, len(d.Files))
	for _, f := range d.Files {
		out = append(out, checkpoint.Change{Path: f.Path, Status: checkpoint.Status(f.Status), Binary: f.Binary, Patch: f.Patch, Added: f.Added, Removed: f.Removed, Denied: f.Denied, Hidden: f.Hidden,
			Rewritten: f.Rewritten, Ignored: f.Ignored, Files: f.Files, Autorun: f.Autorun, Link: f.Link, Note: f.Note, NULs: f.NULs, Later: f.Later, Outside: f.Outside})
	}
	return out
}

// closingTimeout bounds what a command still reads after its run ended,
// canceled or not (the closing diff, the demo's timeline).
const closingTimeout = 30 * time.Second

// closingContext is ctx without its cancellation, bounded by
// closingTimeout.
func closingContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), closingTimeout)
}
