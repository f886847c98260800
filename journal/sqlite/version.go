package sqlite

import (
	"context"
	"database/sql"
	"errors"
)

// Version implements [journal.Versioner] with SQLite's PRAGMA
// data_version on a connection of its own, opened on the first call: its
// value changes when any other connection, of this process (the Store's
// writer) or of another, commits to the file. The number returned counts
// the changes Version saw (and the connections it had to open again).
func (s *Store) Version(ctx context.Context) (uint64, bool) {
	v := &s.version
	v.Lock()
	defer v.Unlock()
	if v.closed {
		return 0, false
	}
	if v.conn == nil {
		if v.db == nil {
			db, err := sql.Open("sqlite", connString(s.path, &Options{BusyTimeout: defaultBusyTimeout}, false))
			if err != nil {
				return 0, false
			}
			db.SetMaxOpenConns(1)
			v.db = db
		}
		c, err := v.db.Conn(ctx)
		if err != nil {
			return 0, false
		}
		v.conn = c
		v.n++ // a new connection's data_version says nothing of the old one's
		v.dv = -1
	}
	var dv int64
	if err := v.conn.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&dv); err != nil {
		v.conn.Close()
		v.conn = nil
		return 0, false
	}
	if dv != v.dv {
		if v.dv != -1 {
			v.n++
		}
		v.dv = dv
	}
	return v.n, true
}

// closeVersion closes Version's connection; Version fails afterwards.
func (s *Store) closeVersion() error {
	v := &s.version
	v.Lock()
	defer v.Unlock()
	v.closed = true
	var errs []error
	if v.conn != nil {
		errs = append(errs, v.conn.Close())
	}
	if v.db != nil {
		errs = append(errs, v.db.Close())
	}
	return errors.Join(errs...)
}
