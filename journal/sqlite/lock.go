package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/keel-run/keel/journal"
)

var _ journal.Locker = (*Store)(nil)

// lockPath is the lease file of run: DB.locks/<sha256(run)[:16]>.lock
// beside the database, so that every process sharing the file finds it.
func (s *Store) lockPath(runID string) string {
	h := sha256.Sum256([]byte(runID))
	return filepath.Join(s.path+".locks", hex.EncodeToString(h[:8])+".lock")
}

// Lock implements [journal.Locker] with flock(2) on a lock file beside the
// database: the kernel releases it when the holder's process dies, so a
// crashed run can be resumed at once, and a live one cannot be resumed
// twice. The holder's pid and host are written into the file for error
// messages.
func (s *Store) Lock(ctx context.Context, runID string) (func(), error) {
	return s.LockAs(ctx, runID, "")
}

// LockAs is [Store.Lock] with a note about the holder ("keel serve at
// http://127.0.0.1:8420") added to its pid and host, which [Store.Holder]
// and the error of a second Lock report. Any name is a lease: keel serve
// takes one that is no run's to be the journal's only server.
func (s *Store) LockAs(ctx context.Context, runID, note string) (func(), error) {
	p := s.lockPath(runID)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return nil, fmt.Errorf("journal/sqlite: lock run %s: %w", runID, err)
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("journal/sqlite: lock run %s: %w", runID, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := readHolder(f)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: run %s is executing (%s)", journal.ErrLocked, runID, holder)
		}
		return nil, fmt.Errorf("journal/sqlite: lock run %s: %w", runID, err)
	}
	host, _ := os.Hostname()
	f.Truncate(0)
	holder := fmt.Sprintf("pid %d on %s", os.Getpid(), host)
	if note != "" {
		holder += ", " + strings.Join(strings.Fields(note), " ")
	}
	f.WriteAt([]byte(holder), 0)
	return func() {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}

// Holder implements [journal.Locker].
func (s *Store) Holder(ctx context.Context, runID string) (string, error) {
	f, err := os.OpenFile(s.lockPath(runID), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return readHolder(f), nil
		}
		return "", err
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return "", nil
}

func readHolder(f *os.File) string {
	b := make([]byte, 256)
	n, _ := f.ReadAt(b, 0)
	if h := strings.TrimSpace(string(b[:n])); h != "" {
		return h
	}
	return "holder unknown"
}

var _ journal.Head = (*Store)(nil)

// Head implements [journal.Head] from the runs index, which each append
// updates in the same transaction as its events.
func (s *Store) Head(ctx context.Context, runID string) (int64, string, error) {
	var seq int64
	var hash string
	err := s.r.QueryRowContext(ctx, `SELECT last_seq, last_hash FROM runs WHERE run_id = ?`, runID).Scan(&seq, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", fmt.Errorf("journal/sqlite: run %s: %w", runID, journal.ErrNotFound)
	}
	if err != nil {
		return 0, "", dbError("read run head", err)
	}
	return seq, hash, nil
}
