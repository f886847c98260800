package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// checkpointStore is the directory of the workspace checkpoints of the
// runs this Keel home executes (one git object store for every
// workspace; docs/checkpoints.md).
func (a *app) checkpointStore() string { return assemble.CheckpointStore(a.home) }

// rewindBackend rewinds a run's files and forks runs with their files.
type rewindBackend interface {
	// Rewind restores the files of run id as its newest checkpoint at or
	// before event to had them (journaled).
	// Files changed since only outside the run are left as they are;
	// those changed by both need req.Force.
	Rewind(ctx context.Context, id string, req *api.RewindRun) (*api.Rewound, error)
	// Fork makes a new run of the events of run id up to event req.Seq,
	// with the files of that point (service.Service.Fork): the server
	// starts it when asked, this process's journal never does (the
	// command resumes it).
	Fork(ctx context.Context, id string, req *api.ForkRun) (*api.Run, *service.Forked, error)
}

func (a *app) runsRewindCmd() *cobra.Command {
	var to int64
	var by string
	var force bool
	cmd := &cobra.Command{
		Use:   "rewind RUN --to EVENT",
		Short: "Restore a run's workspace files as they were at an event (journaled)",
		Long: `Rewind puts the files the run changed since EVENT back as the run's newest
workspace checkpoint at or before EVENT recorded them (keel runs
checkpoints RUN lists them): files it changed get their content back,
files it made are removed, files it removed come back. Files changed
since only outside the run (by hand, by another run: after the run, or
while it was paused) are left as they are and listed. A file changed
both by the run and outside it is put back only with --force: without
it the rewind changes nothing and names them. Files the workspace's
.gitignore ignores are left alone. The rewind is journaled
(workspace.restored, with who rewound), after a checkpoint of the files
it replaces when they differ from the run's newest one: the command
prints the rewind that undoes it.

The conversation is not changed: to go on from that point with the model
not knowing what came after, fork the run there (keel runs fork RUN --at
EVENT). A run that a process executes is refused.`,
		Args:        cobra.ExactArgs(1),
		Annotations: annotated(firstArgIsRun, bothForms),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.eventFlag(cmd, "to", to, args[0], true); err != nil {
				return err
			}
			return a.withBackendAs(cmd, by, func(ctx context.Context, b backend) error {
				r, err := b.Rewind(ctx, args[0], &api.RewindRun{To: to, Force: force})
				if err != nil {
					return err
				}
				tui.Rewound(a.stdout, b.Keel(), args[0], r)
				return nil
			}, "to", "force")
		},
	}
	cmd.Flags().Int64Var(&to, "to", 0, "the event whose files to restore (its sequence number)")
	cmd.Flags().BoolVar(&force, "force", false, "put back also the files changed both by the run and outside it since EVENT")
	cmd.Flags().StringVar(&by, "by", "", "who rewinds (default: $USER)")
	return cmd
}

func (a *app) runsForkCmd() *cobra.Command {
	var f runFlags
	var at int64
	var workspace, message, by string
	var noStart bool
	cmd := &cobra.Command{
		Use:   "fork RUN --at EVENT",
		Short: "Start a new run from an event of another, with the files as they were there",
		Long: `Fork makes a new run whose journal is the events 1..EVENT of RUN (re-sealed
in its own hash chain, labeled keel.fork_of=RUN@EVENT) and whose files are
those of RUN's newest workspace checkpoint at or before EVENT, then
executes it (with --message as the person's next message, if given).

Without --workspace the fork works in RUN's workspace, whose files are
restored in place (the files it replaces are kept in the checkpoint store:
keel runs rewind RUN --to N brings them back). With --workspace DIR (a
new or empty directory) the files are written there and RUN's workspace is
left alone; when RUN started in a git repository, DIR is a copy of that
repository (git clone, objects copied) with HEAD detached at RUN's start
commit and the files on top, so git works there and keel runs diff
compares with the same commit. Decisions on calls that had not finished by EVENT, and
approvals remembered for RUN, are not carried over. --no-start journals
the fork paused (reason forked) for a later keel runs resume. At the
event that completes RUN, the fork follows it up with --message (with
--no-start it waits, completed, for keel runs resume --message).`,
		Args:        cobra.ExactArgs(1),
		Annotations: annotated(firstArgIsRun, bothForms),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			f.changed = cmd.Flags().Changed
			if err := a.eventFlag(cmd, "at", at, args[0], true); err != nil {
				return err
			}
			if message != "" && noStart {
				return usagef("--message is sent when the fork starts: leave out --no-start, or resume the fork later with the message")
			}
			limits := f.resumeLimits()
			if limits != nil && noStart {
				return usagef("the limits apply when the fork starts: leave out --no-start, or give them to %s runs resume when you start the fork", a.keelFor())
			}
			b, err := a.openAs(ctx, cmd, by, "at", "workspace", "message", "no-start", "json", "quiet", "no-wait", "wait",
				"max-steps", "max-tokens", "max-cost", "timeout")
			if err != nil {
				return err
			}
			defer b.Close()
			// The service checks the limits before it makes anything, and
			// applies them when the fork starts (locally this process
			// starts it, with the same limits).
			run, fk, err := b.Fork(ctx, args[0], &api.ForkRun{Seq: at, Workspace: workspace, Start: !noStart, Message: message, Limits: limits})
			if err != nil {
				return err
			}
			tui.Forked(a.stderr, args[0], at, run, fk, noStart, b.Keel())
			if noStart {
				fmt.Fprintln(a.stdout, run.ID)
				return nil
			}
			var after int64 // this process resumes it: print it all
			if a.serverURL() != "" {
				after = fk.Made // the server started it: print what comes after
			}
			return b.Continue(ctx, run.ID, &continuation{f: &f, message: message, after: after})
		},
	}
	cmd.Flags().Int64Var(&at, "at", 0, "the last event of RUN the fork keeps (its sequence number)")
	cmd.Flags().StringVar(&workspace, "workspace", "", "a new or empty directory for the fork's files (default: RUN's workspace, restored in place)")
	cmd.Flags().BoolVar(&noStart, "no-start", false, "journal the fork paused, not started")
	cmd.Flags().StringVar(&by, "by", "", "who forks (default: $USER)")
	registerResumeFlags(cmd.Flags(), &f, &message)
	return cmd
}

// eventFlag checks --NAME EVENT of run (service.CheckSeq), a missing one
// too if required; its hints name this invocation's form.
func (a *app) eventFlag(cmd *cobra.Command, name string, seq int64, run string, required bool) error {
	hint := fmt.Sprintf("%s runs checkpoints %s lists the checkpoints", a.keelFor(), run)
	if !cmd.Flags().Changed(name) {
		if required {
			return usagef("--%s EVENT is required (an event's sequence number; %s)", name, hint)
		}
		return nil
	}
	if err := service.CheckSeq("--"+name, seq); err != nil {
		return usagef("%v (%s)", err, hint)
	}
	return nil
}

func (a *app) runsCheckpointsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:         "checkpoints RUN",
		Short:       "List a run's workspace checkpoints and rewinds",
		Args:        cobra.ExactArgs(1),
		Annotations: annotated(firstArgIsRun, bothForms),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withBackend(cmd, func(ctx context.Context, b backend) error {
				events, err := b.Events(ctx, args[0])
				if err != nil {
					return err
				}
				return tui.Checkpoints(a.stdout, args[0], events)
			})
		},
	}
	return cmd
}

func (a *app) runsPruneCheckpointsCmd() *cobra.Command {
	var olderThan time.Duration
	cmd := &cobra.Command{
		Use:         "prune-checkpoints [RUN...]",
		Annotations: argsAreRuns,
		Short:       "Delete the workspace checkpoints of old runs (or of the runs named)",
		Long: `Prune-checkpoints deletes from Keel's checkpoint store the snapshots of the
runs of this journal that last changed more than --older-than ago (or of
the runs named), and the stored files no other run's snapshot shares. A
rewind or fork to a pruned checkpoint is refused afterwards; the runs'
journals are untouched. Snapshots of runs of other journals in the same
store are kept.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			store, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			defer store.Close()
			drop := map[string]bool{}
			for _, id := range args {
				drop[id] = true
			}
			if len(args) == 0 {
				if olderThan <= 0 {
					return usagef("--older-than must be positive")
				}
				runs, err := store.Runs(ctx, &journal.ListParams{})
				if err != nil {
					return err
				}
				cut := time.Now().Add(-olderThan)
				for _, r := range runs {
					if r.Updated.Before(cut) {
						drop[r.RunID] = true
					}
				}
			}
			before, _ := checkpoint.Size(a.checkpointStore())
			ids, err := checkpoint.Prune(ctx, a.checkpointStore(), time.Hour, func(id string) bool { return drop[id] })
			if err != nil {
				return err
			}
			after, _ := checkpoint.Size(a.checkpointStore())
			fmt.Fprintf(a.stdout, "pruned the checkpoints of %d run(s); store %s: %s → %s\n", len(ids), a.checkpointStore(), tui.Bytes(before), tui.Bytes(after))
			return nil
		},
	}
	cmd.Flags().DurationVar(&olderThan, "older-than", 30*24*time.Hour, "prune runs last changed longer ago than this")
	return cmd
}

// Fork makes the fork through the service on the local journal, as
// every front end does; the command resumes it in this process.
func (l *local) Fork(ctx context.Context, id string, req *api.ForkRun) (*api.Run, *service.Forked, error) {
	if req.Workspace != "" {
		ws, err := filepath.Abs(req.Workspace)
		if err != nil {
			return nil, nil, err
		}
		req.Workspace = ws
	}
	run, err := l.Session.Fork(ctx, id, req)
	if err != nil {
		return nil, nil, err
	}
	return forkedOf(ctx, l, id, req.Seq, run)
}

// Rewind asks the server.
func (r *remote) Rewind(ctx context.Context, id string, req *api.RewindRun) (*api.Rewound, error) {
	return r.Client.Rewind(ctx, id, req)
}

// Fork asks the server for the fork; the server starts it if asked.
func (r *remote) Fork(ctx context.Context, id string, req *api.ForkRun) (*api.Run, *service.Forked, error) {
	run, err := r.Client.Fork(ctx, id, req)
	if err != nil {
		return nil, nil, err
	}
	return forkedOf(ctx, r, id, req.Seq, run)
}

// forkedOf is run, the fork of run src at event at, with what it holds
// (service.ForkOf).
func forkedOf(ctx context.Context, b runsBackend, src string, at int64, run *api.Run) (*api.Run, *service.Forked, error) {
	events, err := b.Events(ctx, run.ID)
	if err != nil || len(events) == 0 {
		return nil, nil, fmt.Errorf("the fork %s: %w", run.ID, err)
	}
	srcEvents, _ := b.Events(ctx, src) // without them, After stays 0
	fk, err := service.ForkOf(events, srcEvents, at)
	return run, fk, err
}
