package postgres_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/postgres"
)

// Processes opening a new database at once migrate it once, and all of
// them can append.
func TestConcurrentFirstOpen(t *testing.T) {
	dsn := testenv.Postgres(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := postgres.Open(t.Context(), dsn)
			if err == nil {
				_, err = s.Append(t.Context(), "r"+string(rune('0'+i)), 0, journal.Draft{Type: journal.RunCreated, Time: time.Unix(1, 0), Payload: []byte(`{}`)})
				s.Close()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	s, _ := openAt(t, dsn)
	var versions []int
	rows, err := s.Pool().Query(t.Context(), `SELECT version FROM keel_schema ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var v int
		rows.Scan(&v)
		versions = append(versions, v)
	}
	if len(versions) != postgres.SchemaVersion || versions[len(versions)-1] != postgres.SchemaVersion {
		t.Errorf("keel_schema holds %v, want 1..%d once each", versions, postgres.SchemaVersion)
	}
}

// A database migrated by a newer Keel is refused with ErrSchemaTooNew.
func TestSchemaTooNew(t *testing.T) {
	s, dsn := openTemp(t)
	if _, err := s.Pool().Exec(t.Context(), `INSERT INTO keel_schema (version) VALUES (99)`); err != nil {
		t.Fatal(err)
	}
	_, err := postgres.Open(t.Context(), dsn)
	if !errors.Is(err, postgres.ErrSchemaTooNew) || !strings.Contains(err.Error(), "99") {
		t.Fatalf("Open = %v, want ErrSchemaTooNew naming version 99", err)
	}
}

// journal.Open picks the backend by scheme; errors hide the password.
func TestRegistry(t *testing.T) {
	dsn := testenv.Postgres(t)
	for _, d := range []string{dsn, strings.Replace(dsn, "postgres://", "postgresql://", 1)} {
		s, err := journal.Open(t.Context(), d)
		if err != nil {
			t.Fatalf("journal.Open(%s) = %v", d, err)
		}
		if _, ok := s.(*postgres.Store); !ok {
			t.Errorf("journal.Open(%s) = %T", d, s)
		}
		s.Close()
	}
	bad := strings.Replace(dsn, "keel@", "keel:hunter2@", 1)
	bad = strings.Replace(bad, "/t", "/nosuchdb", 1)
	_, err := journal.Open(t.Context(), bad)
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Open of a missing database = %v: want an error without the password", err)
	}
}

// Rows deleted behind Keel's back: the chain alone cannot see a cut tail,
// the index can; appending to such a run is refused.
func TestCutTailIsCorrupt(t *testing.T) {
	s, _ := openTemp(t)
	ctx := t.Context()
	for i := range 3 {
		if _, err := s.Append(ctx, "c", int64(i), journal.Draft{Type: journal.ModelResponded, Time: time.Unix(int64(i+1), 0), Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Pool().Exec(ctx, `DELETE FROM keel_events WHERE run_id = 'c' AND seq = 3`); err != nil {
		t.Fatal(err)
	}
	var ce *journal.CorruptError
	if _, err := journal.ReadVerified(ctx, s, "c"); !errors.As(err, &ce) || ce.Seq != 3 {
		t.Errorf("ReadVerified = %v, want corrupt at event 3", err)
	}
	if _, err := s.Append(ctx, "c", 2, journal.Draft{Type: journal.ModelResponded, Time: time.Unix(9, 0), Payload: []byte(`{}`)}); !errors.As(err, &ce) {
		t.Errorf("Append after the cut = %v, want a CorruptError", err)
	}
}

func openAt(t *testing.T, dsn string) (*postgres.Store, error) {
	s, err := postgres.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, nil
}
