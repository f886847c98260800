package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
)

// A write-ahead log cut in the middle of its last frame (a torn append)
// is reported with the frames that stay; a whole log is not torn, and no
// log is nothing to report.
func TestInspectWAL(t *testing.T) {
	s, path := openTemp(t, nil)
	for i := range 3 {
		d := journal.Draft{Type: journal.ModelResponded, Time: time.Unix(int64(i), 0).UTC(), Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
		if _, err := s.Append(context.Background(), "run", int64(i), d); err != nil {
			t.Fatal(err)
		}
	}
	// A copy of the database and its log, as a crash leaves them.
	snap := filepath.Join(t.TempDir(), "snap.db")
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(snap+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	whole, err := sqlite.InspectWAL(snap)
	if err != nil || whole == nil || whole.Torn != 0 || whole.Committed == 0 {
		t.Fatalf("InspectWAL(whole log) = %+v, %v", whole, err)
	}
	wal, _ := os.ReadFile(snap + "-wal")
	pageSize := int(wal[8])<<24 | int(wal[9])<<16 | int(wal[10])<<8 | int(wal[11])
	if err := os.Truncate(snap+"-wal", int64(len(wal)-(24+pageSize)/2)); err != nil {
		t.Fatal(err)
	}
	torn, err := sqlite.InspectWAL("sqlite://" + snap)
	if err != nil || torn == nil || torn.Torn == 0 || !strings.Contains(torn.Reason, "cut short") || torn.Path != snap || torn.End > whole.End {
		t.Fatalf("InspectWAL(torn log) = %+v, %v", torn, err)
	}
	if none, err := sqlite.InspectWAL(filepath.Join(t.TempDir(), "none.db")); none != nil || err != nil {
		t.Errorf("no log: %+v, %v", none, err)
	}
}
