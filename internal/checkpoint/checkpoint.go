// Package checkpoint is Keel's one home for a run's git workspace: the
// commit a run started on and its files compared with that commit
// (Start, DiffFrom: unified diffs), snapshots of the workspace into
// Keel's own object store (Checkpoints: full snapshots through git,
// later ones from the workspace's changes without git, restores,
// diffs between snapshots, pruning), and their tie to runs: the hook an
// execution calls to journal a workspace.checkpoint after each step that
// changed a file, the rewind of a run's files to an earlier checkpoint
// (journaled as workspace.restored), the files of a fork, and the
// pruning of old runs' snapshots. The local command line and the team
// server both use it, so rewind and fork behave the same through either
// (docs/checkpoints.md).
//
// Host git is run on a directory an agent could write, so it is run only
// in ways that execute nothing from the repository: fsmonitor and hooks
// are off, and the file contents are compared here, not by git diff,
// which would run the repository's clean filters and external diff
// drivers. Git reads the commit's tree (ls-tree, cat-file) and the list
// of files it does not ignore (ls-files).
package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/tool"
)

// Ref is the ref of run id in a checkpoint store: a chain of commits,
// one per snapshot, that keeps the run's snapshots until it is pruned.
func Ref(runID string) string { return "refs/keel/runs/" + runID }

// Hook returns an agent.ExecParams.Checkpoint that snapshots workspace
// into the store at dir, and a release that ends it. It opens the store
// on first use and then follows the workspace's changes (Checkpoints'
// Watch), so a later snapshot reads only the files that changed; call
// release when the execution ends (it closes the watches; the hook then
// takes full snapshots). Without git it returns nil (no checkpoints)
// and a release that does nothing.
func Hook(dir, workspace string) (hook func(ctx context.Context, runID string, prev *agent.Snapshot) (*agent.WorkspaceCheckpoint, error), release func()) {
	hook, _, release = WarmHook(dir, workspace)
	return hook, release
}

// WarmHook is [Hook] with warm, which opens the store, starts following
// the workspace and takes the full snapshot the hook's first call would
// take, ahead of it: called while the rest of an execution is prepared
// (the sandbox's start, the journal's load), it leaves the first call
// only the changes made since (none, usually), so the first step of an
// execution, a resume's above all, does not wait for git. The first
// call waits for a warm in progress; a warm that fails leaves the full
// snapshot to it. Call warm once, before the hook's first call; it is
// nil when hook is.
func WarmHook(dir, workspace string) (hook func(ctx context.Context, runID string, prev *agent.Snapshot) (*agent.WorkspaceCheckpoint, error), warm func(ctx context.Context), release func()) {
	if !Available() {
		return nil, nil, func() {}
	}
	var cp *Checkpoints
	var mu sync.Mutex
	var unwatch func()
	release = func() {
		mu.Lock()
		defer mu.Unlock()
		if unwatch != nil {
			unwatch()
		}
		unwatch = func() {}
	}
	// open opens the store on first use (mu held); a failed open is
	// tried again at the next snapshot rather than leaving the run
	// without checkpoints.
	open := func(ctx context.Context) error {
		if cp != nil {
			return nil
		}
		c, err := OpenCheckpoints(ctx, dir, workspace)
		if err != nil {
			return err
		}
		cp = c
		if unwatch == nil {
			unwatch = cp.Watch()
		}
		return nil
	}
	warm = func(ctx context.Context) {
		mu.Lock()
		defer mu.Unlock()
		if open(ctx) == nil {
			_, _ = cp.Snapshot(ctx)
		}
	}
	return func(ctx context.Context, runID string, prev *agent.Snapshot) (*agent.WorkspaceCheckpoint, error) {
		mu.Lock()
		if err := open(ctx); err != nil {
			mu.Unlock()
			return nil, err
		}
		mu.Unlock()
		start := time.Now()
		tree, err := cp.Snapshot(ctx)
		if err != nil {
			return nil, err
		}
		if prev != nil && prev.Tree == tree && prev.Store == cp.Store() {
			return nil, nil
		}
		out := &agent.WorkspaceCheckpoint{Tree: tree, Store: cp.Store()}
		parent := ""
		if prev != nil && prev.Store == cp.Store() && cp.Has(ctx, prev.Tree) {
			files, err := cp.Changes(ctx, prev.Tree, tree)
			if err != nil {
				return nil, err
			}
			out.Files, out.MoreFiles = bound(files)
			parent = prev.Commit
		}
		if out.Commit, err = cp.Keep(ctx, Ref(runID), tree, parent, fmt.Sprintf("run %s", runID)); err != nil {
			return nil, err
		}
		out.DurationMS = time.Since(start).Milliseconds()
		return out, nil
	}, warm, release
}

func bound(files []FileChange) ([]agent.FileChange, int) {
	n := min(len(files), agent.MaxCheckpointFiles)
	out := make([]agent.FileChange, n)
	for i := range n {
		out[i] = agent.FileChange{Path: files[i].Path, Status: string(files[i].Status)}
	}
	return out, len(files) - n
}

// ErrNone is returned when a run has no checkpoint at or before the event
// asked for (it ran before checkpoints, without git, or the event is
// before its first).
var ErrNone = errors.New("no workspace checkpoint")

// ErrOff is returned with [ErrNone] (errors.Is matches both) for a run
// created with its checkpoints off (agent.Settings.NoCheckpoints).
var ErrOff = errors.New("the run was started with workspace checkpoints off (--no-checkpoints, or checkpoints = false in a config file)")

// off reports whether the run of events was created with checkpoints off.
func off(events []journal.Event) bool {
	if len(events) == 0 || events[0].Type != journal.RunCreated {
		return false
	}
	v, err := agent.Decode(&events[0])
	if err != nil {
		return false
	}
	c, ok := v.(*agent.RunCreated)
	return ok && c.Settings != nil && c.Settings.NoCheckpoints
}

// At returns the newest checkpoint of events (a run's events from 1) at
// or before event seq, and the tool calls that finished after it up to
// seq (whose effects on the files it does not have).
func At(events []journal.Event, seq int64) (cp *agent.Snapshot, after int, err error) {
	for i := range events {
		e := &events[i]
		if e.Seq > seq {
			break
		}
		switch e.Type {
		case journal.WorkspaceCheckpoint, journal.WorkspaceRestored:
			v, err := agent.Decode(e)
			if err != nil {
				return nil, 0, err
			}
			switch p := v.(type) {
			case *agent.WorkspaceCheckpoint:
				cp = &agent.Snapshot{Seq: e.Seq, Tree: p.Tree, Commit: p.Commit, Store: p.Store}
			case *agent.WorkspaceRestored:
				cp = &agent.Snapshot{Seq: e.Seq, Tree: p.Tree, Commit: p.Commit, Store: p.Store}
			}
			after = 0
		case journal.ToolFinished:
			after++
		}
	}
	if cp == nil {
		if off(events) {
			return nil, 0, fmt.Errorf("%w: %w", ErrOff, ErrNone)
		}
		return nil, 0, fmt.Errorf("%w at or before event %d", ErrNone, seq)
	}
	return cp, after, nil
}

// AtEvent is the checkpoint whose files are those "at event seq": when
// tool calls finished after [At]'s checkpoint up to seq (seq is a
// tool.finished, say), it is the checkpoint journaled at the end of
// that step, which has their effects, and later counts the calls of that
// step that finished after seq (their effects are in it too). When the
// step journaled no checkpoint (its calls changed no file, or the
// snapshot failed) it is At's, and missing counts the calls whose
// effects it may lack.
func AtEvent(events []journal.Event, seq int64) (cp *agent.Snapshot, later, missing int, err error) {
	cp, after, err := At(events, seq)
	if errors.Is(err, ErrNone) && !errors.Is(err, ErrOff) {
		// Before the run's first checkpoint (its task, say: chat's /undo
		// after the first answer): that checkpoint has the files as they
		// were then if nothing that changes files came between.
		if first := firstUnchanged(events, seq); first != nil {
			return first, 0, 0, nil
		}
	}
	if err != nil || after == 0 {
		return cp, 0, 0, err
	}
	// From the last call finished up to seq: seq itself may say that
	// their step ended (a run.completed, a model's next answer).
	var done int64
	for i := range events {
		if e := &events[i]; e.Seq > seq {
			break
		} else if e.Type == journal.ToolFinished {
			done = e.Seq
		}
	}
	changed := true
scan:
	for i := range events {
		e := &events[i]
		if e.Seq <= done {
			continue
		}
		switch e.Type {
		case journal.WorkspaceCheckpoint:
			v, err := agent.Decode(e)
			if err != nil {
				return nil, 0, 0, err
			}
			p := v.(*agent.WorkspaceCheckpoint)
			return &agent.Snapshot{Seq: e.Seq, Tree: p.Tree, Commit: p.Commit, Store: p.Store}, later, 0, nil
		case journal.ToolFinished:
			if e.Seq > seq {
				later++
			}
		case journal.ToolStarted, journal.GateDecided, journal.ApprovalRequested, journal.ApprovalResolved,
			journal.AuthRequired, journal.AuthResolved, journal.InputRequested, journal.InputAnswered,
			journal.SandboxEgress, journal.SandboxQuarantine:
		case journal.ModelResponded, journal.ModelFailed, journal.ContextCompacted, journal.UserMessage,
			journal.RunCompleted, journal.RunFailed, journal.RunCanceled:
			// The step ended without a checkpoint: the executor
			// journals one whenever the files changed, so they did not.
			changed = false
			break scan
		default:
			// A pause, a resume or a rewind: files may have changed
			// by other hands since; the step's own effect is unknown.
			break scan
		}
	}
	if !changed {
		return cp, 0, 0, nil
	}
	return cp, 0, after, nil
}

// ErrBusy is returned by Rewind for a run that a process executes.
var ErrBusy = errors.New("the run is executing")

// RangeError is Rewind's error for an event the run does not have.
type RangeError struct {
	Run       string
	Seq, Last int64
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("event %d: run %s has events 1 to %d", e.Seq, e.Run, e.Last)
}

// Rewound is what [Rewind] did: the workspace.restored it journaled
// (Event; Restored its payload), the event that undoes it (Undo: the
// run's snapshot of the files it replaced), and the files it left as
// they were because only hands outside the run changed them since the
// checkpoint (Kept, sorted).
type Rewound struct {
	Restored *agent.WorkspaceRestored
	Event    *journal.Event
	Undo     int64
	Kept     []string
}

// Rewind restores the files of run runID's workspace to its newest
// checkpoint at or before event to, and journals workspace.restored
// (with who rewound). It puts back what the run changed since that
// checkpoint, and leaves as they are the files only hands outside the
// run changed since (a file a person wrote after the run, say):
// [whoChanged] tells them from the run's journal. A file changed by
// both is put back only with o.Force; otherwise nothing is changed and
// the error is a *[ConflictError] naming them. The run must not be
// executing: it takes the run's lease when the store has leases, and
// appends only after the event it read. The snapshot of the files it
// replaced is kept in the run's ref and named in the event (Before), so
// that a rewind can be undone by rewinding to Rewound.Undo.
func Rewind(ctx context.Context, store journal.Store, runID string, to int64, o RewindOptions) (*Rewound, error) {
	if l, ok := store.(journal.Locker); ok {
		unlock, err := l.Lock(ctx, runID)
		if errors.Is(err, journal.ErrLocked) {
			return nil, fmt.Errorf("%w: %w", ErrBusy, err)
		}
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	events, err := journal.ReadVerified(ctx, store, runID)
	if err != nil {
		return nil, err
	}
	last := events[len(events)-1].Seq
	if to < 1 || to > last {
		return nil, &RangeError{Run: runID, Seq: to, Last: last}
	}
	st, err := agent.Fold(runID, events)
	if err != nil {
		return nil, err
	}
	cp, later, missing, err := AtEvent(events, to)
	if err != nil {
		return nil, err
	}
	g, err := openStored(ctx, cp.Store, st.Created.Workspace)
	if err != nil {
		return nil, err
	}
	// Journal first: the intent (and the snapshot of the files it
	// replaces) is journaled before any file is written, as tool.started
	// is before a call runs; a failed append writes nothing. The end
	// (workspace.restored) follows the files. A crash between the two
	// leaves the intent open (agent.State.Restoring): keel runs show
	// says so, and the run's next snapshot (a resume, the next rewind)
	// records whether the files are the rewind's.
	var kept []string
	var r *agent.WorkspaceRestored
	undo := int64(0)
	intent := last // the event the end is appended after
	_, _, _, err = g.RestoreSome(ctx, cp.Tree, func(before string, changed []FileChange) ([]string, error) {
		who, err := whoChanged(ctx, events, cp, g, before)
		if err != nil {
			return nil, err
		}
		keep, both := who.sortOut(changed)
		if len(both) > 0 && !o.Force {
			return nil, &ConflictError{To: cp.Seq, Paths: both}
		}
		kept = keep
		return keep, nil
	}, func(before, tree string, files []FileChange) error {
		r = &agent.WorkspaceRestored{To: cp.Seq, Tree: tree, Before: before, Store: cp.Store, By: o.By, Token: o.Token, Later: later, Missing: missing, Kept: kept}
		if cp.Seq != to {
			r.Asked = to
		}
		r.Files, r.MoreFiles = bound(files)
		// The files replaced, when the run's newest checkpoint does not
		// have them (changed since by hand, say), get a checkpoint of
		// their own just before the restore: rewinding to it undoes the
		// rewind. Both stay in the run's chain until the run is pruned.
		// The same snapshot closes an earlier rewind's open intent.
		var drafts []journal.Draft
		parent := ""
		if st.Checkpoint != nil && st.Checkpoint.Store == cp.Store {
			parent, undo = st.Checkpoint.Commit, st.Checkpoint.Seq
		}
		if st.Checkpoint == nil || st.Checkpoint.Tree != before || st.Checkpoint.Store != cp.Store || st.Restoring != nil {
			b := &agent.WorkspaceCheckpoint{Tree: before, Store: cp.Store}
			if st.Checkpoint != nil && st.Checkpoint.Store == cp.Store {
				changed, err := g.Changes(ctx, st.Checkpoint.Tree, before)
				if err != nil {
					return err
				}
				b.Files, b.MoreFiles = bound(changed)
			}
			var err error
			if b.Commit, err = g.Keep(ctx, Ref(runID), before, parent, fmt.Sprintf("run %s: before the rewind to event %d", runID, cp.Seq)); err != nil {
				return err
			}
			parent, undo = b.Commit, last+1
			typ, v := st.CloseRestoring(b)
			drafts = append(drafts, draft(typ, v))
		}
		var err error
		if r.Commit, err = g.Keep(ctx, Ref(runID), tree, parent, fmt.Sprintf("run %s: rewound to event %d", runID, cp.Seq)); err != nil {
			return err
		}
		drafts = append(drafts, draft(journal.WorkspaceRestoring, (*agent.WorkspaceRestoring)(r)))
		evs, err := store.Append(ctx, runID, last, drafts...)
		if err != nil {
			if errors.Is(err, journal.ErrConflict) {
				return fmt.Errorf("%w: it moved on while its rewind was prepared; no file was changed (%v)", ErrBusy, err)
			}
			return fmt.Errorf("journaling the rewind failed, so no file was changed: %w", err)
		}
		intent = evs[len(evs)-1].Seq
		return nil
	})
	if err != nil {
		if r != nil && intent > last {
			return nil, fmt.Errorf("the rewind journaled as event %d failed while it wrote the files, which may be partly rewound (keel runs rewind %s --to %d tries again): %w", intent, runID, to, err)
		}
		return nil, err
	}
	evs, err := store.Append(context.WithoutCancel(ctx), runID, intent, draft(journal.WorkspaceRestored, r))
	if err != nil {
		return nil, fmt.Errorf("the files were rewound, but journaling the end of the rewind (event %d) failed: the run shows it unfinished until its next snapshot records the files: %w", intent, err)
	}
	return &Rewound{Restored: r, Event: &evs[len(evs)-1], Undo: undo, Kept: kept}, nil
}

// Plan is what a rewind to an event would change, computed without
// changing anything ([PlanRewind]): a person confirms it first.
type Plan struct {
	// To is the checkpoint's event a rewind would restore; Asked, Later
	// and Missing are as [Rewind]'s workspace.restored has them.
	To      int64
	Asked   int64
	Later   int
	Missing int
	// Files are the files the rewind would change, forced.
	Files []FileChange
	// Both are the paths among Files that changed since the checkpoint
	// both by the run and outside it (by hand, another run): the rewind
	// puts them back only when forced ([ConflictError]).
	Both []string
	// Kept are the files that differ from the checkpoint but that only
	// hands outside the run changed since: the rewind leaves them as
	// they are.
	Kept []FileChange
}

// PlanRewind returns what [Rewind] to event to would change in the
// workspace of the run of events (all of them), resolving the event
// with [AtEvent] and telling who changed the files as Rewind does. It
// snapshots the workspace into the run's store (no ref, no journal
// event) and writes no file of it.
func PlanRewind(ctx context.Context, events []journal.Event, to int64) (*Plan, error) {
	last := events[len(events)-1].Seq
	if to < 1 || to > last {
		return nil, &RangeError{Run: events[0].RunID, Seq: to, Last: last}
	}
	st, err := agent.Fold(events[0].RunID, events)
	if err != nil {
		return nil, err
	}
	cp, later, missing, err := AtEvent(events, to)
	if err != nil {
		return nil, err
	}
	g, err := openStored(ctx, cp.Store, st.Created.Workspace)
	if err != nil {
		return nil, err
	}
	if !g.Has(ctx, cp.Tree) {
		return nil, fmt.Errorf("%w: %s", ErrMissing, cp.Tree)
	}
	now, err := g.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	p := &Plan{To: cp.Seq, Later: later, Missing: missing}
	if cp.Seq != to {
		p.Asked = to
	}
	changes, err := g.Changes(ctx, now, cp.Tree)
	if err != nil {
		return nil, err
	}
	who, err := whoChanged(ctx, events, cp, g, now)
	if err != nil {
		return nil, err
	}
	keep, both := who.sortOut(changes)
	p.Files, p.Both = without(changes, keep), both
	for _, f := range changes {
		if slices.Contains(keep, f.Path) {
			p.Kept = append(p.Kept, f)
		}
	}
	return p, nil
}

func draft(t journal.Type, v any) journal.Draft {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain payload structs
	}
	return journal.Draft{Type: t, Time: time.Now(), Payload: b}
}

// firstUnchanged returns the first checkpoint after event seq when only
// events that change no file (the model's answers, gate decisions, a
// person's messages) come between; nil otherwise.
func firstUnchanged(events []journal.Event, seq int64) *agent.Snapshot {
	for i := range events {
		e := &events[i]
		if e.Seq <= seq {
			continue
		}
		switch e.Type {
		case journal.WorkspaceCheckpoint:
			v, err := agent.Decode(e)
			if err != nil {
				return nil
			}
			p := v.(*agent.WorkspaceCheckpoint)
			return &agent.Snapshot{Seq: e.Seq, Tree: p.Tree, Commit: p.Commit, Store: p.Store}
		case journal.ModelResponded, journal.ModelFailed, journal.GateDecided, journal.UserMessage, journal.ContextCompacted:
		default:
			return nil
		}
	}
	return nil
}

// ForkFiles gives the fork of a run at event seq (events are all of the
// source's, those after seq too) its files: those "at event seq" as [AtEvent] finds them for
// a rewind and a diff at the same event, written into workspace (the
// source's own workspace, restored in place, or a new directory). One
// case differs: when seq is within a step whose other calls finished
// after it, the fork runs those calls itself, so its files are [At]'s
// checkpoint, without their effects. It returns the workspace.restored
// payload to journal in the fork, with To the source's event of that
// checkpoint (Asked, Missing as a rewind's), and the number of tool calls
// finished up to seq whose effects the files lack.
func ForkFiles(ctx context.Context, events []journal.Event, seq int64, source, workspace, by string) (*agent.WorkspaceRestored, int, error) {
	cp, later, after, err := AtEvent(events, seq)
	if err == nil && later > 0 {
		cp, after, err = At(events, seq)
	}
	if err != nil {
		return nil, 0, err
	}
	src, err := openStored(ctx, cp.Store, source)
	if err != nil {
		return nil, 0, err
	}
	r := &agent.WorkspaceRestored{To: cp.Seq, Tree: cp.Tree, Commit: cp.Commit, Store: cp.Store, By: by, Missing: after}
	if cp.Seq != seq {
		r.Asked = seq
	}
	if SameDir(source, workspace) {
		before, files, err := src.Restore(ctx, cp.Tree)
		if err != nil {
			return nil, 0, err
		}
		r.Before = before
		r.Files, r.MoreFiles = bound(files)
		if before != cp.Tree {
			// The files the fork replaced stay in the source's chain.
			if _, err := src.Keep(ctx, Ref(journalRun(events)), before, "", "files replaced by a fork"); err != nil {
				return nil, 0, err
			}
		}
		return r, after, nil
	}
	if _, err := src.Materialize(ctx, cp.Tree, workspace); err != nil {
		return nil, 0, err
	}
	return r, after, nil
}

func journalRun(events []journal.Event) string { return events[0].RunID }

// Prune deletes the snapshots of the runs drop returns true for from the
// store at dir (and the objects no other run's snapshot shares).
func Prune(ctx context.Context, dir string, grace time.Duration, drop func(runID string) bool) ([]string, error) {
	refs, err := pruneRefs(ctx, dir, grace, func(ref string) bool {
		id, ok := strings.CutPrefix(ref, "refs/keel/runs/")
		return ok && drop(id)
	})
	ids := make([]string, 0, len(refs))
	for _, r := range refs {
		id, _ := strings.CutPrefix(r, "refs/keel/runs/")
		ids = append(ids, id)
	}
	return ids, err
}

// Diff returns what run's files changed from its first checkpoint to
// the files "at event seq" (the whole run: seq of its newest event), as
// [AtEvent] finds them for a rewind to the same event: for a
// tool.finished, the checkpoint of its step, which has its effect. It
// returns the two checkpoints' events.
func Diff(ctx context.Context, events []journal.Event, seq int64) (changes []Change, from, to int64, err error) {
	first, _, err := At(events, firstCheckpoint(events))
	if err != nil {
		return nil, 0, 0, err
	}
	if seq < first.Seq {
		// Before the first checkpoint: nothing to compare.
		return nil, 0, 0, fmt.Errorf("%w at or before event %d", ErrNone, seq)
	}
	cp, _, _, err := AtEvent(events, seq)
	if err != nil {
		return nil, 0, 0, err
	}
	st, err := agent.Fold(events[0].RunID, events[:1])
	if err != nil {
		return nil, 0, 0, err
	}
	g, err := ReadCheckpoints(ctx, cp.Store, st.Created.Workspace)
	if err != nil {
		return nil, 0, 0, err
	}
	for _, t := range []string{first.Tree, cp.Tree} {
		if !g.Has(ctx, t) {
			return nil, 0, 0, fmt.Errorf("%w: %s", ErrMissing, t)
		}
	}
	if changes, err = g.Diff(ctx, first.Tree, cp.Tree); err != nil {
		return nil, 0, 0, err
	}
	changes, err = Mask(st.Created, changes)
	return changes, first.Seq, cp.Seq, err
}

// Mask empties the patch of every change to a path the run's policy
// denies (agent.DeniedPaths, as the file tools apply it: the path as
// written or where it really is through links) and marks it Denied, so
// that a diff shown to a person never holds a denied file's content.
func Mask(created *agent.RunCreated, changes []Change) ([]Change, error) {
	denied, err := agent.DeniedPaths(created)
	if err != nil {
		return nil, err
	}
	if len(denied) == 0 {
		return changes, nil
	}
	ws, err := tool.NewWorkspace(created.Workspace, "", nil)
	if err != nil {
		// No workspace to resolve links in: hide by name.
		ws = nil
	} else {
		defer ws.Close()
		ws.Hide(denied)
	}
	for i := range changes {
		c := &changes[i]
		hidden := ws == nil && slices.ContainsFunc(denied, func(d string) bool { return c.Path == d || strings.HasPrefix(c.Path, strings.TrimSuffix(d, "/")+"/") })
		if ws != nil {
			_, err := ws.Resolve(c.Path)
			hidden = errors.Is(err, tool.ErrHidden) || ws.Hidden(c.Path)
		}
		if hidden {
			*c = Change{Path: c.Path, Status: c.Status, Denied: true}
		}
	}
	return changes, nil
}

// firstCheckpoint is the event of events' first checkpoint (0: none).
func firstCheckpoint(events []journal.Event) int64 {
	for _, e := range events {
		if journal.KeepsStatus(e.Type) {
			return e.Seq
		}
	}
	return 0
}

// SinceStart returns what run's files changed from the git commit it
// started on (created.Git) to its workspace: files the repository's
// ignore rules at the start do not ignore (DiffFrom: what the run did
// to git's index or ignore rules hides nothing). A run that no process
// executes (by events, its journal: its newest event is not one of a
// running run) is compared as it left its files, its newest checkpoint:
// files changed since (by another run in the workspace, by hand) are
// shown as the run left them, or left out when the run did not change
// them, and named in Summary.Later; without events, or without a
// checkpoint the store still has, the workspace as it is now. A run
// journaled when Keel kept its own files in the workspace (no state
// directory) leaves out .keel/. When git cannot read the start commit
// any more (ErrHistory: the run deleted .git/objects, say), the error
// is a *[HistoryError] holding what the run changed by its own
// checkpoints (nil events: not looked for).
func SinceStart(ctx context.Context, created *agent.RunCreated, events []journal.Event) (*Summary, error) {
	if created.Git == nil {
		return nil, ErrNoCommit
	}
	skip := func(p string) bool {
		return created.StateDir == "" && (p == ".keel" || strings.HasPrefix(p, ".keel/"))
	}
	base := Base{Commit: created.Git.Commit, Exclude: created.Git.Exclude, Since: created.Git.Time, Refs: created.Git.Refs, RefsAll: created.Git.RefsAll, Control: created.Git.Control}
	if !created.Git.Since.IsZero() {
		base.Since, base.SinceExact = created.Git.Since, true
	}
	sum := &Summary{}
	upto := left(events)
	if upto != nil {
		sum.At = upto.seq
	}
	var err error
	sum.Changes, sum.Later, err = diffFrom(ctx, created.Workspace, base, upto.bound(), skip)
	if errors.Is(err, ErrMissing) && upto != nil {
		// Pruned meanwhile: the workspace as it is now.
		sum.At = 0
		sum.Changes, sum.Later, err = diffFrom(ctx, created.Workspace, base, nil, skip)
	}
	if errors.Is(err, ErrHistory) {
		he := &HistoryError{Cause: err}
		if len(events) > 0 {
			if cs, from, to, derr := Diff(ctx, events, events[len(events)-1].Seq); derr == nil {
				he.Changes, he.From, he.To = cs, from, to
			}
		}
		return nil, he
	}
	if err != nil {
		return nil, err
	}
	if len(events) > 0 {
		// Only what the run did: its snapshots tell the files that
		// differed from the commit when it started, and those changed
		// while it did nothing. A run without them (checkpoints off,
		// pruned) is shown against the commit alone.
		if o, err := whoChanged(ctx, events, nil, nil, ""); err == nil && o != nil && o.first.Store != "" {
			told := *sum
			err := attribute(ctx, created, &told, o)
			switch {
			case err == nil:
				sum = &told
			case !errors.Is(err, ErrMissing):
				return nil, err
			}
		}
	}
	if sum.Changes, err = Mask(created, sum.Changes); err != nil {
		return nil, err
	}
	return sum, nil
}

// Summary is what a run changed ([SinceStart]).
type Summary struct {
	Changes []Change
	// At is the event of the run's newest checkpoint when the run was
	// compared as it left its files there; 0: its workspace as it is
	// now (the run executes, or has no checkpoint).
	At int64
	// Later names the files that changed after the run (by another run,
	// by hand), sorted: Changes show those the run changed as it left
	// them (Change.Later) and leave out the others.
	Later []string
	// From is the event of the run's first checkpoint, the files it
	// started with, when Before and Outside were told by its
	// checkpoints; 0: the run has none (checkpoints off, pruned), and
	// every file that differs from the start commit is listed.
	From int64
	// Before names the files that already differed from the start
	// commit when the run started (uncommitted or untracked: a person's
	// work, an earlier run's) and that the run left as it found them:
	// not its changes, left out of Changes. Sorted.
	Before []string
	// Outside names the files that changed only while the run did
	// nothing that changes files (paused, or waiting for a person's
	// approval: by a person or another run; a rewind's restore is the
	// run's, [whoChanged]): not its changes, left out of Changes (Change.Outside marks those
	// the run changed too). Sorted.
	Outside []string
}

// BeforeNote says which files differed from the start commit when the
// run started and were left as they were ([Summary]'s Before): "" when
// none.
func BeforeNote(before []string) string {
	if len(before) == 0 {
		return ""
	}
	return fmt.Sprintf("%d file(s) already differed from the start commit when the run started (uncommitted or untracked) and the run left them as they were: not counted as the run's: %s", len(before), names(before))
}

// OutsideNote says which files changed while the run did nothing
// ([Summary]'s Outside): "" when none.
func OutsideNote(outside []string) string {
	if len(outside) == 0 {
		return ""
	}
	return fmt.Sprintf("%d file(s) changed while the run was paused or waiting (by a person or another run), not by the run: not counted as the run's: %s", len(outside), names(outside))
}

// names lists up to 10 paths, quoted as git quotes them.
func names(paths []string) string {
	const shown = 10
	out := make([]string, 0, shown)
	for _, p := range paths[:min(len(paths), shown)] {
		out = append(out, QuotePath(p))
	}
	more := ""
	if len(paths) > shown {
		more = fmt.Sprintf(" and %d more", len(paths)-shown)
	}
	return strings.Join(out, ", ") + more
}

// LaterNote says which files changed after a run ([Summary]'s Later,
// against its checkpoint of event at), for a person reading the run's
// changes: "" when none did.
func LaterNote(at int64, later []string) string {
	if len(later) == 0 {
		return ""
	}
	return fmt.Sprintf("%d file(s) changed in the workspace after the run's last checkpoint (event %d), by another run or by hand: not counted as the run's (a file the run changed is shown as the run left it): %s",
		len(later), at, names(later))
}

// runLeft is where a run left its files: its newest checkpoint (event
// seq).
type runLeft struct {
	Upto
	seq int64
}

func (l *runLeft) bound() *Upto {
	if l == nil {
		return nil
	}
	return &l.Upto
}

// left returns where the run of events left its files, or nil when a
// process may be changing them still (its status is running) or it has
// no checkpoint.
func left(events []journal.Event) *runLeft {
	if len(events) == 0 {
		return nil
	}
	types := make([]journal.Type, len(events))
	for i, e := range events {
		types[i] = e.Type
	}
	if s, _ := journal.TailStatus(types...); s == journal.StatusRunning {
		return nil
	}
	last := events[len(events)-1]
	cp, _, err := At(events, last.Seq)
	if err != nil || cp.Store == "" || cp.Tree == "" {
		return nil
	}
	return &runLeft{Upto{Store: cp.Store, Tree: cp.Tree, Time: last.Time}, cp.Seq}
}

// HistoryError is SinceStart's error when git cannot read the run's
// start commit (Cause wraps ErrHistory): Changes are what the run
// changed by Keel's own checkpoints instead, from its first (event
// From) to its newest (event To), its policy's denied paths masked;
// From is 0 when it has none.
type HistoryError struct {
	Cause    error
	Changes  []Change
	From, To int64
}

func (e *HistoryError) Error() string {
	if e.From == 0 {
		return e.Cause.Error() + "; the run has no checkpoints to show its changes with instead"
	}
	return e.Cause.Error()
}

func (e *HistoryError) Unwrap() error { return e.Cause }

// ErrNoCommit is SinceStart's error for a run that recorded no git
// commit at its start.
var ErrNoCommit = errors.New("no git commit recorded at the run's start")
