package checkpoint_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/journal"
)

// Reading a run's checkpoints (keel runs diff, runs show's change
// summary, a rewind's plan) creates nothing: when the run's checkpoint
// store is gone, a read says the run has no checkpoint (ErrNone), a
// rewind that its snapshots are missing (ErrMissing, not ErrNone: they
// existed), and neither the store nor any file of the workspace is made.
func TestReadingCheckpointsCreatesNothing(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
	ctx := t.Context()
	for _, git := range []bool{false, true} {
		var l *runLog
		if git {
			ws := repo(t, map[string]string{"notes.txt": "one\n"})
			l = newRunLog(t, ws, true)
			l.snap()
			l.step("edit", func() { write(t, ws, "notes.txt", "two\n") })
			l.add(journal.RunCompleted, &agent.RunEnded{Reason: agent.ReasonAnswer})
		} else {
			l, _ = finishedRun(t)
		}
		store := l.prev.Store
		if err := os.RemoveAll(store); err != nil {
			t.Fatal(err)
		}
		files := readAll(t, l.ws)
		events := l.events()
		last := events[len(events)-1].Seq
		check := func(what string) {
			t.Helper()
			if _, err := os.Stat(store); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("git %v: %s made the deleted checkpoint store %s (%v)", git, what, store, err)
				os.RemoveAll(store)
			}
			if d := cmp.Diff(files, readAll(t, l.ws)); d != "" {
				t.Errorf("git %v: %s changed the workspace (-before +after):\n%s", git, what, d)
			}
		}

		_, _, _, err := checkpoint.Diff(ctx, events, last)
		if !errors.Is(err, checkpoint.ErrNone) {
			t.Errorf("git %v: Diff without the store = %v, want no checkpoint", git, err)
		}
		check("Diff")
		sum, err := checkpoint.Changed(ctx, l.created, events)
		switch {
		case git && (err != nil || sum.At != 0):
			// Compared with the start commit, as the workspace is now.
			t.Errorf("git %v: Changed without the store = %+v, %v; want the workspace against the start commit", git, sum, err)
		case !git && !errors.Is(err, checkpoint.ErrNone):
			t.Errorf("git %v: Changed without the store = %v, want no checkpoint", git, err)
		}
		check("Changed")
		if _, err := checkpoint.PlanRewind(ctx, events, 2); !errors.Is(err, checkpoint.ErrMissing) || errors.Is(err, checkpoint.ErrNone) {
			t.Errorf("git %v: PlanRewind without the store = %v, want its snapshots missing", git, err)
		}
		check("PlanRewind")
		if _, err := checkpoint.Rewind(ctx, l.store, l.id, 2, checkpoint.RewindOptions{By: "ada"}); !errors.Is(err, checkpoint.ErrMissing) || errors.Is(err, checkpoint.ErrNone) {
			t.Errorf("git %v: Rewind without the store = %v, want its snapshots missing", git, err)
		}
		check("Rewind")
		if _, _, err := checkpoint.ForkFiles(ctx, events, 2, l.ws, filepath.Join(t.TempDir(), "fork"), "ada"); !errors.Is(err, checkpoint.ErrMissing) || errors.Is(err, checkpoint.ErrNone) {
			t.Errorf("git %v: ForkFiles without the store = %v, want its snapshots missing", git, err)
		}
		check("ForkFiles")
	}
}
