package journal_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
)

// names folds a system stream of "name.added" events into a list.
type names struct {
	s    *journal.Stream
	list []string
}

func newNames(store journal.Store) *names {
	n := &names{}
	n.s = journal.NewStream(store, journal.SystemPrefix+"test", func() time.Time { return t0 }, func(e *journal.Event) error {
		var p struct{ Name string }
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return err
		}
		if slices.Contains(n.list, p.Name) {
			return fmt.Errorf("%s added twice", p.Name)
		}
		n.list = append(n.list, p.Name)
		return nil
	})
	return n
}

func (n *names) add(ctx context.Context, name string) error {
	_, err := n.s.Append(ctx, "name.added", map[string]string{"Name": name}, func() error {
		if slices.Contains(n.list, name) {
			return fmt.Errorf("%s exists", name)
		}
		return nil
	})
	return err
}

// Two Streams on one store (two processes) see each other's events; an
// append that the other beat is checked again on the new state.
func TestStreamSharedAndChecked(t *testing.T) {
	ctx := t.Context()
	store := mem.New()
	a, b := newNames(store), newNames(store)
	if err := a.add(ctx, "ann"); err != nil {
		t.Fatal(err)
	}
	if err := b.add(ctx, "bob"); err != nil {
		t.Fatal(err) // b catches up on ann first (a conflict otherwise)
	}
	if err := a.add(ctx, "bob"); err == nil || err.Error() != "bob exists" {
		t.Errorf("a adds bob again: %v", err)
	}
	if err := b.s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.list, []string{"ann", "bob"}) || !slices.Equal(b.list, a.list) {
		t.Errorf("a %v, b %v", a.list, b.list)
	}
	if !journal.IsSystem(a.s.ID()) || journal.IsSystem("01jrun") {
		t.Error("IsSystem")
	}
}

// A stored event that does not fold, a broken chain and a stream that
// disappears are corruption of the stream.
func TestStreamCorrupt(t *testing.T) {
	ctx := t.Context()
	store := mem.New()
	id := journal.SystemPrefix + "test"
	if _, err := store.Append(ctx, id, 0, journal.Draft{Type: "name.added", Time: t0, Payload: []byte(`{"Name":"ann"}`)},
		journal.Draft{Type: "name.added", Time: t0, Payload: []byte(`{"Name":"ann"}`)}); err != nil {
		t.Fatal(err)
	}
	var ce *journal.CorruptError
	if err := newNames(store).s.Sync(ctx); !errors.As(err, &ce) || ce.Seq != 2 || ce.RunID != id {
		t.Errorf("a duplicate: %v", err)
	}

	store = mem.New()
	n := newNames(store)
	if err := n.add(ctx, "ann"); err != nil {
		t.Fatal(err)
	}
	if err := n.add(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	if err := store.Rewrite(id, func(evs []journal.Event) []journal.Event {
		evs[1].Payload = []byte(`{"Name":"eve"}`)
		return evs
	}); err != nil {
		t.Fatal(err)
	}
	if err := newNames(store).s.Sync(ctx); !errors.As(err, &ce) {
		t.Errorf("a changed event: %v", err)
	}
	if err := store.Rewrite(id, func([]journal.Event) []journal.Event { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := n.s.Sync(ctx); !errors.As(err, &ce) {
		t.Errorf("a vanished stream: %v", err)
	}
}
