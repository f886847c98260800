package journal_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	_ "github.com/keel-run/keel/journal/sqlite" // registers "sqlite"
)

// The registry is process-global and cannot be undone, so the test
// schemes are registered once, at init (tests may run with -count > 1).
var gotDSN = make(chan string, 1)

func openMem(context.Context, string) (journal.Store, error) { return mem.New(), nil }

func init() {
	journal.Register("test-mem", func(_ context.Context, dsn string) (journal.Store, error) {
		gotDSN <- dsn
		return mem.New(), nil
	})
	journal.Register("test-dup", openMem)
}

func TestOpenDispatchesByScheme(t *testing.T) {
	if !slices.Contains(journal.Schemes(), "test-mem") || !slices.Contains(journal.Schemes(), "sqlite") {
		t.Errorf("Schemes() = %v, want test-mem and sqlite", journal.Schemes())
	}
	for _, dsn := range []string{"test-mem:whatever", "TEST-MEM://x?y=z"} {
		s, err := journal.Open(t.Context(), dsn)
		if err != nil {
			t.Fatalf("Open(%q) = %v", dsn, err)
		}
		if got := <-gotDSN; got != dsn {
			t.Errorf("Open(%q) gave the test-mem opener dsn %q, want the whole dsn", dsn, got)
		}
		if _, ok := s.(*mem.Store); !ok {
			t.Errorf("Open(%q) = %T, want the test-mem store", dsn, s)
		}
		s.Close()
	}
}

func TestOpenDefaultsToSQLite(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	for _, dsn := range []string{
		filepath.Join(dir, "bare.db"),
		"sqlite:" + filepath.Join(dir, "scheme.db"),
		"sqlite://" + filepath.Join(dir, "slashes.db") + "?sync=normal&busy_timeout=2s",
		filepath.Join(dir, "odd:name?#%.db"),
		"sqlite:" + filepath.Join(dir, "escaped%3F%25.db"),
	} {
		s, err := journal.Open(ctx, dsn)
		if err != nil {
			t.Fatalf("Open(%q) = %v", dsn, err)
		}
		if _, err := s.Append(ctx, "r", 0, journal.Draft{Type: journal.RunCreated, Time: t0}); err != nil {
			t.Errorf("Open(%q).Append = %v", dsn, err)
		}
		s.Close()
	}
	for _, name := range []string{"bare.db", "scheme.db", "slashes.db", "odd:name?#%.db", "escaped?%.db"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("journal file %q was not created under that name: %v", name, err)
		}
	}
	// The bare path and the scheme forms name the same file.
	s, err := journal.Open(ctx, "sqlite:"+filepath.Join(dir, "bare.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if evs, err := s.Read(ctx, "r", 1); err != nil || len(evs) != 1 {
		t.Errorf("reopened bare.db: Read = %d events, %v; want the 1 event written before", len(evs), err)
	}
}

func TestOpenErrors(t *testing.T) {
	for _, tt := range []struct {
		dsn     string
		want    error  // errors.Is target, or nil
		hide    string // must not appear in the message
		contain string
	}{
		{dsn: "nosuch://user:hunter2@host/db", want: journal.ErrUnknownScheme, hide: "hunter2", contain: "nosuch"},
		{dsn: "", contain: "empty dsn"},
		{dsn: "sqlite:" + filepath.Join(t.TempDir(), "x.db") + "?sync=sometimes", contain: "sync"},
		{dsn: "sqlite:" + filepath.Join(t.TempDir(), "x.db") + "?color=blue", contain: "unknown option"},
		{dsn: filepath.Join(t.TempDir(), "no", "such", "dir", "x.db"), contain: "open"},
	} {
		s, err := journal.Open(t.Context(), tt.dsn)
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) = nil error, want one", tt.dsn)
			continue
		}
		if tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("Open(%q) = %v, want %v", tt.dsn, err, tt.want)
		}
		if tt.hide != "" && strings.Contains(err.Error(), tt.hide) {
			t.Errorf("Open(%q) error %q leaks %q", tt.dsn, err, tt.hide)
		}
		if !strings.Contains(err.Error(), tt.contain) {
			t.Errorf("Open(%q) error %q does not mention %q", tt.dsn, err, tt.contain)
		}
	}
}

func TestRegisterPanics(t *testing.T) {
	open := journal.Opener(openMem)
	for _, tt := range []struct {
		name   string
		scheme string
		open   journal.Opener
	}{
		{"duplicate", "test-dup", open},
		{"sqlite again", "sqlite", open},
		{"one letter (a drive)", "c", open},
		{"upper case", "Test-Upper", open},
		{"not a scheme", "test mem", open},
		{"empty", "", open},
		{"nil opener", "test-nil", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q) did not panic", tt.scheme)
				}
			}()
			journal.Register(tt.scheme, tt.open)
		})
	}
}
