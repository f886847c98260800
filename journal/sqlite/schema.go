package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// applicationID marks a database file as a Keel journal (PRAGMA
// application_id, https://www.sqlite.org/fileformat.html#application_id):
// the bytes "KEEL".
const applicationID = 0x4b45454c

// schemaVersion is the PRAGMA user_version this code writes and reads.
// Bump it with a migration in migrate when the schema changes.
const schemaVersion = 3

// schemaV1 creates version 1. Times are TEXT in journal.TimeFormat (fixed
// width UTC, so text order is time order); payload is a BLOB holding the
// exact sealed bytes.
const schemaV1 = `
CREATE TABLE events (
	run_id    TEXT    NOT NULL,
	seq       INTEGER NOT NULL CHECK (seq >= 1),
	type      TEXT    NOT NULL,
	time      TEXT    NOT NULL,
	payload   BLOB    NOT NULL,
	prev_hash TEXT    NOT NULL,
	hash      TEXT    NOT NULL,
	PRIMARY KEY (run_id, seq)
);
CREATE TABLE runs (
	run_id    TEXT    NOT NULL PRIMARY KEY,
	created   TEXT    NOT NULL,
	updated   TEXT    NOT NULL,
	last_seq  INTEGER NOT NULL,
	last_type TEXT    NOT NULL,
	last_hash TEXT    NOT NULL,
	status    TEXT    NOT NULL
);
CREATE INDEX runs_by_created ON runs (created DESC, run_id DESC);
`

// schemaV2 adds the side table of mutable records (journal.Records): the
// credential vault's encrypted grants and providers, never events.
const schemaV2 = `
CREATE TABLE records (
	kind    TEXT    NOT NULL,
	key     TEXT    NOT NULL,
	value   BLOB    NOT NULL,
	version INTEGER NOT NULL CHECK (version >= 1),
	updated TEXT    NOT NULL,
	PRIMARY KEY (kind, key)
);
`

// initSchema checks the file's identity and schema version and creates the
// schema in a new file, all in one write transaction so that two processes
// opening a new file at once create it once.
func (s *Store) initSchema(ctx context.Context) error {
	wrap := func(err error) error { return dbError("open "+s.path, err) }
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return wrap(err)
	}
	defer tx.Rollback() // a no-op after Commit
	var appID, version, objects int
	if err := tx.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID); err != nil {
		return wrap(err)
	}
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return wrap(err)
	}
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema").Scan(&objects); err != nil {
		return wrap(err)
	}
	switch {
	case appID == 0 && version == 0 && objects == 0:
		// A new (or empty) database: create the schema.
		if _, err := tx.ExecContext(ctx, schemaV1+schemaV2+schemaV3); err != nil {
			return wrap(err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA application_id = %d", applicationID)); err != nil {
			return wrap(err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", schemaVersion)); err != nil {
			return wrap(err)
		}
	case appID != applicationID:
		return fmt.Errorf("%w: %s: a SQLite database of another application (application_id %#x, %d schema objects)", ErrNotJournal, s.path, appID, objects)
	case version > schemaVersion:
		return fmt.Errorf("%w: %s has schema version %d, this keel knows up to %d", ErrSchemaTooNew, s.path, version, schemaVersion)
	case version == 1 || version == 2:
		// Version 1 lacks the records table, version 2 the text index;
		// adding them changes nothing else, and an older keel refuses
		// the file afterwards (ErrSchemaTooNew) rather than ignore the
		// vault or write memory the index does not know.
		add := schemaV3
		if version == 1 {
			add = schemaV2 + schemaV3
		}
		if _, err := tx.ExecContext(ctx, add); err != nil {
			return wrap(err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", schemaVersion)); err != nil {
			return wrap(err)
		}
	case version < schemaVersion:
		return fmt.Errorf("journal/sqlite: open %s: unknown schema version %d", s.path, version)
	}
	if err := tx.Commit(); err != nil {
		return wrap(err)
	}
	return nil
}

// queries are the read statements of the hot paths, prepared once per
// Store (database/sql re-prepares them per connection as needed and
// reuses them inside transactions via Tx.StmtContext). Appends have
// their own (writer.go).
type queries struct {
	readEvents, runExists *sql.Stmt // on the readers
}

func prepare(ctx context.Context, r *sql.DB) (*queries, error) {
	q := &queries{}
	for _, p := range []struct {
		dst **sql.Stmt
		sql string
	}{
		{&q.readEvents, `SELECT seq, type, time, payload, prev_hash, hash FROM events WHERE run_id = ? AND seq >= ? ORDER BY seq`},
		{&q.runExists, `SELECT count(*) FROM runs WHERE run_id = ?`},
	} {
		st, err := r.PrepareContext(ctx, p.sql)
		if err != nil {
			q.close()
			return nil, err
		}
		*p.dst = st
	}
	return q, nil
}

func (q *queries) close() error {
	var errs []error
	for _, st := range []*sql.Stmt{q.readEvents, q.runExists} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	return errors.Join(errs...)
}
