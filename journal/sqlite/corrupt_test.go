package sqlite_test

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)

// fill appends n events, one per Append, to run and returns them.
func fill(t *testing.T, s journal.Store, run string, n int) []journal.Event {
	t.Helper()
	var out []journal.Event
	for i := range n {
		evs, err := s.Append(t.Context(), run, int64(i), journal.Draft{
			Type:    journal.ModelResponded,
			Time:    t0.Add(time.Duration(i) * time.Second),
			Payload: []byte(fmt.Sprintf(`{"i":%d,"text":"event number %d"}`, i+1, i+1)),
		})
		if err != nil {
			t.Fatalf("Append(%q, %d) = %v", run, i, err)
		}
		out = append(out, evs...)
	}
	return out
}

// rawDB opens path with the SQLite driver directly, as someone editing the
// file behind Keel's back would.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// flip XORs one byte of column col of event seq with 0x01, in place.
func flip(col string, seq, at int) func(*testing.T, *sql.DB) {
	return func(t *testing.T, db *sql.DB) {
		t.Helper()
		var v []byte
		if err := db.QueryRow(`SELECT `+col+` FROM events WHERE run_id = 'r' AND seq = ?`, seq).Scan(&v); err != nil {
			t.Fatal(err)
		}
		v[at] ^= 0x01
		// Keep the column's storage class: payload is a BLOB, the rest
		// TEXT.
		var arg any = string(v)
		if col == "payload" {
			arg = v
		}
		sqlExec(`UPDATE events SET `+col+` = ? WHERE run_id = 'r' AND seq = ?`, arg, seq)(t, db)
	}
}

func sqlExec(q string, args ...any) func(*testing.T, *sql.DB) {
	return func(t *testing.T, db *sql.DB) {
		t.Helper()
		res, err := db.Exec(q, args...)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			t.Fatalf("%s changed no rows", q)
		}
	}
}

func TestTamperingIsDetected(t *testing.T) {
	const events = 6
	for _, tt := range []struct {
		name   string
		tamper func(*testing.T, *sql.DB)
		seq    int64 // the first bad event ReadVerified must name
		// readFails: Store.Read itself cannot decode the run, so Follow
		// yields no good events before the error.
		readFails bool
	}{
		{"payload byte", flip("payload", 3, 5), 3, false},
		{"payload byte in the first event", flip("payload", 1, 20), 1, false},
		{"payload made invalid JSON", flip("payload", 4, 0), 4, false},
		{"type byte", flip("type", 2, 0), 2, false},
		{"time digit", flip("time", 5, 3), 5, false},
		{"time nanosecond digit", flip("time", 3, 27), 3, false},
		{"time made unparsable", sqlExec(`UPDATE events SET time = 'yesterday' WHERE run_id = 'r' AND seq = 4`), 4, true},
		{"hash byte", flip("hash", 2, 10), 2, false},
		{"hash of the newest event", flip("hash", 6, 63), 6, false},
		{"prev_hash byte", flip("prev_hash", 4, 0), 4, false},
		{"prev_hash of the first event", flip("prev_hash", 1, 0), 1, false},
		{"middle row deleted", sqlExec(`DELETE FROM events WHERE run_id = 'r' AND seq = 3`), 3, false},
		{"first row deleted", sqlExec(`DELETE FROM events WHERE run_id = 'r' AND seq = 1`), 1, false},
		{"payloads swapped", sqlExec(`UPDATE events SET payload = CASE seq WHEN 2 THEN (SELECT payload FROM events WHERE run_id = 'r' AND seq = 5) ELSE (SELECT payload FROM events WHERE run_id = 'r' AND seq = 2) END WHERE run_id = 'r' AND seq IN (2, 5)`), 2, false},
		{"row moved to another run", sqlExec(`UPDATE events SET run_id = 'other' WHERE run_id = 'r' AND seq = 2`), 2, false},
		{"events renumbered", sqlExec(`UPDATE events SET seq = seq + 10 WHERE run_id = 'r' AND seq >= 4`), 4, false},
		{"all events deleted", sqlExec(`DELETE FROM events WHERE run_id = 'r'`), 1, false},
		{"forged event appended", sqlExec(`INSERT INTO events SELECT run_id, 7, type, time, payload, hash, hash FROM events WHERE run_id = 'r' AND seq = 6`), 7, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, path := openTemp(t, nil)
			fill(t, s, "r", events)
			tt.tamper(t, rawDB(t, path))

			_, err := journal.ReadVerified(t.Context(), s, "r")
			var ce *journal.CorruptError
			if !errors.As(err, &ce) || ce.Seq != tt.seq || ce.RunID != "r" {
				t.Fatalf("ReadVerified = %v, want a CorruptError for run r at event %d", err, tt.seq)
			}
			// Follow from the start reports the same event after yielding
			// the good ones before it.
			n := 0
			for _, err := range journal.Follow(t.Context(), s, "r", 1, time.Hour) {
				if err != nil {
					if !errors.As(err, &ce) || ce.Seq != tt.seq {
						t.Errorf("Follow ended with %v, want a CorruptError at event %d", err, tt.seq)
					}
					break
				}
				n++
				if n > events {
					t.Fatal("Follow yielded more events than were stored")
				}
			}
			want := tt.seq - 1
			if tt.readFails {
				want = 0
			}
			if int64(n) != want {
				t.Errorf("Follow yielded %d events before the bad one, want %d", n, want)
			}
		})
	}
}

// A chain cannot show that its newest events were cut off; the runs index
// can, and Append refuses to extend such a run.
func TestTruncatedTailRefusesAppend(t *testing.T) {
	s, path := openTemp(t, nil)
	stored := fill(t, s, "r", 4)
	sqlExec(`DELETE FROM events WHERE run_id = 'r' AND seq = 4`)(t, rawDB(t, path))

	for _, after := range []int64{3, 4} {
		_, err := s.Append(t.Context(), "r", after, journal.Draft{Type: journal.RunCompleted, Time: t0})
		var ce *journal.CorruptError
		if !errors.As(err, &ce) || ce.Seq != 4 {
			t.Errorf("Append(after %d) to a run whose event 4 was deleted = %v, want a CorruptError at event 4", after, err)
		}
	}
	sqlExec(`UPDATE runs SET last_hash = ? WHERE run_id = 'r'`, stored[0].Hash)(t, rawDB(t, path))
	sqlExec(`INSERT INTO events (run_id, seq, type, time, payload, prev_hash, hash) VALUES ('r', 4, ?, ?, ?, ?, ?)`,
		string(stored[3].Type), stored[3].Time.Format(journal.TimeFormat), []byte(stored[3].Payload), stored[3].PrevHash, stored[3].Hash)(t, rawDB(t, path))
	if _, err := s.Append(t.Context(), "r", 4, journal.Draft{Type: journal.RunCompleted, Time: t0}); err == nil {
		t.Error("Append to a run whose indexed hash disagrees with its newest event = nil, want an error")
	}
}

func TestOpenRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	journalPath := filepath.Join(dir, "good.db")
	good, err := sqlite.Open(journalPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, good, "r", 50)
	if err := good.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(journalPath)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	foreign := filepath.Join(dir, "foreign.db")
	sqlExec(`CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('hi')`)(t, rawDB(t, foreign))
	newer := write("newer.db", data)
	db := rawDB(t, newer)
	if _, err := db.Exec(`PRAGMA user_version = 99`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	for _, tt := range []struct {
		name string
		path string
		want error
	}{
		{"text file", write("text.db", []byte(strings.Repeat("this is not a database\n", 200))), sqlite.ErrNotJournal},
		{"short garbage", write("short.db", []byte("SQLite format 2\x00")), sqlite.ErrNotJournal},
		{"truncated to half", write("half.db", data[:len(data)/2]), sqlite.ErrDamaged},
		{"truncated by one page", write("page.db", data[:len(data)-4096]), sqlite.ErrDamaged},
		{"header only", write("header.db", data[:100]), sqlite.ErrDamaged},
		{"another application's database", foreign, sqlite.ErrNotJournal},
		{"newer schema", newer, sqlite.ErrSchemaTooNew},
		{"missing directory", filepath.Join(dir, "nope", "x.db"), nil},
		{"memory", ":memory:", nil},
		{"empty path", "", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := sqlite.Open(tt.path, nil)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%s) = nil error", tt.name)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("Open(%s) = %v, want %v", tt.name, err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "journal/sqlite: ") {
				t.Errorf("Open(%s) error %q lacks the package prefix", tt.name, err)
			}
		})
	}

	// The original still opens and holds its events.
	again, err := sqlite.Open(journalPath, nil)
	if err != nil {
		t.Fatalf("reopening the good journal = %v", err)
	}
	defer again.Close()
	if evs, err := journal.ReadVerified(t.Context(), again, "r"); err != nil || len(evs) != 50 {
		t.Errorf("reopened journal: ReadVerified = %d events, %v; want 50", len(evs), err)
	}
}
