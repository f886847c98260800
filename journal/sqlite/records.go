package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/keel-run/keel/journal"
)

var _ journal.Records = (*Store)(nil)

// GetRecord implements [journal.Records].
func (s *Store) GetRecord(ctx context.Context, kind, key string) (*journal.Record, error) {
	rec := &journal.Record{Kind: kind, Key: key}
	var updated string
	err := s.r.QueryRowContext(ctx, `SELECT value, version, updated FROM records WHERE kind = ? AND key = ?`, kind, key).Scan(&rec.Value, &rec.Version, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("journal/sqlite: record %s/%s: %w", kind, key, journal.ErrNotFound)
	}
	if err != nil {
		return nil, dbError("read record", err)
	}
	rec.Updated, _ = time.Parse(journal.TimeFormat, updated)
	return rec, nil
}

// PutRecord implements [journal.Records] in one write transaction.
func (s *Store) PutRecord(ctx context.Context, kind, key string, value []byte, ifVersion int64) (int64, error) {
	if value == nil {
		value = []byte{}
	}
	now := time.Now().UTC().Format(journal.TimeFormat)
	var res sql.Result
	var err error
	if ifVersion == 0 {
		res, err = s.w.ExecContext(ctx, `INSERT INTO records (kind, key, value, version, updated) VALUES (?, ?, ?, 1, ?) ON CONFLICT (kind, key) DO NOTHING`, kind, key, value, now)
	} else {
		res, err = s.w.ExecContext(ctx, `UPDATE records SET value = ?, version = version + 1, updated = ? WHERE kind = ? AND key = ? AND version = ?`, value, now, kind, key, ifVersion)
	}
	if err != nil {
		return 0, dbError("write record", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return 0, fmt.Errorf("journal/sqlite: record %s/%s is not at version %d: %w", kind, key, ifVersion, journal.ErrConflict)
	}
	return ifVersion + 1, nil
}

// DeleteRecord implements [journal.Records].
func (s *Store) DeleteRecord(ctx context.Context, kind, key string, ifVersion int64) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM records WHERE kind = ? AND key = ? AND version = ?`, kind, key, ifVersion)
	if err != nil {
		return dbError("delete record", err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return nil
	}
	if _, err := s.GetRecord(ctx, kind, key); err != nil {
		return err
	}
	return fmt.Errorf("journal/sqlite: record %s/%s is not at version %d: %w", kind, key, ifVersion, journal.ErrConflict)
}

// ListRecords implements [journal.Records].
func (s *Store) ListRecords(ctx context.Context, kind string) ([]journal.Record, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT key, value, version, updated FROM records WHERE kind = ? ORDER BY key`, kind)
	if err != nil {
		return nil, dbError("list records", err)
	}
	defer rows.Close()
	var out []journal.Record
	for rows.Next() {
		rec := journal.Record{Kind: kind}
		var updated string
		if err := rows.Scan(&rec.Key, &rec.Value, &rec.Version, &updated); err != nil {
			return nil, dbError("list records", err)
		}
		rec.Updated, _ = time.Parse(journal.TimeFormat, updated)
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, dbError("list records", err)
	}
	return out, nil
}
