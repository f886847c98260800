package mem_test

import (
	"errors"
	"testing"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/journaltest"
	"github.com/keel-run/keel/journal/mem"
)

func TestConformance(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) journal.Store { return mem.New() })
}

func TestRewriteMakesCorruptionVisible(t *testing.T) {
	ctx := t.Context()
	s := mem.New()
	defer s.Close()
	for i := range 3 {
		if _, err := s.Append(ctx, "r", int64(i), journal.Draft{Type: journal.ModelResponded, Time: journaltest.T0, Payload: []byte(`{"n":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Rewrite("r", func(evs []journal.Event) []journal.Event {
		evs[1].Payload = []byte(`{"n":2}`)
		return evs
	}); err != nil {
		t.Fatal(err)
	}
	_, err := journal.ReadVerified(ctx, s, "r")
	var ce *journal.CorruptError
	if !errors.As(err, &ce) || ce.Seq != 2 {
		t.Errorf("ReadVerified after rewriting event 2 = %v, want a CorruptError at event 2", err)
	}
	if err := s.Rewrite("nope", func(e []journal.Event) []journal.Event { return e }); !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("Rewrite(unknown run) = %v, want ErrNotFound", err)
	}
}
