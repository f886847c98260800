package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/keel-run/keel/journal"
)

var _ journal.TextIndex = (*Store)(nil)

// schemaV3 adds the full-text index (journal.TextIndex): documents
// named by (kind, key) in text_docs, their words in the FTS5 table
// text_fts under the same rowid, and per kind the newest event indexed.
const schemaV3 = `
CREATE TABLE text_docs (
	id   INTEGER PRIMARY KEY,
	kind TEXT    NOT NULL,
	key  TEXT    NOT NULL,
	seq  INTEGER NOT NULL,
	UNIQUE (kind, key)
);
CREATE VIRTUAL TABLE text_fts USING fts5(body, tokenize = 'unicode61 remove_diacritics 0');
CREATE TABLE text_marks (
	kind TEXT    NOT NULL PRIMARY KEY,
	seq  INTEGER NOT NULL
);
`

// IndexText implements [journal.TextIndex] in one write transaction.
func (s *Store) IndexText(ctx context.Context, kind, key, text string, seq int64) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return dbError("index text", err)
	}
	defer tx.Rollback()
	var id int64
	err = tx.QueryRowContext(ctx, `SELECT id FROM text_docs WHERE kind = ? AND key = ?`, kind, key).Scan(&id)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		res, err := tx.ExecContext(ctx, `INSERT INTO text_docs (kind, key, seq) VALUES (?, ?, ?)`, kind, key, seq)
		if err != nil {
			return dbError("index text", err)
		}
		if id, err = res.LastInsertId(); err != nil {
			return dbError("index text", err)
		}
	case err != nil:
		return dbError("index text", err)
	default:
		if _, err := tx.ExecContext(ctx, `DELETE FROM text_fts WHERE rowid = ?`, id); err != nil {
			return dbError("index text", err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE text_docs SET seq = ? WHERE id = ?`, seq, id); err != nil {
			return dbError("index text", err)
		}
	}
	body := strings.Join(journal.SearchWords(text), " ")
	if _, err := tx.ExecContext(ctx, `INSERT INTO text_fts (rowid, body) VALUES (?, ?)`, id, body); err != nil {
		return dbError("index text", err)
	}
	if err := markText(ctx, tx, kind, seq); err != nil {
		return err
	}
	return orDB("index text", tx.Commit())
}

// markText raises kind's newest indexed event to seq.
func markText(ctx context.Context, tx *sql.Tx, kind string, seq int64) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO text_marks (kind, seq) VALUES (?, ?) ON CONFLICT (kind) DO UPDATE SET seq = max(seq, excluded.seq)`, kind, seq)
	return orDB("index text", err)
}

// UnindexText implements [journal.TextIndex].
func (s *Store) UnindexText(ctx context.Context, kind, key string) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return dbError("unindex text", err)
	}
	defer tx.Rollback()
	var id int64
	err = tx.QueryRowContext(ctx, `SELECT id FROM text_docs WHERE kind = ? AND key = ?`, kind, key).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return dbError("unindex text", err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM text_fts WHERE rowid = ?`, id); err != nil {
		return dbError("unindex text", err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM text_docs WHERE id = ?`, id); err != nil {
		return dbError("unindex text", err)
	}
	return orDB("unindex text", tx.Commit())
}

// SearchText implements [journal.TextIndex] with FTS5's bm25 ranking.
func (s *Store) SearchText(ctx context.Context, kind, query string, limit int) ([]string, error) {
	terms := journal.SearchTerms(query)
	if len(terms) == 0 || limit <= 0 {
		return nil, nil
	}
	q := make([]string, len(terms))
	for i, t := range terms {
		q[i] = `"` + t + `"` // a term is letters and digits only
	}
	rows, err := s.r.QueryContext(ctx, `SELECT d.key FROM text_fts f JOIN text_docs d ON d.id = f.rowid
		WHERE text_fts MATCH ? AND d.kind = ? ORDER BY bm25(text_fts), d.key LIMIT ?`, strings.Join(q, " OR "), kind, limit)
	if err != nil {
		return nil, dbError("search text", err)
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, dbError("search text", err)
		}
		keys = append(keys, k)
	}
	return keys, orDB("search text", rows.Err())
}

// IndexedUpTo implements [journal.TextIndex].
func (s *Store) IndexedUpTo(ctx context.Context, kind string) (int64, error) {
	var seq int64
	err := s.r.QueryRowContext(ctx, `SELECT seq FROM text_marks WHERE kind = ?`, kind).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return seq, orDB("read text index", err)
}

// orDB is [dbError] for an error that may be nil.
func orDB(op string, err error) error {
	if err == nil {
		return nil
	}
	return dbError(op, err)
}
