package cli

import (
	"context"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/tool"
)

// maxShownArtifact bounds a whole output keel runs show --full reads.
const maxShownArtifact = 64 << 20

// Follow yields run id's events from seq from on, as they are appended,
// until one that stops an execution or ctx is done.
func (l *local) Follow(ctx context.Context, id string, from int64, _ func(api.Delta)) func(yield func(journal.Event, error) bool) {
	return func(yield func(journal.Event, error) bool) {
		for e, err := range journal.Follow(ctx, l.store, id, from, 0) {
			if !yield(e, err) || err != nil || tui.StopsExecution(e.Type) {
				return
			}
		}
	}
}

// Artifact reads a whole output of the run created by created from its
// state directory (or, in older runs, its workspace).
func (l *local) Artifact(_ context.Context, _ string, created *agent.RunCreated, rel string) ([]byte, error) {
	ws, err := tool.NewWorkspace(created.Workspace, "", nil)
	if err != nil {
		return nil, err
	}
	defer ws.Close()
	if created.StateDir != "" {
		if err := ws.SetState(created.StateDir); err != nil {
			return nil, err
		}
	}
	return tool.ReadArtifact(ws, rel, maxShownArtifact)
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

// Artifact reads a whole output through the server, which serves only
// the run's artifacts.
func (r *remote) Artifact(ctx context.Context, id string, _ *agent.RunCreated, rel string) ([]byte, error) {
	return r.Client.Artifact(ctx, id, rel)
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
