package checkpoint

import (
	"context"
	"slices"

	"github.com/keel-run/keel/journal"
)

// Snapshots counts c's full and incremental snapshots since Watch.
func Snapshots(c *Checkpoints) (full, incremental int) {
	if c.t == nil {
		return 0, 0
	}
	return c.t.fulls, c.t.incrementals
}

// ChangeTime is changeTime, for tests.
var ChangeTime = changeTime

// Who is who changed which files of a run, as one reader sees it: the
// paths the run changed and those changed outside it, sorted.
type Who struct{ Run, Outside []string }

// WhoChanged returns who changed the files of the run of events since
// its first snapshot, as the change summary reads it (summary: up to
// its newest snapshot) and as a rewind to that snapshot does (rewind:
// on to the workspace at ws as it is when live, else to the newest
// snapshot).
func WhoChanged(ctx context.Context, events []journal.Event, ws string, live bool) (summary, rewind Who, err error) {
	o, err := whoChanged(ctx, events, nil, nil, "")
	if err != nil || o == nil {
		return summary, rewind, err
	}
	summary = Who{sortedKeys(o.run), sortedKeys(o.outside)}
	g, err := OpenCheckpoints(ctx, o.first.Store, ws)
	if err != nil {
		return summary, rewind, err
	}
	now := o.last.Tree
	if live {
		if now, err = g.Snapshot(ctx); err != nil {
			return summary, rewind, err
		}
	}
	r, err := whoChanged(ctx, events, o.first, g, now)
	if err != nil {
		return summary, rewind, err
	}
	return summary, Who{sortedKeys(r.run), sortedKeys(r.outside)}, nil
}

func sortedKeys(m map[string]bool) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}
