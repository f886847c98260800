package sqlite

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseDSN(t *testing.T) {
	for _, tt := range []struct {
		dsn      string
		wantPath string
		want     *Options
		wantErr  bool
	}{
		{dsn: "/var/lib/keel/j.db", wantPath: "/var/lib/keel/j.db"},
		{dsn: "rel/j.db?x=1", wantPath: "rel/j.db?x=1"}, // a bare path is literal
		{dsn: "sqlite:j.db", wantPath: "j.db", want: &Options{}},
		{dsn: "sqlite:/abs/j.db", wantPath: "/abs/j.db", want: &Options{}},
		{dsn: "sqlite:///abs/j.db", wantPath: "/abs/j.db", want: &Options{}},
		{dsn: "sqlite://rel/j.db", wantPath: "rel/j.db", want: &Options{}},
		{dsn: "sqlite:/a%3Fb%25.db", wantPath: "/a?b%.db", want: &Options{}},
		{dsn: "sqlite:/j.db?sync=NORMAL&busy_timeout=1500ms&max_readers=2", wantPath: "/j.db", want: &Options{Sync: SyncNormal, BusyTimeout: 1500 * time.Millisecond, MaxReaders: 2}},
		{dsn: "sqlite:/j.db?sync=full", wantPath: "/j.db", want: &Options{Sync: SyncFull}},
		{dsn: "sqlite:/j.db?sync=off", wantErr: true},
		{dsn: "sqlite:/j.db?busy_timeout=5", wantErr: true},
		{dsn: "sqlite:/j.db?busy_timeout=-1s", wantErr: true},
		{dsn: "sqlite:/j.db?max_readers=0", wantErr: true},
		{dsn: "sqlite:/j.db?journal_mode=delete", wantErr: true},
		{dsn: "sqlite:/bad%zz.db", wantErr: true},
	} {
		path, o, err := parseDSN(tt.dsn)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseDSN(%q) error = %v, want error %t", tt.dsn, err, tt.wantErr)
			continue
		}
		if tt.wantErr {
			continue
		}
		if path != tt.wantPath {
			t.Errorf("parseDSN(%q) path = %q, want %q", tt.dsn, path, tt.wantPath)
		}
		if diff := cmp.Diff(tt.want, o); diff != "" {
			t.Errorf("parseDSN(%q) options (-want +got):\n%s", tt.dsn, diff)
		}
	}
}

func TestConnString(t *testing.T) {
	o := &Options{Sync: SyncNormal, BusyTimeout: 2 * time.Second}
	for _, tt := range []struct {
		path   string
		writer bool
		want   string
	}{
		{"/a/b.db", true, "file:/a/b.db?_pragma=busy_timeout%282000%29&_pragma=journal_mode%28WAL%29&_pragma=synchronous%28NORMAL%29&_txlock=immediate"},
		{"rel/../c?#%.db", false, "file:c%3F%23%25.db?_pragma=busy_timeout%282000%29&_pragma=query_only%281%29"},
	} {
		if got := connString(tt.path, o, tt.writer); got != tt.want {
			t.Errorf("connString(%q, writer %t) = %q, want %q", tt.path, tt.writer, got, tt.want)
		}
	}
}

// The pragmas the options ask for are the ones in effect.
func TestOptionsTakeEffect(t *testing.T) {
	for _, tt := range []struct {
		opts     *Options
		wantSync int // PRAGMA synchronous: 1 NORMAL, 2 FULL
	}{
		{nil, 2},
		{&Options{Sync: SyncNormal, BusyTimeout: 1234 * time.Millisecond}, 1},
	} {
		s, err := Open(t.TempDir()+"/j.db", tt.opts)
		if err != nil {
			t.Fatal(err)
		}
		var mode string
		var syncMode, busy int
		ctx := t.Context()
		if err := s.w.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if err := s.w.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&syncMode); err != nil {
			t.Fatal(err)
		}
		if err := s.w.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil {
			t.Fatal(err)
		}
		wantBusy := 10000
		if tt.opts != nil {
			wantBusy = int(tt.opts.BusyTimeout.Milliseconds())
		}
		if mode != "wal" || syncMode != tt.wantSync || busy != wantBusy {
			t.Errorf("Open(%+v): journal_mode %s, synchronous %d, busy_timeout %d; want wal, %d, %d", tt.opts, mode, syncMode, busy, tt.wantSync, wantBusy)
		}
		if _, err := s.r.ExecContext(ctx, "DELETE FROM events"); err == nil {
			t.Error("a reader connection could write")
		}
		s.Close()
	}
}
