// Package postgres is the [journal.Store] for servers and clusters: one
// PostgreSQL database shared by every Keel process of a deployment, through
// github.com/jackc/pgx/v5.
//
// # Schema
//
// The tables mirror journal/sqlite's. keel_events holds one row per event,
// (run_id, seq) its primary key: run_id, seq, type, time (text in
// [journal.TimeFormat], because timestamptz keeps microseconds and the hash
// covers nanoseconds), payload (bytea, the sealed bytes stored byte for
// byte, never jsonb, which would reorder keys and break the hash),
// prev_hash and hash. keel_runs is the index behind [Store.Runs] and
// [Store.Head] (created, updated, last_seq, last_type, last_hash, status),
// updated in the same transaction as each append. Run ids and times
// compare in the "C" collation, so that listing order does not depend on
// the database's locale. System streams (the identity directory, API
// tokens, the vault, the action log) are runs with reserved ids such as
// _keel.identity and live in the same tables, hash-chained like any run.
//
// The schema is versioned in keel_schema, one row per applied migration.
// [Open] applies the missing migrations in one transaction under an
// advisory lock, so that several processes starting at once migrate once,
// and refuses a database whose schema is newer than this Keel knows
// ([ErrSchemaTooNew]).
//
// # Appends and reads
//
// An append is one transaction: it locks the run's index row (FOR UPDATE),
// checks that the index and the events table agree on the run's newest
// event and that it is after ([journal.ErrConflict] otherwise; two
// creators of one new run meet on the primary key, which is reported as a
// conflict too), inserts the sealed events, updates the index and sends a
// NOTIFY on the channel keel_events, all committed together (with the
// server's synchronous_commit, on by default: an acknowledged event is on
// the server's disk). A read is one statement, so it sees one snapshot: a
// run is either unknown or known with whole batches.
//
// # Wake-ups and leases
//
// [Store.Notify] wakes readers of a run after every append to it, by any
// process: appends through this Store wake them before Append returns, and
// others' appends arrive by LISTEN keel_events on a dedicated connection
// (opened on the first Notify; after a reconnect every reader is woken
// once, since notifications may have been missed meanwhile). So
// [journal.Follow] sees other servers' events at once instead of at its
// next poll.
//
// [Store.Lock] gives a run's lease as a session-level advisory lock held on
// a dedicated connection of this Store. When the holding process dies, its
// connection ends and PostgreSQL releases the lock: a kill -9 frees the
// lease at once, the loss of a machine when TCP keepalive notices the dead
// connection. If that connection breaks while the process lives, its
// leases are lost with it; appends are still kept apart by the after
// check, so a second executor of the run fails with [journal.ErrConflict]
// at its first append.
//
// [Store.Version] lets a server keep the runs index it listed while no
// transaction ended on the database (its snapshot did not move).
//
// # Registration
//
// Importing the package registers the schemes "postgres" and "postgresql"
// with [journal.Register], so that keel run --db postgres://... works. The
// DSN is pgx's (a URL or key=value connection string); pool_max_conns and
// the other pgxpool options are honoured, and unknown parameters are sent
// to the server as run-time settings (for example search_path=keel to keep
// Keel's tables in a schema of their own).
package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/internal/backend"
	"github.com/keel-run/keel/redact"
)

// ErrSchemaTooNew means the database was migrated by a newer Keel whose
// schema this one does not know; upgrade Keel rather than risk misreading
// it.
var ErrSchemaTooNew = errors.New("journal/postgres: database schema is newer than this keel supports")

// defaultMaxConns is the pool size when the DSN sets no pool_max_conns:
// enough for a server's concurrent appends and reads, leaving the
// database's connection limit to several servers.
const defaultMaxConns = 16

// Store is a journal in one PostgreSQL database; see the package
// documentation. A Store is safe for concurrent use; Close is idempotent.
type Store struct {
	pool *pgxpool.Pool
	// id tells this Store's own notifications apart from others'.
	id     string
	broker backend.Broker

	listenOnce   sync.Once
	listening    atomic.Bool
	listenCancel context.CancelFunc
	listenDone   chan struct{}

	lock leases

	// version is what Version last saw.
	version struct {
		sync.Mutex
		snap string
		n    uint64
	}

	closed    atomic.Bool
	closeOnce sync.Once
}

var (
	_ journal.Store          = (*Store)(nil)
	_ journal.Notifier       = (*Store)(nil)
	_ journal.SharedNotifier = (*Store)(nil)
	_ journal.Locker         = (*Store)(nil)
	_ journal.Head           = (*Store)(nil)
	_ journal.Versioner      = (*Store)(nil)
)

// Open connects to the database named by dsn (a pgx connection string:
// postgres://user:password@host:port/db?sslmode=... or key=value pairs),
// checks that it answers, and creates or migrates Keel's tables. The
// error names the DSN with its password hidden.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's parse errors quote the connection string; keep ours.
		return nil, fmt.Errorf("journal/postgres: open %s: invalid connection string", redact.DSN(dsn))
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = defaultMaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("journal/postgres: open %s: %w", redact.DSN(dsn), err)
	}
	var id [8]byte
	rand.Read(id[:])
	s := &Store{pool: pool, id: hex.EncodeToString(id[:])}
	s.lock.init(cfg.ConnConfig)
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("journal/postgres: open %s: %w", redact.DSN(dsn), err)
	}
	return s, nil
}

// OpenDSN is [Open] as a [journal.Opener], registered for the schemes
// "postgres" and "postgresql".
func OpenDSN(ctx context.Context, dsn string) (journal.Store, error) {
	s, err := Open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func init() {
	journal.Register("postgres", OpenDSN)
	journal.Register("postgresql", OpenDSN)
}

// Pool returns the connection pool, for tools that inspect the database
// beside the journal (tests, migrations of their own). Writing Keel's
// tables through it bypasses the chain and the index.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Close releases this Store's leases, stops its listener and closes its
// connections; operations started afterwards fail. Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.listenOnce.Do(func() {}) // no listener starts after Close
		if s.listenCancel != nil {
			s.listenCancel()
			<-s.listenDone
		}
		s.lock.close()
		s.pool.Close()
	})
	return nil
}

var errClosed = errors.New("journal/postgres: store is closed")

func (s *Store) checkOpen() error {
	if s.closed.Load() {
		return errClosed
	}
	return nil
}

// pgCode returns the SQLSTATE of a PostgreSQL error in err's chain, or "".
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// uniqueViolation is SQLSTATE 23505.
const uniqueViolation = "23505"

// connConfig returns a copy of cfg for a dedicated connection named name
// (its application_name, visible in pg_stat_activity).
func connConfig(cfg *pgx.ConnConfig, name string) *pgx.ConnConfig {
	c := cfg.Copy()
	if c.RuntimeParams == nil {
		c.RuntimeParams = map[string]string{}
	}
	c.RuntimeParams["application_name"] = name
	return c
}
