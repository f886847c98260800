package sqlite

import (
	"context"
	"database/sql/driver"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/keel-run/keel/journal"
)

func draftAt(i int) journal.Draft {
	typ := journal.ToolStarted
	if i == 1 {
		typ = journal.RunCreated
	}
	return journal.Draft{Type: typ, Time: time.Unix(int64(i), 0).UTC(), Payload: []byte(`{"n":1}`)}
}

// TestWriterOnNewConnection: when database/sql replaces the writer
// connection, the next append prepares its statements on the new one.
func TestWriterOnNewConnection(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "j.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Append(ctx, "run1", 0, draftAt(1)); err != nil {
		t.Fatal(err)
	}
	first := s.wr.conn
	// Discard the connection as database/sql discards a bad one, the
	// statements finalized first as append does.
	conn, err := s.w.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conn.Raw(func(any) error {
		s.wr.close()
		return driver.ErrBadConn
	})
	conn.Close()
	if _, err := s.Append(ctx, "run1", 1, draftAt(2)); err != nil {
		t.Fatal(err)
	}
	if s.wr == nil || s.wr.conn == first {
		t.Errorf("the writer was not prepared on a new connection")
	}
	if evs, err := journal.ReadVerified(ctx, s, "run1"); err != nil || len(evs) != 2 {
		t.Errorf("ReadVerified = %d events, %v", len(evs), err)
	}
}

// TestAppendInterrupted: an append whose context ends while it waits for
// another process's write lock fails with the context's error, stores
// nothing, and the next append works (on a new connection: modernc's
// connection is no longer valid once a statement was interrupted, and
// the writer's statements are not left on it).
func TestAppendInterrupted(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "j.db")
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Append(ctx, "run1", 0, draftAt(1)); err != nil {
		t.Fatal(err)
	}
	other, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.w.BeginTx(ctx, nil) // BEGIN IMMEDIATE: holds the write lock
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = s.Append(short, "run1", 1, draftAt(2))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("append while another process holds the lock: %v, want the context's deadline", err)
	}
	if s.wr != nil {
		t.Errorf("the writer's statements were left on a connection that was interrupted")
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "run1", 1, draftAt(2)); err != nil {
		t.Fatalf("append after the interrupted one: %v", err)
	}
	if evs, err := journal.ReadVerified(ctx, s, "run1"); err != nil || len(evs) != 2 {
		t.Errorf("ReadVerified = %d events, %v", len(evs), err)
	}
}

// TestWriterCloseAfterDrop: an append whose context ended drops the
// Store's writer; when putting synchronous back then fails too, the
// connection is discarded by closing a writer that is already gone, which
// must not panic.
func TestWriterCloseAfterDrop(t *testing.T) {
	var w *writer
	if err := w.close(); err != nil {
		t.Fatalf("close of a dropped writer = %v, want nil", err)
	}
}
