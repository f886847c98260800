package checkpoint

import (
	"context"
	"errors"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// owners is who changed a run's files between two of its snapshots
// (first and last), as its journal tells ([whoChanged]): run, the paths
// the run changed, and outside, those changed outside it.
type owners struct {
	first, last  *agent.Snapshot
	run, outside map[string]bool
}

// stepEnd reports the events that end a step: a batch of tool calls
// that changed files is followed by a checkpoint before any of them, so
// calls whose step ended without one changed no file.
func stepEnd(t journal.Type) bool {
	switch t {
	case journal.ModelResponded, journal.ModelFailed, journal.ContextCompacted, journal.UserMessage,
		journal.RunCompleted, journal.RunFailed, journal.RunCanceled:
		return true
	}
	return false
}

// stops reports whether e, an event that ends a step, is one a stop
// journals when it cancels the execution (a cancel, the time limit, a
// person's interrupt): the snapshot of the step's calls is not taken
// then, so their changes are in the next one.
func stops(e *journal.Event) (bool, error) {
	switch e.Type {
	case journal.RunCanceled, journal.RunFailed, journal.UserMessage:
	default:
		return false, nil
	}
	v, err := agent.Decode(e)
	if err != nil {
		return false, err
	}
	switch p := v.(type) {
	case *agent.RunEnded:
		return e.Type == journal.RunCanceled || p.Reason == agent.ReasonTimeout, nil
	case *agent.UserMessage:
		return p.Source == agent.InterruptSource, nil
	}
	return false, nil
}

// whoChanged is the one rule that tells who changed a run's files: the
// change summary ([SinceStart], [Changed]) and a rewind ([Rewind],
// [PlanRewind]) both read it. It reads events (the run's whole journal)
// from the run's snapshot from (nil: its first) to its newest, and on
// to now when now is not empty (a tree of g's store: the workspace as
// it is); nil when the run has no snapshot.
//
// Each snapshot closes a window of changes since the one before it. The
// window is the run's when a tool call started (or the setup script
// ran) in it and either its step had not ended when the snapshot was
// taken (an execution journals the snapshot of a batch that changed
// files before anything else, so a step that ended without one changed
// none) or its step was cut short (a call without a result: a crash;
// a cancel, the time limit or an interrupt, which take no snapshot of
// the calls), or when the snapshot is a
// rewind's restore (Keel putting back the run's own files: a rewind
// leaves the files only hands changed as they are). Any other window is
// outside the run: it was paused or waiting for a person (an
// approval, a sign-in), or had ended. The window's paths are those its snapshot
// lists, or else those the store tells (it needs both trees); a window
// the store cannot compare (snapshots in two stores, pruned) is in
// neither. Files git ignores and .git are in no snapshot.
func whoChanged(ctx context.Context, events []journal.Event, from *agent.Snapshot, g *Checkpoints, now string) (*owners, error) {
	var o *owners
	if from != nil {
		f := *from
		o = &owners{first: &f, last: &f, run: map[string]bool{}, outside: map[string]bool{}}
	}
	stores := map[string]*Checkpoints{}
	if g != nil {
		stores[g.Store()] = g
	}
	// store returns the store at dir, opened once; nil when there is
	// none (it is not created).
	store := func(dir string) (*Checkpoints, error) {
		if c, ok := stores[dir]; ok {
			return c, nil
		}
		c, err := ReadCheckpoints(ctx, dir, "")
		if errors.Is(err, ErrNone) {
			c, err = nil, nil
		}
		if err != nil {
			return nil, err
		}
		stores[dir] = c
		return c, nil
	}
	// mark attributes the window that snap closes.
	mark := func(snap agent.Snapshot, listed []agent.FileChange, more int, mine bool) error {
		prev := o.last
		o.last = &snap
		if prev.Tree == snap.Tree {
			return nil
		}
		var paths []string
		if len(listed) > 0 && more == 0 && prev.Store == snap.Store {
			for _, f := range listed {
				paths = append(paths, f.Path)
			}
		} else if prev.Store == snap.Store {
			c, err := store(snap.Store)
			if err != nil {
				return err
			}
			if c != nil && c.Has(ctx, prev.Tree) && c.Has(ctx, snap.Tree) {
				fc, err := c.Changes(ctx, prev.Tree, snap.Tree)
				if err != nil {
					return err
				}
				for _, f := range fc {
					paths = append(paths, f.Path)
				}
			}
		}
		for _, p := range paths {
			if mine {
				o.run[p] = true
			} else {
				o.outside[p] = true
			}
		}
		return nil
	}
	// open: a call or the setup script started since the newest
	// snapshot and its step has not ended, or was cut short (cut: the
	// window is the run's whatever follows until the next snapshot);
	// running: calls started and without a result.
	open, cut := false, false
	running := map[string]bool{}
	for i := range events {
		e := &events[i]
		if from != nil && e.Seq <= from.Seq {
			continue
		}
		switch {
		case e.Type == journal.ToolStarted || e.Type == journal.ToolFinished:
			v, err := agent.Decode(e)
			if err != nil {
				return nil, err
			}
			switch p := v.(type) {
			case *agent.ToolStarted:
				running[p.CallID], open = true, true
			case *agent.ToolFinished:
				delete(running, p.CallID)
			}
			continue
		case e.Type == journal.SetupFinished, e.Type == journal.WorkspaceRestoring:
			// A rewind's intent: its writes are Keel's, the run's, up
			// to the snapshot that says how far it got.
			open = true
			continue
		case stepEnd(e.Type):
			if open && !cut {
				stop, err := stops(e)
				if err != nil {
					return nil, err
				}
				cut = stop || len(running) > 0
				open = cut
			}
			continue
		case e.Type != journal.WorkspaceCheckpoint && e.Type != journal.WorkspaceRestored:
			continue
		}
		v, err := agent.Decode(e)
		if err != nil {
			return nil, err
		}
		var snap agent.Snapshot
		var listed []agent.FileChange
		more, mine := 0, open
		switch p := v.(type) {
		case *agent.WorkspaceCheckpoint:
			snap = agent.Snapshot{Seq: e.Seq, Tree: p.Tree, Commit: p.Commit, Store: p.Store}
			listed, more = p.Files, p.MoreFiles
		case *agent.WorkspaceRestored:
			snap = agent.Snapshot{Seq: e.Seq, Tree: p.Tree, Commit: p.Commit, Store: p.Store}
			listed, more, mine = p.Files, p.MoreFiles, true
		}
		open, cut = false, false
		clear(running)
		if o == nil {
			o = &owners{first: &snap, last: &snap, run: map[string]bool{}, outside: map[string]bool{}}
			continue
		}
		if err := mark(snap, listed, more, mine); err != nil {
			return nil, err
		}
	}
	if o != nil && now != "" && g != nil {
		last := o.last
		if err := mark(agent.Snapshot{Tree: now, Store: g.Store()}, nil, 0, open); err != nil {
			return nil, err
		}
		o.last = last
	}
	return o, nil
}
