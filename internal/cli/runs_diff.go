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
		Long: `Diff compares the run's workspace, as it is now, with the git commit the
run started on (recorded in run.created), and prints the changed files and
their unified diff. New files are compared unless the ignore rules of the
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
	if at > 0 {
		if at > events[len(events)-1].Seq {
			return usagef("run %s has %d events; --at %d is past its end", id, len(events), at)
		}
		changes, from, to, err := b.CheckpointDiff(ctx, id, events, at)
		if errors.Is(err, checkpoint.ErrNone) {
			for _, e := range events {
				if journal.KeepsStatus(e.Type) {
					fmt.Fprintf(tui.Esc(a.stdout), "no files changed up to event %d: the run's first checkpoint (the files it started with) is event %d\n", at, e.Seq)
					return nil
				}
			}
			return tui.EditsUpTo(a.stdout, id, events, at)
		}
		if err != nil {
			return err
		}
		tui.Changes(tui.Esc(a.stdout), changes, fmt.Sprintf("since the checkpoint of event %d, at the checkpoint of event %d", from, to), stat)
		return nil
	}
	created, err := runCreated(events)
	if err != nil {
		return err
	}
	if created.Git == nil {
		// No git commit to compare with (a workspace that is not a git
		// repository, a fork into a new directory): the run's own
		// checkpoints say what it changed.
		last := events[len(events)-1].Seq
		changes, from, to, err := b.CheckpointDiff(ctx, id, events, last)
		if err == nil {
			tui.Changes(tui.Esc(a.stdout), changes, tui.CheckpointsSince(from, to), stat)
			return nil
		}
		if !errors.Is(err, checkpoint.ErrNone) {
			return err
		}
	}
	return tui.RunDiff(ctx, a.stdout, b.WorkspaceDiff, id, created, stat)
}

// endCheckpointDiff is endDiff for a run that recorded no git commit at
// its start: the files changed between its first and newest checkpoints
// (nothing when it has none).
func (a *app) endCheckpointDiff(ctx context.Context, store journal.Store, runID string) {
	ctx, cancel := closingContext(ctx)
	defer cancel()
	events, err := store.Read(ctx, runID, 1)
	if err != nil || len(events) == 0 {
		return
	}
	changes, from, to, err := checkpoint.Diff(ctx, events, events[len(events)-1].Seq)
	if err != nil {
		return
	}
	if created, err := runCreated(events); err == nil {
		changes = a.sealDiff(runID, created, changes)
	}
	var b strings.Builder
	tui.Changes(tui.Esc(&b), changes, tui.CheckpointsSince(from, to), true)
	fmt.Fprintf(a.stderr, "\n%s", b.String())
	if len(changes) > 0 {
		fmt.Fprintf(a.stderr, "diff: keel runs diff %s\n", runID)
	}
}

// workspaceDiff is a runsBackend's WorkspaceDiff on this machine, the
// run's secrets sealed (sealDiff).
func (a *app) workspaceDiff(ctx context.Context, id string, created *agent.RunCreated) ([]checkpoint.Change, error) {
	changes, err := checkpoint.SinceStart(ctx, created)
	if err != nil {
		return nil, fmt.Errorf("diff of run %s: %w", id, err)
	}
	return a.sealDiff(id, created, changes), nil
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

// WorkspaceDiff compares the run's workspace with its starting commit
// on this machine.
func (l *local) WorkspaceDiff(ctx context.Context, id string, created *agent.RunCreated) ([]checkpoint.Change, error) {
	return l.a.workspaceDiff(ctx, id, created)
}

// CheckpointDiff compares the run's checkpoints in the local store.
func (l *local) CheckpointDiff(ctx context.Context, id string, events []journal.Event, at int64) ([]checkpoint.Change, int64, int64, error) {
	changes, from, to, err := checkpoint.Diff(ctx, events, at)
	if err != nil && !errors.Is(err, checkpoint.ErrNone) {
		err = fmt.Errorf("diff of run %s at event %d: %w", id, at, err)
	}
	if created, cerr := runCreated(events); err == nil && cerr == nil {
		changes = l.a.sealDiff(id, created, changes)
	}
	return changes, from, to, err
}

// WorkspaceDiff asks the server, which has the run's workspace.
func (r *remote) WorkspaceDiff(ctx context.Context, id string, _ *agent.RunCreated) ([]checkpoint.Change, error) {
	d, err := r.cl.Diff(ctx, id, 0)
	if err != nil {
		return nil, err
	}
	return fileDiffs(d), nil
}

// CheckpointDiff asks the server, which has the run's checkpoints.
func (r *remote) CheckpointDiff(ctx context.Context, id string, _ []journal.Event, at int64) ([]checkpoint.Change, int64, int64, error) {
	d, err := r.cl.Diff(ctx, id, at)
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
			Rewritten: f.Rewritten, Ignored: f.Ignored, Files: f.Files, Autorun: f.Autorun})
	}
	return out
}

// runCreated decodes the run.created event of events.
func runCreated(events []journal.Event) (*agent.RunCreated, error) {
	if len(events) == 0 {
		return nil, errors.New("the run has no events")
	}
	v, err := agent.Decode(&events[0])
	if err != nil {
		return nil, err
	}
	c, ok := v.(*agent.RunCreated)
	if !ok {
		return nil, fmt.Errorf("the run's first event is %s, not run.created", events[0].Type)
	}
	return c, nil
}

// endDiff prints, at the end of keel run, the files the run changed
// (on stderr, with the progress) and how to see their diff. It reads
// them even when ctx was canceled (Ctrl-C ended the run), within
// closingTimeout: what the run changed matters most then.
func (a *app) endDiff(ctx context.Context, runID string, created *agent.RunCreated) {
	ctx, cancel := closingContext(ctx)
	defer cancel()
	var b strings.Builder
	if err := tui.RunDiff(ctx, &b, a.workspaceDiff, runID, created, true); err != nil {
		fmt.Fprintf(a.stderr, "keel: %v\n", err)
		return
	}
	fmt.Fprintf(a.stderr, "\n%s", b.String())
	if !strings.HasPrefix(b.String(), "no files changed") {
		fmt.Fprintf(a.stderr, "diff: keel runs diff %s\n", runID)
	}
}

// closingTimeout bounds what a command still reads after its run ended,
// canceled or not (the closing diff, the demo's timeline).
const closingTimeout = 30 * time.Second

// closingContext is ctx without its cancellation, bounded by
// closingTimeout.
func closingContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), closingTimeout)
}
