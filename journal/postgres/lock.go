package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/keel-run/keel/journal"
)

// leases holds this Store's run leases: session-level advisory locks on one
// dedicated connection, opened on the first Lock. PostgreSQL releases them
// when that connection ends (the process died, or Close).
type leases struct {
	cfg *pgx.ConnConfig

	mu   sync.Mutex
	conn *pgx.Conn
	// gen counts connections: an unlock of a lease taken on an earlier,
	// lost connection has nothing left to release.
	gen  int
	held map[int64]int // lock key → generation
}

func (l *leases) init(cfg *pgx.ConnConfig) {
	l.cfg = connConfig(cfg, "keel lease pid "+pidHost())
	l.held = map[int64]int{}
}

// lockKey is the advisory lock key of run's lease: 64 bits of a SHA-256 of
// a prefix and the run id, so that neither other runs nor other
// applications' advisory locks collide with it in practice.
func lockKey(prefix, runID string) int64 {
	h := sha256.Sum256([]byte(prefix + "\x00" + runID))
	return int64(binary.BigEndian.Uint64(h[:8]))
}

// schemaLockKey serialises migrations.
var schemaLockKey = lockKey("keel.schema", "")

// Lock implements [journal.Locker] with pg_try_advisory_lock on the
// Store's lease connection: it never waits. A run already leased through
// this Store is refused too (advisory locks are re-entrant per session;
// leases are not).
func (s *Store) Lock(ctx context.Context, runID string) (func(), error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	l := &s.lock
	key := lockKey("keel.run", runID)
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.held[key]; ok {
		return nil, fmt.Errorf("%w: run %s is executing (this process, %s)", journal.ErrLocked, runID, pidHost())
	}
	if l.conn == nil || l.conn.IsClosed() {
		conn, err := pgx.ConnectConfig(ctx, l.cfg)
		if err != nil {
			return nil, fmt.Errorf("journal/postgres: lock run %s: lease connection: %w", runID, err)
		}
		// Leases of a lost connection were released by the server.
		if l.conn != nil {
			l.conn.Close(context.Background())
		}
		l.conn, l.gen, l.held = conn, l.gen+1, map[int64]int{}
	}
	var ok bool
	if err := l.conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&ok); err != nil {
		return nil, fmt.Errorf("journal/postgres: lock run %s: %w", runID, err)
	}
	if !ok {
		holder, err := s.holder(ctx, key)
		if err != nil || holder == "" {
			holder = "holder unknown"
		}
		return nil, fmt.Errorf("%w: run %s is executing (%s)", journal.ErrLocked, runID, holder)
	}
	gen := l.gen
	l.held[key] = gen
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if g, ok := l.held[key]; !ok || g != gen || l.conn == nil || l.conn.IsClosed() {
				return
			}
			delete(l.held, key)
			if _, err := l.conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, key); err != nil {
				// The connection is unusable: closing it releases
				// every lease it held, which is what its holders must
				// assume anyway.
				l.conn.Close(context.Background())
			}
		})
	}, nil
}

// Holder implements [journal.Locker]: the application name of the session
// holding run's lease ("keel lease pid 1234 on host"), or "".
func (s *Store) Holder(ctx context.Context, runID string) (string, error) {
	if err := s.checkOpen(); err != nil {
		return "", err
	}
	return s.holder(ctx, lockKey("keel.run", runID))
}

func (s *Store) holder(ctx context.Context, key int64) (string, error) {
	var name string
	var pid int
	err := s.pool.QueryRow(ctx, `
SELECT coalesce(a.application_name, ''), l.pid
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
	AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND l.classid::bigint = $1 AND l.objid::bigint = $2
LIMIT 1`, int64(uint64(key)>>32), int64(uint64(key)&0xffffffff)).Scan(&name, &pid)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("journal/postgres: lease holder: %w", err)
	}
	if name == "" {
		name = "server pid " + strconv.Itoa(pid)
	}
	return name, nil
}

func (l *leases) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		// Release before disconnecting: the server ends a closed
		// session asynchronously, and another process's Lock right
		// after our Close must not find the lease still held.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		l.conn.Exec(ctx, `SELECT pg_advisory_unlock_all()`)
		cancel()
		l.conn.Close(context.Background())
		l.conn = nil
	}
	l.held = map[int64]int{}
}

func itoa(n int) string { return strconv.Itoa(n) }
