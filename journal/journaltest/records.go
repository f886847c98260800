package journaltest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/keel-run/keel/journal"
)

// checkRecords checks [journal.Records] when the store implements it:
// compare-and-swap versions, not-found and conflict errors, listing in
// key order by kind, and that of 20 concurrent writers of one version
// exactly one wins.
func checkRecords(ctx context.Context, s journal.Store) error {
	rs, ok := s.(journal.Records)
	if !ok {
		return nil
	}
	var v violations
	if _, err := rs.GetRecord(ctx, "k", "a"); !errors.Is(err, journal.ErrNotFound) {
		v.add("GetRecord of a missing record: %v, want ErrNotFound", err)
	}
	ver, err := rs.PutRecord(ctx, "k", "b", []byte("one"), 0)
	if err != nil || ver != 1 {
		return fmt.Errorf("PutRecord new = %d, %v; want 1, nil", ver, err)
	}
	if _, err := rs.PutRecord(ctx, "k", "b", []byte("x"), 0); !errors.Is(err, journal.ErrConflict) {
		v.add("PutRecord of an existing record with version 0: %v, want ErrConflict", err)
	}
	if _, err := rs.PutRecord(ctx, "k", "b", []byte("x"), 7); !errors.Is(err, journal.ErrConflict) {
		v.add("PutRecord with a wrong version: %v, want ErrConflict", err)
	}
	if ver, err = rs.PutRecord(ctx, "k", "b", []byte("two"), 1); err != nil || ver != 2 {
		v.add("PutRecord update = %d, %v; want 2, nil", ver, err)
	}
	if _, err := rs.PutRecord(ctx, "k", "a", []byte{0, 1, 2}, 0); err != nil {
		v.add("PutRecord a: %v", err)
	}
	if _, err := rs.PutRecord(ctx, "other", "a", []byte("o"), 0); err != nil {
		v.add("PutRecord other/a: %v", err)
	}
	r, err := rs.GetRecord(ctx, "k", "b")
	if err != nil || !bytes.Equal(r.Value, []byte("two")) || r.Version != 2 {
		v.add("GetRecord = %+v, %v; want value two at version 2", r, err)
	}
	list, err := rs.ListRecords(ctx, "k")
	if err != nil || len(list) != 2 || list[0].Key != "a" || list[1].Key != "b" || !bytes.Equal(list[0].Value, []byte{0, 1, 2}) {
		v.add("ListRecords = %+v, %v; want a, b", list, err)
	}
	if err := rs.DeleteRecord(ctx, "k", "b", 1); !errors.Is(err, journal.ErrConflict) {
		v.add("DeleteRecord with a wrong version: %v, want ErrConflict", err)
	}
	if err := rs.DeleteRecord(ctx, "k", "b", 2); err != nil {
		v.add("DeleteRecord: %v", err)
	}
	if err := rs.DeleteRecord(ctx, "k", "b", 2); !errors.Is(err, journal.ErrNotFound) {
		v.add("DeleteRecord of a deleted record: %v, want ErrNotFound", err)
	}
	// Concurrent writers of one version: exactly one wins.
	if _, err := rs.PutRecord(ctx, "race", "r", []byte("0"), 0); err != nil {
		return errors.Join(append(v, err)...)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := rs.PutRecord(ctx, "race", "r", []byte(fmt.Sprint(i)), 1)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				wins++
			} else if !errors.Is(err, journal.ErrConflict) {
				v.add("concurrent PutRecord: %v", err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		v.add("%d of 20 concurrent PutRecords of version 1 won, want 1", wins)
	}
	return v.err()
}
