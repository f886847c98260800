// Package sqlite is the default [journal.Store]: one SQLite database file,
// written through modernc.org/sqlite (pure Go, no cgo).
//
// # Schema
//
// The events table holds one row per event, (run_id, seq) its primary key:
// run_id, seq, type, time (TEXT in [journal.TimeFormat]), payload (BLOB,
// the sealed bytes stored byte for byte, never re-encoded, because the hash
// covers them), prev_hash and hash (lowercase hex). The runs table is the
// index behind [Store.Runs] — run_id, created, updated, last_seq,
// last_type, status, and last_hash as an anchor for the chain's tail — and
// is updated in the same transaction as each append. The schema version
// is kept in PRAGMA user_version and the file is marked with PRAGMA
// application_id, so that a newer schema ([ErrSchemaTooNew]) or someone
// else's database ([ErrNotJournal]) is refused with a clear error instead
// of being misread. Any other backend must keep the payload as bytes in
// the same way (in PostgreSQL, bytea, never jsonb, which would reorder
// keys and break the hash).
//
// # Durability and concurrency
//
// The database runs in WAL mode. By default every append is committed with
// PRAGMA synchronous=FULL: the WAL is fsynced before Append returns, so an
// acknowledged event survives a power cut. [SyncNormal] skips that fsync:
// still atomic and never corrupt, and safe against a crash of the process,
// but the newest appends can be lost if the machine loses power (see
// https://www.sqlite.org/pragma.html#pragma_synchronous and
// https://www.sqlite.org/wal.html). Choose it only for journals that can
// be regenerated.
//
// Several processes may share one file (a CLI approving while a server
// runs). Each append is one BEGIN IMMEDIATE transaction that takes the
// database's write lock before reading the run's newest event, so two
// writers of one run are serialised and the loser of a slot gets
// [journal.ErrConflict]. A process waits up to [Options.BusyTimeout] for
// another process's lock. Within one process, appends share a single
// connection and queue in Go instead. Reads use a separate pool of
// read-only connections and never block writers.
//
// # Registration
//
// Importing the package registers the "sqlite" scheme with
// [journal.Register]; [journal.Open] also treats a DSN without a scheme
// as a SQLite file path. The DSN forms are described at [OpenDSN].
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/internal/backend"
)

// Errors callers branch on when opening a database.
var (
	// ErrNotJournal means the file is not a Keel journal: not a SQLite
	// database at all, or a SQLite database that belongs to something
	// else. The wrapped error carries SQLite's own message.
	ErrNotJournal = errors.New("journal/sqlite: not a keel journal database")
	// ErrDamaged means SQLite found the file damaged: truncated,
	// overwritten or otherwise malformed below the level of the hash chain
	// (SQLITE_CORRUPT). Restore it from a backup or an exported journal;
	// Keel never repairs it.
	ErrDamaged = errors.New("journal/sqlite: database file is damaged")
	// ErrSchemaTooNew means the database was written by a newer Keel whose
	// schema this one does not know; upgrade Keel rather than risk
	// misreading it.
	ErrSchemaTooNew = errors.New("journal/sqlite: database schema is newer than this keel supports")
)

// Sync is the fsync policy of appends, SQLite's PRAGMA synchronous.
type Sync int

// Sync policies. The zero value is [SyncFull].
const (
	// SyncFull fsyncs the write-ahead log on every commit: an event is on
	// stable storage when Append returns.
	SyncFull Sync = iota
	// SyncNormal lets the operating system write the log back later: a
	// crash of the process loses nothing, a power loss may lose the newest
	// appends (never corrupting older ones).
	SyncNormal
)

// String returns "FULL" or "NORMAL", the PRAGMA value.
func (s Sync) String() string {
	if s == SyncNormal {
		return "NORMAL"
	}
	return "FULL"
}

// Options configure [Open]. The zero value is valid: durable appends, a
// 10 s busy timeout and 4 reader connections.
type Options struct {
	// Sync is the fsync policy of appends; default [SyncFull].
	Sync Sync
	// BusyTimeout bounds how long an append (or Open) waits for the write
	// lock held by another process before failing with SQLite's "database
	// is locked" error; default 10 s. It does not bound waits inside one
	// process, which queue on the context.
	BusyTimeout time.Duration
	// MaxReaders is the number of read connections; default 4.
	MaxReaders int
}

const (
	defaultBusyTimeout = 10 * time.Second
	defaultMaxReaders  = 4
)

// Store is a journal in one SQLite file; see the package documentation for
// its schema, durability and locking. A Store is safe for concurrent use;
// Close is idempotent.
type Store struct {
	path   string
	w      *sql.DB // one connection, BEGIN IMMEDIATE transactions
	r      *sql.DB // read-only pool
	q      *queries
	broker backend.Broker
	sync   Sync

	// wmu serialises appends (they share the one writer connection
	// anyway) so that deferred names the run of the newest append
	// committed without an fsync since the newest one with, if any; it
	// also guards wr, the appends' statements.
	wmu      sync.Mutex
	wr       *writer
	deferred string
	stats    struct{ Syncs, Deferred atomic.Int64 }

	// version is Version's connection and what it last saw.
	version struct {
		sync.Mutex
		db     *sql.DB
		conn   *sql.Conn
		dv     int64
		n      uint64
		closed bool
	}

	closeOnce sync.Once
	closeErr  error
}

var (
	_ journal.Store     = (*Store)(nil)
	_ journal.Notifier  = (*Store)(nil)
	_ journal.Deferrer  = (*Store)(nil)
	_ journal.Versioner = (*Store)(nil)
)

// Stats counts the commits of a Store's appends.
type Stats struct {
	// Syncs counts the appends (and [Store.Sync]s) committed with an
	// fsync of the write-ahead log: with [SyncFull], one each.
	Syncs int64
	// Deferred counts the appends committed without one
	// ([Store.AppendDeferred]); with [SyncNormal], none is counted.
	Deferred int64
}

// Stats returns the counts of the Store's commits so far.
func (s *Store) Stats() Stats {
	return Stats{Syncs: s.stats.Syncs.Load(), Deferred: s.stats.Deferred.Load()}
}

// Open opens the journal database at path, creating the file and its
// schema if it does not exist (the parent directory must exist). A nil
// opts means the zero [Options]. A new file is given mode 0600 (owner
// only). It returns an error wrapping
// [ErrNotJournal] for a file that is not a Keel journal (including one that
// is not SQLite), [ErrDamaged] for a file SQLite finds malformed (a
// truncated journal, typically; an empty file is a valid new database),
// [ErrSchemaTooNew] for a newer schema, and SQLite's error for anything
// else (a missing directory, a lock held past [Options.BusyTimeout]). The
// name ":memory:" and "file:" URIs are refused: for an in-memory journal
// use [github.com/keel-run/keel/journal/mem].
func Open(path string, opts *Options) (*Store, error) {
	return open(context.Background(), path, opts)
}

func open(ctx context.Context, path string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = defaultBusyTimeout
	}
	if o.MaxReaders <= 0 {
		o.MaxReaders = defaultMaxReaders
	}
	if o.Sync != SyncFull && o.Sync != SyncNormal {
		return nil, fmt.Errorf("journal/sqlite: open %s: unknown sync policy %d", path, o.Sync)
	}
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("journal/sqlite: open %q: want a file path (use journal/mem for an in-memory journal)", path)
	}
	// A new journal is made readable by its owner only once its schema
	// exists (below): it holds every tool output, a run's environment and
	// setup script. (Creating the empty file first, with its mode, let
	// another process open it before the schema and race for WAL mode.)
	_, statErr := os.Stat(path)
	created := errors.Is(statErr, fs.ErrNotExist)
	s := &Store{path: path, sync: o.Sync}
	w, err := sql.Open("sqlite", connString(path, &o, true))
	if err != nil {
		return nil, dbError("open "+path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	s.w = w
	// Another process opening the same new file at the same moment holds
	// the lock that switching it to WAL mode needs, and SQLite answers
	// SQLITE_BUSY at once instead of waiting busy_timeout: try again
	// until busy_timeout has passed.
	deadline := time.Now().Add(o.BusyTimeout)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		err := s.initSchema(ctx)
		if err == nil {
			break
		}
		if !isBusy(err) || time.Now().After(deadline) {
			w.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			w.Close()
			return nil, err
		case <-time.After(wait):
		}
	}
	if created {
		// SQLite gives -wal and -shm files the database file's mode when
		// it creates them; those it already made are changed too. An
		// existing journal keeps the mode its owner gave it.
		for _, p := range []string{path, path + "-wal", path + "-shm"} {
			if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
				w.Close()
				return nil, dbError("open "+path, err)
			}
		}
	}
	r, err := sql.Open("sqlite", connString(path, &o, false))
	if err != nil {
		w.Close()
		return nil, dbError("open "+path, err)
	}
	r.SetMaxOpenConns(o.MaxReaders)
	r.SetMaxIdleConns(o.MaxReaders)
	s.r = r
	if s.q, err = prepare(ctx, r); err != nil {
		r.Close()
		w.Close()
		return nil, dbError("open "+path, err)
	}
	return s, nil
}

// connString is the modernc DSN for path: a file: URI (so that any
// character in the path is legal) with per-connection pragmas.
func connString(path string, o *Options, writer bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", o.BusyTimeout.Milliseconds()))
	if writer {
		// journal_mode is persistent in the file; setting it on every
		// writer connection is a no-op after the first.
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous("+o.Sync.String()+")")
		q.Set("_txlock", "immediate")
	} else {
		q.Add("_pragma", "query_only(1)")
	}
	return "file:" + escapePath(filepath.Clean(path)) + "?" + q.Encode()
}

// escapePath percent-encodes the bytes a SQLite URI path cannot hold
// literally (https://www.sqlite.org/uri.html).
func escapePath(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '%' || c == '?' || c == '#' || c < 0x20 || c == 0x7f {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// Path returns the database file path given to [Open].
func (s *Store) Path() string { return s.path }

// Notify implements [journal.Notifier]: the channel receives after each
// append to runID through this Store, before that Append returns. Appends
// by other processes or other Stores on the same file wake nobody; readers
// must poll for them (as [journal.Follow] does).
func (s *Store) Notify(runID string) (<-chan struct{}, func()) {
	return s.broker.Notify(runID)
}

// Close closes the database; operations started afterwards fail. Close is
// idempotent and returns the first close error on its first call, nil
// after.
func (s *Store) Close() error {
	first := false
	s.closeOnce.Do(func() {
		first = true
		s.closeErr = errors.Join(s.closeVersion(), s.q.close(), s.closeWriter(), s.r.Close(), s.w.Close())
	})
	if !first {
		return nil
	}
	return s.closeErr
}

// OpenDSN opens a journal named by a DSN, the form [journal.Open] passes
// to the "sqlite" scheme: "sqlite:PATH", "sqlite://PATH" (so
// "sqlite:///abs/path" is an absolute path), or a bare PATH. After "?",
// the scheme forms take options: sync=full|normal ([Options.Sync]),
// busy_timeout=DURATION (a Go duration such as 5s) and max_readers=N, and
// PATH is percent-decoded ("%3F" for a "?" in a file name). A bare PATH is
// taken literally, "?" and "%" included. Unknown options are errors.
func OpenDSN(ctx context.Context, dsn string) (journal.Store, error) {
	path, o, err := parseDSN(dsn)
	if err != nil {
		return nil, err
	}
	s, err := open(ctx, path, o)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func parseDSN(dsn string) (string, *Options, error) {
	rest, ok := strings.CutPrefix(dsn, "sqlite:")
	if !ok {
		return dsn, nil, nil
	}
	rest = strings.TrimPrefix(rest, "//")
	path, query, _ := strings.Cut(rest, "?")
	path, err := url.PathUnescape(path)
	if err != nil {
		return "", nil, fmt.Errorf("journal/sqlite: dsn %q: path: %w", dsn, err)
	}
	o := &Options{}
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", nil, fmt.Errorf("journal/sqlite: dsn %q: %w", dsn, err)
	}
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "sync":
			switch strings.ToLower(v) {
			case "full":
				o.Sync = SyncFull
			case "normal":
				o.Sync = SyncNormal
			default:
				return "", nil, fmt.Errorf("journal/sqlite: dsn %q: sync=%q, want full or normal", dsn, v)
			}
		case "busy_timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return "", nil, fmt.Errorf("journal/sqlite: dsn %q: busy_timeout=%q, want a positive duration such as 5s", dsn, v)
			}
			o.BusyTimeout = d
		case "max_readers":
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return "", nil, fmt.Errorf("journal/sqlite: dsn %q: max_readers=%q, want a positive integer", dsn, v)
			}
			o.MaxReaders = n
		default:
			return "", nil, fmt.Errorf("journal/sqlite: dsn %q: unknown option %q", dsn, k)
		}
	}
	return path, o, nil
}

func init() {
	journal.Register("sqlite", OpenDSN)
}

// sqliteCode returns the primary SQLite result code in err's chain, or 0.
func sqliteCode(err error) int {
	var se *msqlite.Error
	if errors.As(err, &se) {
		return se.Code() & 0xff
	}
	return 0
}

// isBusy reports whether err is SQLite's SQLITE_BUSY (or one of its
// extended codes).
func isBusy(err error) bool {
	return sqliteCode(err) == sqlite3.SQLITE_BUSY
}

// dbError wraps err from operation op (such as "append run X") with the
// package prefix, and with [ErrNotJournal] or [ErrDamaged] when SQLite
// says the file is not a database or is malformed.
func dbError(op string, err error) error {
	switch sqliteCode(err) {
	case sqlite3.SQLITE_NOTADB:
		return fmt.Errorf("%w: %s: %w", ErrNotJournal, op, err)
	case sqlite3.SQLITE_CORRUPT:
		return fmt.Errorf("%w: %s: %w", ErrDamaged, op, err)
	}
	return fmt.Errorf("journal/sqlite: %s: %w", op, err)
}
