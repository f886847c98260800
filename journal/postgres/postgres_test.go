package postgres_test

import (
	"testing"

	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/journaltest"
	"github.com/keel-run/keel/journal/postgres"
)

// openTemp opens a journal in a new database of the test binary's private
// cluster, closed at the end of the test.
func openTemp(t testing.TB) (*postgres.Store, string) {
	t.Helper()
	dsn := testenv.Postgres(t)
	s, err := postgres.Open(t.Context(), dsn)
	if err != nil {
		t.Fatalf("Open(%s) = %v", dsn, err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dsn
}

func TestConformance(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) journal.Store {
		s, _ := openTemp(t)
		return s
	})
}
