package journal_test

import (
	"errors"
	"testing"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
)

func TestDirectory(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := mem.New()
	a := journal.NewDirectory(store, "_keel.things", nil, "thing.created", "thing.deleted")
	b := journal.NewDirectory(store, "_keel.things", nil, "thing.created", "thing.deleted") // another process
	if err := a.Add(ctx, "id1", "nightly", "ada"); err != nil {
		t.Fatal(err)
	}
	if err := b.Add(ctx, "id2", "nightly", "bob"); !errors.Is(err, journal.ErrNameTaken) {
		t.Errorf("second nightly: %v", err)
	}
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if id, ok := b.Resolve("nightly"); id != "id1" || !ok {
		t.Errorf("Resolve(nightly) = %s, %v", id, ok)
	}
	if err := b.Remove(ctx, "id1", "bob"); err != nil {
		t.Fatal(err)
	}
	if err := a.Remove(ctx, "id1", "ada"); err != nil {
		t.Errorf("removing again: %v", err)
	}
	if err := a.Add(ctx, "id3", "nightly", "ada"); err != nil {
		t.Errorf("the name is free again: %v", err)
	}
	ids, err := b.IDs(ctx)
	if err != nil || len(ids) != 1 || ids[0] != "id3" {
		t.Errorf("IDs = %v, %v", ids, err)
	}
	evs, _ := store.Read(ctx, "_keel.things", 1)
	if len(evs) != 3 {
		t.Errorf("%d events, want 3 (the second removal wrote nothing)", len(evs))
	}
}
