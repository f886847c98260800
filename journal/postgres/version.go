package postgres

import "context"

// Version implements [journal.Versioner] with the server's current
// snapshot (pg_current_snapshot: the oldest transaction still running,
// one past the newest that ended, and those in between still running),
// one short query on a pooled connection. Every transaction that wrote
// anything and ended (an append by this process or another, on this
// server or another one of the deployment) either moves the snapshot's
// end or leaves its list of running transactions, and neither goes back:
// the snapshot's text is the same at two moments only if no transaction
// ended in between. The number returned counts the different snapshots
// Version saw in a row.
//
// Unlike a count of the LISTEN notifications, which arrive some time
// after the commit, the snapshot is exact at the moment of the query: a
// list read right after another server created a run contains it. It
// also moves on writes that are not appends (any database of the
// server): then the caller reads the index again, as without a version.
func (s *Store) Version(ctx context.Context) (uint64, bool) {
	if s.closed.Load() {
		return 0, false
	}
	var snap string
	if err := s.pool.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&snap); err != nil {
		return 0, false
	}
	v := &s.version
	v.Lock()
	defer v.Unlock()
	// All the callers that get one number saw one snapshot; calls that
	// race may see two snapshots alternate, which only costs reads.
	if snap != v.snap {
		v.n++
		v.snap = snap
	}
	return v.n, true
}
