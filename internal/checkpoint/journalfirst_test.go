package checkpoint_test

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
)

// failingAppends is a journal whose appends fail as fail says (n counts
// them from 1): a full disk, a journal made read-only.
type failingAppends struct {
	journal.Store
	n    int
	fail func(n int) error
}

func (f *failingAppends) Append(ctx context.Context, runID string, after int64, drafts ...journal.Draft) ([]journal.Event, error) {
	f.n++
	if err := f.fail(f.n); err != nil {
		return nil, err
	}
	return f.Store.Append(ctx, runID, after, drafts...)
}

// A rewind journals its intent before it writes a file: when that
// append fails, no file is changed and nothing is journaled.
func TestRewindJournalsBeforeItWritesFiles(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
	ctx := t.Context()
	l, first := finishedRun(t)
	files, events := readAll(t, l.ws), l.events()
	full := &failingAppends{Store: l.store, fail: func(int) error { return syscall.ENOSPC }}
	_, err := checkpoint.Rewind(ctx, full, l.id, first, checkpoint.RewindOptions{By: "ada"})
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "no file was changed") {
		t.Errorf("rewind on a full journal = %v, want the append's error, saying no file was changed", err)
	}
	if d := cmp.Diff(files, readAll(t, l.ws)); d != "" {
		t.Errorf("a rewind that could not be journaled changed the files (-before +after):\n%s", d)
	}
	if n := len(l.events()); n != len(events) {
		t.Errorf("the journal has %d events after the failed rewind, want %d", n, len(events))
	}
}

// A rewind whose files were written but whose end could not be
// journaled (the same as a crash between the two) is shown unfinished
// (the fold's open intent, keel runs show), and the next rewind's
// snapshot closes it as finished (the files are the rewind's), then
// rewinds as asked.
func TestRewindCutShortIsVisibleAndClosed(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
	ctx := t.Context()
	l, first := finishedRun(t)
	after := readAll(t, l.ws)
	last := l.events()[len(l.events())-1].Seq
	endFails := &failingAppends{Store: l.store, fail: func(n int) error {
		if n == 2 {
			return errors.New("attempt to write a readonly database")
		}
		return nil
	}}
	_, err := checkpoint.Rewind(ctx, endFails, l.id, first, checkpoint.RewindOptions{By: "ada"})
	if err == nil || !strings.Contains(err.Error(), "files were rewound") {
		t.Fatalf("rewind whose end could not be journaled = %v, want it to say the files were rewound", err)
	}
	if d := cmp.Diff(map[string]string{"a.txt": "a\n", "keep.txt": "keep\n"}, readAll(t, l.ws)); d != "" {
		t.Errorf("files (-want +got):\n%s", d)
	}
	events := l.events()
	st, err := agent.Fold(l.id, events)
	if err != nil {
		t.Fatal(err)
	}
	if st.Restoring == nil || st.Restoring.Seq != last+1 || st.Restoring.To != first || events[len(events)-1].Type != journal.WorkspaceRestoring {
		t.Fatalf("journal after the cut rewind: last %s, open intent %+v; want workspace.restoring of event %d open", events[len(events)-1].Type, st.Restoring, first)
	}
	var out bytes.Buffer
	if _, err := tui.Show(&out, l.id, events, nil, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "unfinished rewind: the rewind of event") {
		t.Errorf("keel runs show of the cut rewind does not say it is unfinished:\n%s", out.String())
	}
	out.Reset()
	if err := tui.Checkpoints(&out, l.id, events); err != nil || !strings.Contains(out.String(), "rewinding to") {
		t.Errorf("keel runs checkpoints of the cut rewind does not list it (%v):\n%s", err, out.String())
	}

	// The next rewind finds the files the first one wrote: it records
	// that it finished, then rewinds (here: undoes it).
	rw, err := checkpoint.Rewind(ctx, l.store, l.id, last, checkpoint.RewindOptions{By: "ada"})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(after, readAll(t, l.ws)); d != "" {
		t.Errorf("the next rewind (-want +got):\n%s", d)
	}
	events = l.events()
	var types []journal.Type
	for _, e := range events[last:] {
		types = append(types, e.Type)
	}
	want := []journal.Type{journal.WorkspaceRestoring, journal.WorkspaceRestored, journal.WorkspaceRestoring, journal.WorkspaceRestored}
	if d := cmp.Diff(want, types); d != "" {
		t.Errorf("events after the run (-want +got):\n%s", d)
	}
	v, err := agent.Decode(&events[last+1])
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := v.(*agent.WorkspaceRestored); !ok || r.Recovered != last+1 || r.To != first {
		t.Errorf("the snapshot that closed the cut rewind = %+v, want its restored, recovered from event %d", v, last+1)
	}
	if rw.Undo != last+2 {
		t.Errorf("the next rewind's undo = %d, want the recovered restore (event %d), which has the files it replaced", rw.Undo, last+2)
	}
	if st, err := agent.Fold(l.id, events); err != nil || st.Restoring != nil {
		t.Errorf("after the next rewind: intent %+v, %v; want none open", st.Restoring, err)
	}
}
