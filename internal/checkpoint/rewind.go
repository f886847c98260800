package checkpoint

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

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

// sortOut splits changes, what restoring a checkpoint would change, by
// who changed each file since it: keep, those changed only outside the
// run (left as they are), and both, those changed by the run and outside
// it. The rest are the run's to put back.
func (o *owners) sortOut(changes []FileChange) (keep, both []string) {
	for _, f := range changes {
		switch {
		case o.outside[f.Path] && o.run[f.Path]:
			both = append(both, f.Path)
		case o.outside[f.Path]:
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
