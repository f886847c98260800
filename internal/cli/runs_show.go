package cli

import (
	"context"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// Follow yields run id's events from seq from on, as they are appended,
// until one that leaves the run stopped (journal.Stops) and the rest of
// its batch, as the API's ?until=stopped does, or ctx is done.
func (l *local) Follow(ctx context.Context, id string, from int64, _ func(api.Delta)) func(yield func(journal.Event, error) bool) {
	return func(yield func(journal.Event, error) bool) {
		for moved := true; moved; {
			moved = false
			for e, err := range journal.Follow(ctx, l.store, id, from, 0) {
				if !yield(e, err) || err != nil {
					return
				}
				if from = e.Seq + 1; !journal.Stops(e.Type) {
					continue
				}
				rest, err := l.store.Read(ctx, id, from)
				if err != nil {
					yield(journal.Event{}, err)
					return
				}
				for _, e := range rest {
					if !yield(e, nil) {
						return
					}
					from = e.Seq + 1
				}
				// The run moved on meanwhile: follow it on.
				moved = len(rest) > 0 && !journal.Stops(rest[len(rest)-1].Type)
				break
			}
		}
	}
}

// Follow yields run id's events from the server's live stream until one
// that stops an execution.
func (r *remote) Follow(ctx context.Context, id string, from int64, live func(api.Delta)) func(yield func(journal.Event, error) bool) {
	return func(yield func(journal.Event, error) bool) {
		for e, err := range r.Client.Events(ctx, id, &client.EventsParams{From: from, UntilStopped: true, OnDelta: live}) {
			if !yield(e, err) || err != nil {
				return
			}
		}
	}
}

// showTimeline prints keel runs show's timeline of a run (tui.Show); a
// corrupt journal is exit status 1.
func (a *app) showTimeline(runID string, events []journal.Event, verr error, o *tui.ShowOptions) error {
	ok, err := tui.Show(a.stdout, runID, events, verr, o)
	if err == nil && !ok {
		err = &exitError{1}
	}
	return err
}
