package postgres

import (
	"context"
	"fmt"
)

// migrations are the schema versions in order: migrations[i] takes the
// database from version i to i+1. Never edit an applied one; append.
var migrations = []string{
	// 1: the events table and the runs index. Text columns that are
	// compared or ordered use the "C" collation (byte order, as in
	// SQLite), independent of the database's locale.
	`
CREATE TABLE keel_events (
	run_id    text COLLATE "C" NOT NULL,
	seq       bigint NOT NULL CHECK (seq >= 1),
	type      text NOT NULL,
	time      text COLLATE "C" NOT NULL,
	payload   bytea NOT NULL,
	prev_hash text NOT NULL,
	hash      text NOT NULL,
	PRIMARY KEY (run_id, seq)
);
CREATE TABLE keel_runs (
	run_id    text COLLATE "C" NOT NULL PRIMARY KEY,
	created   text COLLATE "C" NOT NULL,
	updated   text COLLATE "C" NOT NULL,
	last_seq  bigint NOT NULL,
	last_type text NOT NULL,
	last_hash text NOT NULL,
	status    text NOT NULL
);
CREATE INDEX keel_runs_by_created ON keel_runs (created DESC, run_id DESC);
CREATE INDEX keel_runs_by_status ON keel_runs (status, created DESC, run_id DESC);
`,
	// 2: the side table of mutable records (journal.Records): the
	// credential vault's sealed grants and providers, never events.
	`
CREATE TABLE keel_records (
	kind    text COLLATE "C" NOT NULL,
	key     text COLLATE "C" NOT NULL,
	value   bytea NOT NULL,
	version bigint NOT NULL CHECK (version >= 1),
	updated timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (kind, key)
);
`,
	// 3: the full-text index (journal.TextIndex): documents by (kind,
	// key) with their words as a tsvector of the 'simple' configuration
	// (no stemming, as SQLite's unicode61), and per kind the newest
	// event indexed.
	`
CREATE TABLE keel_text (
	kind text COLLATE "C" NOT NULL,
	key  text COLLATE "C" NOT NULL,
	seq  bigint NOT NULL,
	tsv  tsvector NOT NULL,
	PRIMARY KEY (kind, key)
);
CREATE INDEX keel_text_tsv ON keel_text USING gin (tsv);
CREATE TABLE keel_text_marks (
	kind text COLLATE "C" NOT NULL PRIMARY KEY,
	seq  bigint NOT NULL
);
`,
}

// SchemaVersion is the schema version this package writes and reads.
var SchemaVersion = len(migrations)

// migrate brings the database to SchemaVersion in one transaction, under a
// transaction-level advisory lock so that processes opening a new database
// at once migrate it once.
func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, schemaLockKey); err != nil {
		return fmt.Errorf("schema lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `
CREATE TABLE IF NOT EXISTS keel_schema (
	version    integer PRIMARY KEY,
	applied_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
		return fmt.Errorf("schema table: %w", err)
	}
	var have int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM keel_schema`).Scan(&have); err != nil {
		return fmt.Errorf("schema version: %w", err)
	}
	if have > SchemaVersion {
		return fmt.Errorf("%w: the database has schema version %d, this keel knows up to %d", ErrSchemaTooNew, have, SchemaVersion)
	}
	if have == SchemaVersion {
		return nil // the deferred rollback ends the read-only transaction
	}
	for v := have; v < SchemaVersion; v++ {
		if _, err := tx.Exec(ctx, migrations[v]); err != nil {
			return fmt.Errorf("migrate to schema version %d: %w", v+1, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO keel_schema (version) VALUES ($1)`, v+1); err != nil {
			return fmt.Errorf("migrate to schema version %d: %w", v+1, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}
