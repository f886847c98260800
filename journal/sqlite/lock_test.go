package sqlite_test

import (
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/journaltest"
	"github.com/keel-run/keel/journal/sqlite"
)

func TestLockLease(t *testing.T) {
	db := filepath.Join(t.TempDir(), "j.db")
	a, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := t.Context()
	if h, err := b.Holder(ctx, "r1"); err != nil || h != "" {
		t.Fatalf("Holder before lock = %q, %v", h, err)
	}
	unlock, err := a.Lock(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lock(ctx, "r1"); !errors.Is(err, journal.ErrLocked) || !strings.Contains(err.Error(), "pid") {
		t.Errorf("second Lock = %v, want ErrLocked naming the pid", err)
	}
	if _, err := a.Lock(ctx, "r1"); !errors.Is(err, journal.ErrLocked) {
		t.Errorf("Lock twice through one store = %v, want ErrLocked", err)
	}
	if h, _ := b.Holder(ctx, "r1"); !strings.Contains(h, "pid") {
		t.Errorf("Holder = %q", h)
	}
	if u2, err := b.Lock(ctx, "r2"); err != nil {
		t.Errorf("other run: %v", err)
	} else {
		u2()
	}
	unlock()
	u3, err := b.Lock(ctx, "r1")
	if err != nil {
		t.Fatalf("Lock after unlock = %v", err)
	}
	u3()
}

// A lease held by a process that dies is released by the kernel.
func TestLockReleasedWhenHolderDies(t *testing.T) {
	if os.Getenv("KEEL_LOCK_CHILD") != "" {
		s, err := sqlite.Open(os.Getenv("KEEL_LOCK_CHILD"), nil)
		if err != nil {
			os.Exit(2)
		}
		if _, err := s.Lock(t.Context(), "r"); err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString("locked\n")
		select {} // hold it until killed
	}
	db := filepath.Join(t.TempDir(), "j.db")
	s, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockReleasedWhenHolderDies$")
	cmd.Env = append(os.Environ(), "KEEL_LOCK_CHILD="+db)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 7)
	if _, err := out.Read(buf); err != nil || string(buf) != "locked\n" {
		t.Fatalf("child: %q %v", buf, err)
	}
	if _, err := s.Lock(t.Context(), "r"); !errors.Is(err, journal.ErrLocked) {
		t.Fatalf("Lock while the child holds it = %v", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	unlock, err := s.Lock(t.Context(), "r")
	if err != nil {
		t.Fatalf("Lock after the holder died = %v", err)
	}
	unlock()
}

// Deleting a run's newest events leaves a chain that verifies; the runs
// index shows the cut.
func TestTruncatedTailDetected(t *testing.T) {
	db := filepath.Join(t.TempDir(), "j.db")
	s, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	var drafts []journal.Draft
	for i := 0; i < 6; i++ {
		drafts = append(drafts, journal.Draft{Type: "x.y", Time: journaltest.T0, Payload: []byte(`{"i":1}`)})
	}
	if _, err := s.Append(ctx, "r", 0, drafts...); err != nil {
		t.Fatal(err)
	}
	if _, err := journal.ReadVerified(ctx, s, "r"); err != nil {
		t.Fatalf("intact journal: %v", err)
	}
	raw, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`DELETE FROM events WHERE run_id = 'r' AND seq >= 5`); err != nil {
		t.Fatal(err)
	}
	_, err = journal.ReadVerified(ctx, s, "r")
	var ce *journal.CorruptError
	if !errors.As(err, &ce) || ce.Seq != 5 {
		t.Errorf("ReadVerified after deleting the tail = %v, want corrupt at 5", err)
	}
}
