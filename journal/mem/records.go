package mem

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/keel-run/keel/journal"
)

var _ journal.Records = (*Store)(nil)

// records is the store's [journal.Records] table.
type records struct {
	mu   sync.Mutex
	rows map[[2]string]journal.Record
}

// GetRecord implements [journal.Records].
func (s *Store) GetRecord(ctx context.Context, kind, key string) (*journal.Record, error) {
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	r, ok := s.rec.rows[[2]string{kind, key}]
	if !ok {
		return nil, fmt.Errorf("journal/mem: record %s/%s: %w", kind, key, journal.ErrNotFound)
	}
	r.Value = slices.Clone(r.Value)
	return &r, nil
}

// PutRecord implements [journal.Records].
func (s *Store) PutRecord(ctx context.Context, kind, key string, value []byte, ifVersion int64) (int64, error) {
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	k := [2]string{kind, key}
	if s.rec.rows[k].Version != ifVersion {
		return 0, fmt.Errorf("journal/mem: record %s/%s is not at version %d: %w", kind, key, ifVersion, journal.ErrConflict)
	}
	if s.rec.rows == nil {
		s.rec.rows = map[[2]string]journal.Record{}
	}
	s.rec.rows[k] = journal.Record{Kind: kind, Key: key, Value: slices.Clone(value), Version: ifVersion + 1, Updated: time.Now().UTC()}
	return ifVersion + 1, nil
}

// DeleteRecord implements [journal.Records].
func (s *Store) DeleteRecord(ctx context.Context, kind, key string, ifVersion int64) error {
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	k := [2]string{kind, key}
	r, ok := s.rec.rows[k]
	switch {
	case !ok:
		return fmt.Errorf("journal/mem: record %s/%s: %w", kind, key, journal.ErrNotFound)
	case r.Version != ifVersion:
		return fmt.Errorf("journal/mem: record %s/%s is not at version %d: %w", kind, key, ifVersion, journal.ErrConflict)
	}
	delete(s.rec.rows, k)
	return nil
}

// ListRecords implements [journal.Records].
func (s *Store) ListRecords(ctx context.Context, kind string) ([]journal.Record, error) {
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	var out []journal.Record
	for k, r := range s.rec.rows {
		if k[0] == kind {
			r.Value = slices.Clone(r.Value)
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b journal.Record) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}
