package cli

import (
	"context"

	"github.com/keel-run/keel/journal"
)

func (l *local) Events(ctx context.Context, id string) ([]journal.Event, error) {
	return l.store.Read(ctx, id, 1)
}

func (l *local) VerifyEvents(ctx context.Context, id string, events []journal.Event) error {
	return verifyRun(ctx, l.store, id, events)
}
