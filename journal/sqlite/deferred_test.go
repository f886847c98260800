package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/journaltest"
)

// deferredOnly is a Store whose every append is deferred, for the
// conformance kit.
type deferredOnly struct{ *Store }

func (s deferredOnly) Append(ctx context.Context, runID string, after int64, drafts ...journal.Draft) ([]journal.Event, error) {
	return s.AppendDeferred(ctx, runID, after, drafts...)
}

// Deferred appends are appends: atomic, ordered, conflicting as Append
// does.
func TestConformanceDeferred(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) journal.Store {
		s, err := Open(filepath.Join(t.TempDir(), "journal.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return deferredOnly{s}
	})
}

// A deferred append is committed with synchronous=NORMAL and leaves the
// writer connection FULL for the next append; Sync commits with FULL only
// when something is deferred; Stats counts both kinds.
func TestAppendDeferred(t *testing.T) {
	ctx := t.Context()
	for _, tt := range []struct {
		name string
		sync Sync
		// steps: 'd' AppendDeferred, 'a' Append, 's' Sync
		steps            string
		syncs, deferreds int64
	}{
		{"durable", SyncFull, "aaa", 3, 0},
		{"deferred then durable", SyncFull, "dda", 1, 2},
		{"sync after deferred", SyncFull, "ddss", 1, 2},
		{"sync with nothing deferred", SyncFull, "as", 1, 0},
		{"sync normal", SyncNormal, "dads", 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(filepath.Join(t.TempDir(), "journal.db"), &Options{Sync: tt.sync})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var last int64
			for i, step := range tt.steps {
				if step == 's' {
					if err := s.Sync(ctx); err != nil {
						t.Fatal(err)
					}
					continue
				}
				d := journal.Draft{Type: journal.ToolStarted, Time: time.Unix(int64(i), 0).UTC(), Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
				if last == 0 {
					d.Type = journal.RunCreated
				}
				app := s.Append
				if step == 'd' {
					app = s.AppendDeferred
				}
				evs, err := app(ctx, "run1", last, d)
				if err != nil {
					t.Fatal(err)
				}
				last = evs[len(evs)-1].Seq
				var mode int
				if err := s.w.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&mode); err != nil {
					t.Fatal(err)
				}
				if want := map[Sync]int{SyncFull: 2, SyncNormal: 1}[tt.sync]; mode != want {
					t.Fatalf("after append %d: the writer connection's synchronous is %d, want %d", i+1, mode, want)
				}
			}
			if st := s.Stats(); st.Syncs != tt.syncs || st.Deferred != tt.deferreds {
				t.Errorf("Stats = %+v, want %d syncs, %d deferred", st, tt.syncs, tt.deferreds)
			}
			if _, err := journal.ReadVerified(ctx, s, "run1"); err != nil {
				t.Errorf("the chain: %v", err)
			}
		})
	}
}
