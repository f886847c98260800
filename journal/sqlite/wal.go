package sqlite

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// WALTail describes the end of a SQLite write-ahead log: the frames that
// belong to committed transactions, and what follows them.
//
// A torn write in SQLite's WAL mode is a transaction whose frames were
// cut off by a crash: a frame only partly written, a frame whose checksum
// fails (its bytes did not all reach the disk), or frames of a
// transaction without its commit frame. SQLite's recovery keeps every
// frame up to the last valid commit frame and ignores the rest
// (https://www.sqlite.org/fileformat.html#wal_file_format), so the journal
// keeps every event appended before the torn one. [InspectWAL] finds such a
// tail so that Keel can report it before SQLite discards it.
type WALTail struct {
	// Path is the database file (the log is Path + "-wal").
	Path string
	// Committed is the number of frames up to and including the last
	// valid commit frame; End is the byte offset just after it.
	Committed int
	End       int64
	// Torn is the number of bytes after End that look like an
	// interrupted write (same salt as the log, but partial, failing
	// their checksum, or never committed); 0 when the log ends cleanly.
	// Frames left over from before the log was last reset (another
	// salt) are not torn.
	Torn   int64
	Reason string
}

// readWAL reads the write-ahead log of the SQLite database at db
// (db + "-wal"). It returns nil and no error when there is no log.
func readWAL(db string) (*WALTail, error) {
	b, err := os.ReadFile(db + "-wal")
	if errors.Is(err, fs.ErrNotExist) || err == nil && len(b) == 0 {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	t := &WALTail{}
	if len(b) < 32 {
		t.Torn, t.Reason = int64(len(b)), fmt.Sprintf("the log header is cut short (%d of 32 bytes)", len(b))
		return t, nil
	}
	magic := binary.BigEndian.Uint32(b[0:4])
	var order binary.ByteOrder
	switch magic {
	case 0x377f0682:
		order = binary.LittleEndian
	case 0x377f0683:
		order = binary.BigEndian
	default:
		return nil, fmt.Errorf("%s-wal is not a SQLite write-ahead log (magic %#x)", db, magic)
	}
	pageSize := int64(binary.BigEndian.Uint32(b[8:12]))
	if pageSize == 1 {
		pageSize = 65536
	}
	if pageSize < 512 || pageSize&(pageSize-1) != 0 {
		return nil, fmt.Errorf("%s-wal: bad page size %d", db, pageSize)
	}
	salt1, salt2 := binary.BigEndian.Uint32(b[16:20]), binary.BigEndian.Uint32(b[20:24])
	s0, s1 := walChecksum(order, b[:24], 0, 0)
	if s0 != binary.BigEndian.Uint32(b[24:28]) || s1 != binary.BigEndian.Uint32(b[28:32]) {
		t.Torn, t.Reason = int64(len(b)), "the log header fails its checksum (the log is ignored)"
		return t, nil
	}
	frame := 24 + pageSize
	t.End = 32
	off := int64(32)
	n := 0
	for ; off < int64(len(b)); off += frame {
		if off+frame > int64(len(b)) {
			if t.Reason == "" {
				t.Reason = fmt.Sprintf("a frame is cut short (%d of %d bytes)", int64(len(b))-off, frame)
			}
			t.Torn = int64(len(b)) - t.End
			return t, nil
		}
		h := b[off : off+24]
		if binary.BigEndian.Uint32(h[8:12]) != salt1 || binary.BigEndian.Uint32(h[12:16]) != salt2 {
			break // a frame from before the last reset: not part of this log
		}
		s0, s1 = walChecksum(order, h[:8], s0, s1)
		s0, s1 = walChecksum(order, b[off+24:off+frame], s0, s1)
		if s0 != binary.BigEndian.Uint32(h[16:20]) || s1 != binary.BigEndian.Uint32(h[20:24]) {
			t.Reason = fmt.Sprintf("frame %d fails its checksum (its bytes did not all reach the disk)", n+1)
			t.Torn = off + frame - t.End
			// Count the rest of the salted frames as torn too.
			for o := off + frame; o+24 <= int64(len(b)); o += frame {
				if binary.BigEndian.Uint32(b[o+8:o+12]) != salt1 || binary.BigEndian.Uint32(b[o+12:o+16]) != salt2 {
					break
				}
				t.Torn = min(o+frame, int64(len(b))) - t.End
			}
			return t, nil
		}
		n++
		if binary.BigEndian.Uint32(h[4:8]) != 0 { // a commit frame
			t.Committed, t.End = n, off+frame
		}
	}
	if n > t.Committed {
		t.Torn = off - t.End
		t.Reason = fmt.Sprintf("%d frame(s) of a transaction that never committed", n-t.Committed)
	}
	return t, nil
}

// walChecksum is SQLite's WAL checksum over b (a multiple of 8 bytes),
// continuing from s0, s1.
func walChecksum(order binary.ByteOrder, b []byte, s0, s1 uint32) (uint32, uint32) {
	for i := 0; i+8 <= len(b); i += 8 {
		s0 += order.Uint32(b[i:]) + s1
		s1 += order.Uint32(b[i+4:]) + s0
	}
	return s0, s1
}

// InspectWAL reports the end of the write-ahead log of the journal named
// by dsn (a path or a sqlite: DSN, as [OpenDSN] takes it), before SQLite's
// recovery silently drops a torn tail when the database is next opened.
// It returns nil and no error when there is no log. Another process may
// be in the middle of an append, which looks the same from outside; so a
// tail that looks torn is read again while holding the database's write
// lock, when no append can be in progress. InspectWAL only reads.
func InspectWAL(dsn string) (*WALTail, error) {
	p, _, err := parseDSN(dsn)
	if err != nil {
		return nil, err
	}
	t, err := readWAL(p)
	if err == nil && t != nil && t.Torn > 0 {
		t, err = readWALLocked(p)
	}
	if t != nil {
		t.Path = p
	}
	return t, err
}

// readWALLocked is readWAL under the database's write lock (a BEGIN
// IMMEDIATE transaction that is rolled back).
func readWALLocked(p string) (*WALTail, error) {
	db, err := sql.Open("sqlite", "file:"+p+"?_pragma=busy_timeout(10000)&_txlock=immediate&mode=rw")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		return nil, fmt.Errorf("check the journal's write-ahead log: %w", err)
	}
	defer tx.Rollback()
	return readWAL(p)
}
