package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/keel-run/keel/journal"
)

var _ journal.Records = (*Store)(nil)

// GetRecord implements [journal.Records].
func (s *Store) GetRecord(ctx context.Context, kind, key string) (*journal.Record, error) {
	rec := &journal.Record{Kind: kind, Key: key}
	err := s.pool.QueryRow(ctx, `SELECT value, version, updated FROM keel_records WHERE kind = $1 AND key = $2`, kind, key).
		Scan(&rec.Value, &rec.Version, &rec.Updated)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("journal/postgres: record %s/%s: %w", kind, key, journal.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("journal/postgres: read record: %w", err)
	}
	return rec, nil
}

// PutRecord implements [journal.Records]: one statement, so the
// compare-and-swap is atomic.
func (s *Store) PutRecord(ctx context.Context, kind, key string, value []byte, ifVersion int64) (int64, error) {
	if value == nil {
		value = []byte{}
	}
	var n int64
	if ifVersion == 0 {
		tag, err := s.pool.Exec(ctx, `INSERT INTO keel_records (kind, key, value, version) VALUES ($1, $2, $3, 1) ON CONFLICT (kind, key) DO NOTHING`, kind, key, value)
		if err != nil {
			return 0, fmt.Errorf("journal/postgres: write record: %w", err)
		}
		n = tag.RowsAffected()
	} else {
		tag, err := s.pool.Exec(ctx, `UPDATE keel_records SET value = $3, version = version + 1, updated = now() WHERE kind = $1 AND key = $2 AND version = $4`, kind, key, value, ifVersion)
		if err != nil {
			return 0, fmt.Errorf("journal/postgres: write record: %w", err)
		}
		n = tag.RowsAffected()
	}
	if n != 1 {
		return 0, fmt.Errorf("journal/postgres: record %s/%s is not at version %d: %w", kind, key, ifVersion, journal.ErrConflict)
	}
	return ifVersion + 1, nil
}

// DeleteRecord implements [journal.Records].
func (s *Store) DeleteRecord(ctx context.Context, kind, key string, ifVersion int64) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM keel_records WHERE kind = $1 AND key = $2 AND version = $3`, kind, key, ifVersion)
	if err != nil {
		return fmt.Errorf("journal/postgres: delete record: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	if _, err := s.GetRecord(ctx, kind, key); err != nil {
		return err
	}
	return fmt.Errorf("journal/postgres: record %s/%s is not at version %d: %w", kind, key, ifVersion, journal.ErrConflict)
}

// ListRecords implements [journal.Records].
func (s *Store) ListRecords(ctx context.Context, kind string) ([]journal.Record, error) {
	rows, err := s.pool.Query(ctx, `SELECT key, value, version, updated FROM keel_records WHERE kind = $1 ORDER BY key`, kind)
	if err != nil {
		return nil, fmt.Errorf("journal/postgres: list records: %w", err)
	}
	defer rows.Close()
	var out []journal.Record
	for rows.Next() {
		rec := journal.Record{Kind: kind}
		if err := rows.Scan(&rec.Key, &rec.Value, &rec.Version, &rec.Updated); err != nil {
			return nil, fmt.Errorf("journal/postgres: list records: %w", err)
		}
		out = append(out, rec)
	}
	return out, rows.Err()
}
