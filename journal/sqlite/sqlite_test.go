package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/journaltest"
	"github.com/keel-run/keel/journal/sqlite"
)

// openTemp opens a new journal in a temporary directory, closed at the
// end of the test.
func openTemp(t *testing.T, opts *sqlite.Options) (*sqlite.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "journal.db")
	s, err := sqlite.Open(path, opts)
	if err != nil {
		t.Fatalf("Open(%q) = %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func TestConformance(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) journal.Store {
		s, _ := openTemp(t, nil)
		return s
	})
}

func TestConformanceSyncNormal(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) journal.Store {
		s, _ := openTemp(t, &sqlite.Options{Sync: sqlite.SyncNormal})
		return s
	})
}
