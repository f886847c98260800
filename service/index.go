package service

import (
	"context"
	"fmt"
	"sync"

	"github.com/keel-run/keel/journal"
)

// runsIndex keeps what the store's runs index listed, per list asked for,
// while the store's version ([journal.Versioner]) says nothing was
// appended since: a dashboard's or an approvals page's poll of a quiet
// server then reads no index rows (SQLite's index read, its rows' text and
// times, was most of a listing's allocations). A store that has no
// version, or cannot tell it now, is read every time.
type runsIndex struct {
	store journal.Store
	mu    sync.Mutex
	lists map[string]indexList
}

// indexList is one list and the store's version before it was read.
type indexList struct {
	version uint64
	runs    []journal.RunSummary
}

// maxIndexLists bounds how many different lists runsIndex keeps (each
// status filter and page size is one).
const maxIndexLists = 16

// list returns the index's runs as p asks for them. The slice is shared:
// callers do not change it.
func (x *runsIndex) list(ctx context.Context, p *journal.ListParams) ([]journal.RunSummary, error) {
	vs, ok := x.store.(journal.Versioner)
	if !ok {
		return x.store.Runs(ctx, p)
	}
	// The version is taken before the read: an append between the two
	// is in the list and changes the version for the next call.
	v, ok := vs.Version(ctx)
	if !ok {
		return x.store.Runs(ctx, p)
	}
	key := fmt.Sprint(p.Status, p.Limit)
	x.mu.Lock()
	l, hit := x.lists[key]
	x.mu.Unlock()
	if hit && l.version == v {
		return l.runs, nil
	}
	runs, err := x.store.Runs(ctx, p)
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	if x.lists == nil || len(x.lists) >= maxIndexLists {
		x.lists = map[string]indexList{}
	}
	x.lists[key] = indexList{version: v, runs: runs}
	x.mu.Unlock()
	return runs, nil
}
