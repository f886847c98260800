package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/keel-run/keel/journal"
)

var _ journal.TextIndex = (*Store)(nil)

// IndexText implements [journal.TextIndex] in one transaction.
func (s *Store) IndexText(ctx context.Context, kind, key, text string, seq int64) error {
	body := strings.Join(journal.SearchWords(text), " ")
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO keel_text (kind, key, seq, tsv) VALUES ($1, $2, $3, to_tsvector('simple', $4))
			ON CONFLICT (kind, key) DO UPDATE SET seq = excluded.seq, tsv = excluded.tsv`, kind, key, seq, body); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO keel_text_marks (kind, seq) VALUES ($1, $2)
			ON CONFLICT (kind) DO UPDATE SET seq = greatest(keel_text_marks.seq, excluded.seq)`, kind, seq)
		return err
	})
	if err != nil {
		return fmt.Errorf("journal/postgres: index text: %w", err)
	}
	return nil
}

// UnindexText implements [journal.TextIndex].
func (s *Store) UnindexText(ctx context.Context, kind, key string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM keel_text WHERE kind = $1 AND key = $2`, kind, key); err != nil {
		return fmt.Errorf("journal/postgres: unindex text: %w", err)
	}
	return nil
}

// SearchText implements [journal.TextIndex] with ts_rank.
func (s *Store) SearchText(ctx context.Context, kind, query string, limit int) ([]string, error) {
	terms := journal.SearchTerms(query)
	if len(terms) == 0 || limit <= 0 {
		return nil, nil
	}
	// A term is letters and digits only, so it is a plain lexeme of
	// to_tsquery; joined with | any of them matches.
	rows, err := s.pool.Query(ctx, `SELECT key FROM keel_text, to_tsquery('simple', $2) q
		WHERE kind = $1 AND tsv @@ q ORDER BY ts_rank(tsv, q) DESC, key LIMIT $3`, kind, strings.Join(terms, " | "), limit)
	if err != nil {
		return nil, fmt.Errorf("journal/postgres: search text: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("journal/postgres: search text: %w", err)
	}
	return keys, nil
}

// IndexedUpTo implements [journal.TextIndex].
func (s *Store) IndexedUpTo(ctx context.Context, kind string) (int64, error) {
	var seq int64
	err := s.pool.QueryRow(ctx, `SELECT seq FROM keel_text_marks WHERE kind = $1`, kind).Scan(&seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("journal/postgres: read text index: %w", err)
	}
	return seq, nil
}
