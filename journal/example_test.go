package journal_test

import (
	"context"
	"fmt"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
)

// A writer appends a run's events while a reader follows it live; the
// reader stops at the terminal event.
func ExampleFollow() {
	ctx := context.Background()
	s := mem.New() // journal.Open(ctx, "sqlite:/var/lib/keel/journal.db") in production
	defer s.Close()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

	if _, err := s.Append(ctx, "run-1", 0, journal.Draft{Type: journal.RunCreated, Time: now, Payload: []byte(`{"task":"fix the build"}`)}); err != nil {
		panic(err)
	}
	go func() {
		// After 1: a second writer that also thinks the run ends at 1
		// would get journal.ErrConflict.
		s.Append(ctx, "run-1", 1,
			journal.Draft{Type: journal.ModelResponded, Time: now.Add(time.Second), Payload: []byte(`{"text":"done"}`)},
			journal.Draft{Type: journal.RunCompleted, Time: now.Add(2 * time.Second)})
	}()

	for e, err := range journal.Follow(ctx, s, "run-1", 1, 0) {
		if err != nil {
			panic(err)
		}
		fmt.Println(e.Seq, e.Type, string(e.Payload))
		if journal.StatusOf(e.Type).Terminal() {
			break
		}
	}
	// Output:
	// 1 run.created {"task":"fix the build"}
	// 2 model.responded {"text":"done"}
	// 3 run.completed {}
}
