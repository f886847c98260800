package postgres_test

import (
	"testing"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/postgres"
)

// Version changes after an append by this Store and by another Store on
// the same database (another server of a deployment), at once: the next
// call after the other's Append returned sees it, with no wait for a
// notification. Without appends it stays put (the test's cluster is
// private, but autovacuum may commit now and then: it must settle within
// a few calls).
func TestVersionFollowsAppends(t *testing.T) {
	s, dsn := openTemp(t)
	other, err := postgres.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	version := func() uint64 {
		t.Helper()
		v, ok := s.Version(t.Context())
		if !ok {
			t.Fatal("Version: not ok")
		}
		return v
	}
	settled := func() uint64 {
		t.Helper()
		v := version()
		for range 20 {
			w := version()
			if w == v {
				return v
			}
			v = w
		}
		t.Fatal("no append: version changes on every call")
		return 0
	}
	created := journal.Draft{Type: journal.RunCreated, Time: time.Unix(1, 0), Payload: []byte(`{}`)}
	v0 := settled()
	if _, err := s.Append(t.Context(), "r1", 0, created); err != nil {
		t.Fatal(err)
	}
	v1 := version()
	if v1 == v0 {
		t.Fatal("own append: version unchanged")
	}
	v1 = settled()
	for i := range 3 {
		if _, err := other.Append(t.Context(), "r2", int64(i), journal.Draft{Type: journal.RunCreated, Time: time.Unix(1, 0), Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		v2 := version()
		if v2 == v1 {
			t.Fatalf("another store's append %d: version unchanged", i+1)
		}
		v1 = settled()
	}
	s.Close()
	if _, ok := s.Version(t.Context()); ok {
		t.Fatal("Version after Close: ok")
	}
}
