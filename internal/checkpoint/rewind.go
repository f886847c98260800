package checkpoint

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// RewindOptions are a rewind's: who rewinds (By, and Token, their API
// token on a server), and Force, which replaces files changed both by
// the run and outside it since the checkpoint ([ConflictError]).
type RewindOptions struct {
	By, Token string
	Force     bool
}

// ConflictError is Rewind's error when files the rewind would put back
// were changed since the checkpoint both by the run (or by Keel's
// restores) and outside it (by hand, by another run): rewinding them
// would undo both, so it is done only when forced. Paths are sorted.
type ConflictError struct {
	To    int64
	Paths []string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%d file(s) changed since the checkpoint of event %d both by the run and outside it (by hand, or by another run): %s; the rewind would undo both", len(e.Paths), e.To, names(e.Paths))
}

// origins tells who changed which files since a checkpoint: the run
// (its steps, and Keel's own rewinds of its files) or hands outside it.
type origins struct{ run, hand map[string]bool }

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

// changedSince reads from events (a run's whole journal) who changed the
// files between its snapshot from and now, the tree of its workspace as
// it is. A snapshot records the run's own changes when tool calls (or
// the setup script) started since the one before and their step had not
// ended when it was taken (an execution journals the snapshot of a batch
// that changed files before anything else, so a step that ended without
// one changed none; a batch cut short by a pause or a crash is the run's
// too); a rewind's restore is Keel's, done on the run's files, and
// counts as the run's; any other change is by hands outside the run:
// while it was paused or waiting for a person, or after its newest
// snapshot. Files of windows the store cannot compare are in neither.
func changedSince(ctx context.Context, g *Checkpoints, events []journal.Event, from *agent.Snapshot, now string) (*origins, error) {
	o := &origins{run: map[string]bool{}, hand: map[string]bool{}}
	prev := *from
	open := false
	mark := func(snap agent.Snapshot, listed []agent.FileChange, complete, mine bool) error {
		defer func() { prev = snap }()
		if prev.Tree == snap.Tree {
			return nil
		}
		var paths []string
		switch {
		case complete && prev.Store == snap.Store:
			for _, f := range listed {
				paths = append(paths, f.Path)
			}
		case prev.Store == g.Store() && snap.Store == g.Store() && g.Has(ctx, prev.Tree) && g.Has(ctx, snap.Tree):
			fc, err := g.Changes(ctx, prev.Tree, snap.Tree)
			if err != nil {
				return err
			}
			for _, f := range fc {
				paths = append(paths, f.Path)
			}
		}
		for _, p := range paths {
			if mine {
				o.run[p] = true
			} else {
				o.hand[p] = true
			}
		}
		return nil
	}
	for i := range events {
		e := &events[i]
		if e.Seq <= from.Seq {
			continue
		}
		switch {
		case e.Type == journal.ToolStarted || e.Type == journal.SetupFinished:
			open = true
			continue
		case stepEnd(e.Type):
			open = false
			continue
		case e.Type != journal.WorkspaceCheckpoint && e.Type != journal.WorkspaceRestored:
			continue
		}
		v, err := agent.Decode(e)
		if err != nil {
			return nil, err
		}
		var err2 error
		switch p := v.(type) {
		case *agent.WorkspaceCheckpoint:
			err2 = mark(agent.Snapshot{Seq: e.Seq, Tree: p.Tree, Store: p.Store}, p.Files, len(p.Files) > 0 && p.MoreFiles == 0, open)
		case *agent.WorkspaceRestored:
			// The listed files are from the files it replaced, which a
			// checkpoint just before it has when they differed from the
			// run's newest: the store tells.
			err2 = mark(agent.Snapshot{Seq: e.Seq, Tree: p.Tree, Store: p.Store}, nil, false, true)
		}
		if err2 != nil {
			return nil, err2
		}
		open = false
	}
	if err := mark(agent.Snapshot{Tree: now, Store: g.Store()}, nil, false, open); err != nil {
		return nil, err
	}
	return o, nil
}

// sortOut splits changes, what restoring a checkpoint would change, by
// who changed each file since it: keep, those changed only outside the
// run (left as they are), and both, those changed by the run and outside
// it. The rest are the run's to put back.
func (o *origins) sortOut(changes []FileChange) (keep, both []string) {
	for _, f := range changes {
		switch {
		case o.hand[f.Path] && o.run[f.Path]:
			both = append(both, f.Path)
		case o.hand[f.Path]:
			keep = append(keep, f.Path)
		}
	}
	return keep, both
}

// compose returns the tree of base with the paths given as tree from has
// them (or without them, where from has none): the files a rewind to
// base writes when it leaves those paths as the workspace has them.
func (c *Checkpoints) compose(ctx context.Context, base, from string, paths []string) (string, error) {
	if len(paths) == 0 {
		return base, nil
	}
	have, err := c.files(ctx, from)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(filepath.Dir(c.index), "compose-")
	if err != nil {
		return "", err
	}
	f.Close()
	os.Remove(f.Name()) // git makes the index
	defer os.Remove(f.Name())
	s := &Checkpoints{store: c.store, work: c.work, index: f.Name()}
	if _, err := s.git(ctx, nil, "read-tree", base); err != nil {
		return "", err
	}
	var in strings.Builder
	for _, p := range paths {
		if e, ok := have[p]; ok {
			fmt.Fprintf(&in, "%s %s\t%s\x00", e.mode, e.sha, p)
		} else {
			fmt.Fprintf(&in, "0 %s\t%s\x00", strings.Repeat("0", len(base)), p)
		}
	}
	if _, err := s.git(ctx, []byte(in.String()), "update-index", "-z", "--index-info"); err != nil {
		return "", err
	}
	out, err := s.git(ctx, nil, "write-tree")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// without returns changes less the paths of drop.
func without(changes []FileChange, drop []string) []FileChange {
	if len(drop) == 0 {
		return changes
	}
	out := changes[:0:0]
	for _, f := range changes {
		if !slices.Contains(drop, f.Path) {
			out = append(out, f)
		}
	}
	return out
}

// UndoOf returns the event a rewind journaled as event seq of the run of
// events is undone by rewinding to: the run's newest snapshot before it,
// which has the files it replaced (a rewind journals a checkpoint of
// them first when they differ from the run's newest); 0 when none.
func UndoOf(events []journal.Event, seq int64) int64 {
	cp, _, err := At(events, seq-1)
	if err != nil {
		return 0
	}
	return cp.Seq
}
