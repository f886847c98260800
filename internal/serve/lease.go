package serve

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/internal/realpath"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/redact"
)

// LeaseID is the lease a server or scheduler holds on a SQLite journal:
// no run's id (run ids have no spaces).
const LeaseID = "keel serve"

// IsPostgres reports whether the journal address names a PostgreSQL
// database.
func IsPostgres(dsn string) bool {
	l := strings.ToLower(dsn)
	return strings.HasPrefix(l, "postgres://") || strings.HasPrefix(l, "postgresql://")
}

// Lease makes this process the only server of a SQLite journal (store,
// at address db): a second keel serve on it would resume the first one's
// runs as interrupted and rebind the saved CLI token. It is the journal's
// own lease (flock(2) beside the database, released when the process
// dies), taken on [LeaseID] (keel scheduler takes it too). Several
// servers on one PostgreSQL journal stay allowed: they share it by the
// run leases and adoption. note says who holds it ("keel serve at URL").
// Call the returned function to release it.
func Lease(ctx context.Context, store journal.Store, db, note string) (func(), error) {
	s, ok := store.(interface {
		LockAs(ctx context.Context, id, note string) (func(), error)
		Holder(ctx context.Context, id string) (string, error)
	})
	if !ok || IsPostgres(db) {
		return func() {}, nil
	}
	unlock, err := s.LockAs(ctx, LeaseID, note)
	if errors.Is(err, journal.ErrLocked) {
		holder, _ := s.Holder(ctx, LeaseID)
		if holder == "" {
			holder = "holder unknown"
		}
		return nil, &assemble.UsageError{Err: fmt.Errorf("the journal %s already has a server (%s): a SQLite journal takes one keel serve; stop that one, or give this one another --db (several servers share a PostgreSQL journal)", redact.DSN(db), holder)}
	}
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	return unlock, nil
}

// JournalFiles returns the files of a SQLite journal at db (the
// database, its write-ahead log, shared memory, rollback journal and
// locks) and, where one is a symbolic link, its target: no run may touch
// them. A PostgreSQL journal has none.
func JournalFiles(db string) []string {
	if strings.Contains(db, ":") {
		return nil
	}
	var out []string
	for _, suffix := range []string{"", "-wal", "-shm", "-journal", ".locks"} {
		out = append(out, db+suffix)
		if r := realpath.Resolve(db + suffix); r != db+suffix {
			out = append(out, r)
		}
	}
	return out
}

// CheckRoots refuses a workspace root inside one of the server's own
// files or directories (own: Keel's home, the journal's files...), which
// would refuse every workspace under it: better said at start than at
// each run.
func CheckRoots(roots []string, own ...[]string) error {
	for _, r := range roots {
		rr := realpath.Resolve(r)
		for _, list := range own {
			for _, p := range list {
				if realpath.Within(rr, realpath.Resolve(p)) {
					return &assemble.UsageError{Err: fmt.Errorf("--workspace-root %s is inside %s, which holds the server's own files (tokens, configuration, journal): no run could work there; choose a directory outside it", r, p)}
				}
			}
		}
	}
	return nil
}

// UnderRoot reports whether dir (symbolic links resolved) is one of roots
// or below one. No roots: nothing is.
func UnderRoot(dir string, roots []string) bool {
	d := realpath.Resolve(dir)
	for _, r := range roots {
		if realpath.Within(d, realpath.Resolve(r)) {
			return true
		}
	}
	return false
}
