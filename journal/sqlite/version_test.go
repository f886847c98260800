package sqlite_test

import (
	"testing"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
)

// Version changes after an append by this Store and by another Store on
// the same file (another process, for SQLite), and only then.
func TestVersionFollowsAppends(t *testing.T) {
	s, path := openTemp(t, nil)
	other, err := sqlite.Open(path, nil)
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
	created := journal.Draft{Type: journal.RunCreated, Time: time.Unix(1, 0), Payload: []byte(`{}`)}
	v0 := version()
	if v := version(); v != v0 {
		t.Fatalf("no append: version %d, then %d", v0, v)
	}
	if _, err := s.Append(t.Context(), "r1", 0, created); err != nil {
		t.Fatal(err)
	}
	v1 := version()
	if v1 == v0 {
		t.Fatal("own append: version unchanged")
	}
	if _, err := other.Append(t.Context(), "r2", 0, created); err != nil {
		t.Fatal(err)
	}
	v2 := version()
	if v2 == v1 {
		t.Fatal("another store's append: version unchanged")
	}
	if v := version(); v != v2 {
		t.Fatalf("no append: version %d, then %d", v2, v)
	}
	s.Close()
	if _, ok := s.Version(t.Context()); ok {
		t.Fatal("Version after Close: ok")
	}
}
