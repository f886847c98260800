package sqlite_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

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

// A new journal and the files SQLite keeps beside it are readable by
// their owner only (they hold tool outputs, run environments and setup
// scripts); an existing file keeps its mode.
func TestNewJournalIsPrivate(t *testing.T) {
	s, path := openTemp(t, nil)
	if _, err := s.Append(t.Context(), "r1", 0, journal.Draft{Type: journal.RunCreated, Time: time.Unix(1, 0), Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if m := fi.Mode().Perm(); m != 0o600 {
			t.Errorf("%s: mode %o, want 600", filepath.Base(p), m)
		}
	}
	shared := filepath.Join(t.TempDir(), "shared.db")
	os.WriteFile(shared, nil, 0o640)
	s2, err := sqlite.Open(shared, nil)
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if fi, _ := os.Stat(shared); fi.Mode().Perm() != 0o640 {
		t.Errorf("existing file: mode %o, want 640 kept", fi.Mode().Perm())
	}
}

// Several processes may open a journal that does not exist yet at the
// same moment (keel run creating it while keel approve or a test reads
// it): every open succeeds, and the file gets one schema.
func TestConcurrentFirstOpen(t *testing.T) {
	for round := range 20 {
		path := filepath.Join(t.TempDir(), "new.db")
		errs := make(chan error, 4)
		for i := range 4 {
			go func() {
				s, err := sqlite.Open(path, nil)
				if err == nil {
					_, err = s.Append(t.Context(), "r"+strconv.Itoa(i), 0, journal.Draft{Type: journal.RunCreated, Time: time.Unix(1, 0), Payload: []byte(`{}`)})
					s.Close()
				}
				errs <- err
			}()
		}
		for range 4 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}
