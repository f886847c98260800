package memory

import (
	"context"
	"fmt"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
)

// Export returns the memory stream's events from the first, verified:
// an export that [Store.Import] (or `keel audit verify`) can check
// event by event.
func (m *Store) Export(ctx context.Context, store journal.Store) ([]journal.Event, error) {
	evs, err := store.Read(ctx, StreamID, 1)
	if err != nil {
		return nil, err
	}
	if err := journal.Verify(StreamID, evs); err != nil {
		return nil, err
	}
	return evs, nil
}

// ImportResult counts what [Store.Import] did.
type ImportResult struct {
	Imported, Skipped int
}

// Import writes the current entries of an exported memory stream into
// this store, each under its own id with its scope, text, labels and
// provenance (By names who imported it); an entry whose id the store
// already holds is skipped, so importing twice imports once. The
// export's chain is verified first, and nothing is written if it fails.
func (m *Store) Import(ctx context.Context, evs []journal.Event, by string) (*ImportResult, error) {
	if err := journal.Verify(StreamID, evs); err != nil {
		return nil, fmt.Errorf("memory: import: %w", err)
	}
	src := mem.New()
	defer src.Close()
	if _, err := journal.Import(ctx, src, evs); err != nil {
		return nil, fmt.Errorf("memory: import: %w", err)
	}
	from := New(src, nil)
	list, err := from.List(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("memory: import: %w", err)
	}
	res := &ImportResult{}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.sync(ctx); err != nil {
		return nil, err
	}
	for _, e := range list {
		if m.entries[e.ID] != nil {
			res.Skipped++
			continue
		}
		src := e.Source
		if src.By == "" {
			src.By = by
		}
		p := &writtenPayload{ID: e.ID, Scope: e.Scope, Text: e.Text, Labels: e.Labels, Source: src}
		if old := m.entries[e.Supersedes]; old != nil && old.Current() {
			p.Supersedes = e.Supersedes
		}
		if _, err := m.s.Append(ctx, Written, p, nil); err != nil {
			return res, err
		}
		res.Imported++
	}
	return res, m.reindex(ctx)
}
