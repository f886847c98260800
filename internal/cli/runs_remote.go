package cli

import (
	"context"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/journal"
)

// Events reads run id's stored events from the server.
func (r *remote) Events(ctx context.Context, id string) ([]journal.Event, error) {
	var out []journal.Event
	for e, err := range r.Client.Events(ctx, id, &client.EventsParams{NoFollow: true}) {
		if err != nil {
			return out, err
		}
		out = append(out, e)
	}
	return out, nil
}

// VerifyEvents checks the hash chain as the server showed it to this
// token (the server checks its index): events whose hashes it withheld
// (they commit to memory the token may not see) by sequence number.
func (r *remote) VerifyEvents(_ context.Context, id string, events []journal.Event) error {
	_, err := journal.VerifyShown(id, journal.GenesisHash, 1, events)
	return err
}
