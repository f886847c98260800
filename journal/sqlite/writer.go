package sqlite

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
)

// writer holds the statements of an append, prepared once on the writer
// connection and run through the driver directly. Through database/sql
// each append bound every statement to its transaction (Tx.StmtContext:
// a Stmt, its dependency records and a driver argument list per call),
// and BEGIN, COMMIT and the synchronous pragmas were parsed again each
// time: about two thirds of an append's allocations.
//
// Appends hold Store.wmu and use it only inside [sql.Conn.Raw] on conn,
// the driver connection it was prepared on; when database/sql gives a
// new connection (the old one was found bad), it is prepared again.
//
// PRAGMA synchronous is not among them: SQLite applies such a pragma
// when it compiles it, not when it runs (https://www.sqlite.org/pragma.html),
// so a prepared one would set the mode once, at prepare time.
type writer struct {
	conn any
	// begin is BEGIN IMMEDIATE: the write lock is taken before the head
	// is read (see Store.Append).
	begin, commit, rollback driver.Stmt
	head, insert, upsert    driver.Stmt
	args                    []driver.NamedValue
	row                     []driver.Value
}

// writerSQL are the writer's statements, in the order of the fields.
var writerSQL = [...]string{
	`BEGIN IMMEDIATE`, `COMMIT`, `ROLLBACK`,
	// The runs index's head and the events table's, in one row (NULLs
	// for a new run): one statement per append instead of two.
	`
SELECT r.last_seq, r.last_hash, e.seq, e.hash
FROM (SELECT 1) AS one
LEFT JOIN runs AS r ON r.run_id = ?1
LEFT JOIN (SELECT seq, hash FROM events WHERE run_id = ?1 ORDER BY seq DESC LIMIT 1) AS e`,
	`INSERT INTO events (run_id, seq, type, time, payload, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?)`,
	`
INSERT INTO runs (run_id, created, updated, last_seq, last_type, last_hash, status)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (run_id) DO UPDATE SET
	updated = excluded.updated, last_seq = excluded.last_seq, last_type = excluded.last_type,
	last_hash = excluded.last_hash, status = CASE WHEN ? THEN runs.status ELSE excluded.status END`,
}

func (w *writer) stmts() []*driver.Stmt {
	return []*driver.Stmt{&w.begin, &w.commit, &w.rollback, &w.head, &w.insert, &w.upsert}
}

// synchronous sets PRAGMA synchronous on the connection, compiled anew each
// time (see writer).
func (w *writer) synchronous(ctx context.Context, mode Sync) error {
	_, err := w.conn.(driver.ExecerContext).ExecContext(ctx, "PRAGMA synchronous="+mode.String(), nil)
	return err
}

// writerOn returns the Store's writer for the driver connection dc,
// preparing its statements when dc is not the one they were prepared on.
// The caller holds s.wmu.
func (s *Store) writerOn(ctx context.Context, dc any) (*writer, error) {
	if s.wr != nil && s.wr.conn == dc {
		return s.wr, nil
	}
	s.wr = nil // prepared on a connection database/sql closed
	pc, ok := dc.(driver.ConnPrepareContext)
	if _, exec := dc.(driver.ExecerContext); !ok || !exec {
		return nil, fmt.Errorf("driver connection %T cannot prepare or execute statements with a context", dc)
	}
	w := &writer{conn: dc, args: make([]driver.NamedValue, 0, 8), row: make([]driver.Value, 4)}
	for i, p := range w.stmts() {
		st, err := pc.PrepareContext(ctx, writerSQL[i])
		if err != nil {
			w.close()
			return nil, err
		}
		if _, ok := st.(driver.StmtExecContext); !ok {
			st.Close()
			w.close()
			return nil, fmt.Errorf("driver statement %T takes no context", st)
		}
		*p = st
	}
	if _, ok := w.head.(driver.StmtQueryContext); !ok {
		w.close()
		return nil, fmt.Errorf("driver statement %T takes no context", w.head)
	}
	s.wr = w
	return w, nil
}

// close finalizes the writer's statements.
func (w *writer) close() error {
	if w == nil {
		// An append whose context ended has already closed and
		// dropped the writer; putting synchronous back may then fail
		// too, and the connection is discarded with no writer on it.
		return nil
	}
	var errs []error
	for _, p := range w.stmts() {
		if *p != nil {
			errs = append(errs, (*p).Close())
			*p = nil
		}
	}
	return errors.Join(errs...)
}

// exec runs st with args.
func (w *writer) exec(ctx context.Context, st driver.Stmt, args ...any) error {
	w.args = w.args[:0]
	for i, a := range args {
		w.args = append(w.args, driver.NamedValue{Ordinal: i + 1, Value: a})
	}
	_, err := st.(driver.StmtExecContext).ExecContext(ctx, w.args)
	clear(w.args)
	return err
}

// queryHead reads the head row of runID: the runs index's last_seq and
// last_hash and the events table's newest seq and hash, nil for NULL.
func (w *writer) queryHead(ctx context.Context, runID string) (idxSeq, idxHash, evSeq, evHash any, err error) {
	w.args = append(w.args[:0], driver.NamedValue{Ordinal: 1, Value: runID})
	rows, err := w.head.(driver.StmtQueryContext).QueryContext(ctx, w.args)
	clear(w.args)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	err = rows.Next(w.row)
	if errors.Is(err, io.EOF) {
		err = errors.New("no row") // the query always returns one
	}
	idxSeq, idxHash, evSeq, evHash = w.row[0], w.row[1], w.row[2], w.row[3]
	clear(w.row)
	return idxSeq, idxHash, evSeq, evHash, errors.Join(err, rows.Close())
}

// closeWriter finalizes the writer's statements, if it has any, on the
// connection they were prepared on, before the Store closes it.
func (s *Store) closeWriter() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.wr == nil {
		return nil
	}
	conn, err := s.w.Conn(context.Background())
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		var err error
		if dc == s.wr.conn {
			err = s.wr.close()
		}
		s.wr = nil
		return err
	})
}
