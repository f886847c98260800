package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strconv"
	"strings"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/internal/backend"
)

// Append implements [journal.Store.Append] in one BEGIN IMMEDIATE
// transaction: it takes the database's write lock, reads the run's newest
// event, returns an error wrapping [journal.ErrConflict] if that is not
// after, seals the drafts with [journal.Seal] against its hash, inserts
// them and updates the runs index. Invalid drafts (an empty type, a zero
// time, a payload that is not a JSON object) fail the whole call and store
// nothing. A run whose events table disagrees with its index entry (rows
// deleted or rewritten behind Keel's back) returns a [*journal.CorruptError]
// and is not appended to. Subscribers from [Store.Notify] are woken after
// the commit, before Append returns.
func (s *Store) Append(ctx context.Context, runID string, after int64, drafts ...journal.Draft) ([]journal.Event, error) {
	return s.append(ctx, runID, after, false, drafts)
}

// AppendDeferred implements [journal.Deferrer]: Append committed with
// PRAGMA synchronous=NORMAL, so that the write-ahead log is not fsynced
// before it returns; the next commit made with synchronous=FULL (an
// Append, [Store.Sync]) fsyncs the log and with it every earlier frame.
// With [SyncNormal] it is Append.
func (s *Store) AppendDeferred(ctx context.Context, runID string, after int64, drafts ...journal.Draft) ([]journal.Event, error) {
	return s.append(ctx, runID, after, s.sync == SyncFull, drafts)
}

// Sync implements [journal.Deferrer]: when an append of this Store was
// deferred since its newest durable commit, it commits a write with
// synchronous=FULL (the runs index row of that append, rewritten as it
// is), which fsyncs the write-ahead log. With [SyncNormal] it does
// nothing: that Store makes no append durable.
func (s *Store) Sync(ctx context.Context) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.deferred == "" {
		return nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return dbError("sync", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE runs SET last_seq = last_seq WHERE run_id = ?`, s.deferred); err != nil {
		return dbError("sync", err)
	}
	if err := tx.Commit(); err != nil {
		return dbError("sync: commit", err)
	}
	s.deferred = ""
	s.stats.Syncs.Add(1)
	return nil
}

// append stores drafts in one transaction, committed without an fsync
// when deferred, through the writer's statements (writer.go).
func (s *Store) append(ctx context.Context, runID string, after int64, deferred bool, drafts []journal.Draft) ([]journal.Event, error) {
	if err := backend.CheckRunID(runID); err != nil {
		return nil, err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return nil, dbError(fmt.Sprintf("append run %s", runID), err)
	}
	defer conn.Close()
	var (
		events []journal.Event
		bad    bool // the connection must be discarded
	)
	rawErr := conn.Raw(func(dc any) error {
		w, err := s.writerOn(ctx, dc)
		if err != nil {
			return dbError(fmt.Sprintf("append run %s", runID), err)
		}
		if deferred {
			// PRAGMA synchronous cannot change inside a transaction: it
			// is set on the writer connection around this one, and put
			// back before any other write can use the connection (one
			// that cannot be put back is discarded, and a new one opens
			// FULL).
			if err := w.synchronous(ctx, SyncNormal); err != nil {
				return dbError(fmt.Sprintf("append run %s", runID), err)
			}
			defer func() {
				if err := w.synchronous(context.WithoutCancel(ctx), SyncFull); err != nil {
					bad = true
				}
			}()
		}
		events, err = s.appendTx(ctx, w, runID, after, drafts)
		if err != nil && ctx.Err() != nil {
			// The context's end may have interrupted a statement, and
			// database/sql then closes the connection (modernc's
			// IsValid) without knowing of the writer's statements,
			// which would keep the closed database open: finalize
			// them now; the next append prepares them again.
			s.wr.close()
			s.wr = nil
		}
		return err
	})
	if bad {
		// Leave no statement of this Store on the connection
		// database/sql is told to close.
		conn.Raw(func(any) error {
			s.wr.close()
			s.wr = nil
			return driver.ErrBadConn
		})
	}
	if rawErr != nil {
		return nil, rawErr
	}
	if deferred {
		s.deferred = runID
		s.stats.Deferred.Add(1)
	} else if s.sync == SyncFull {
		s.deferred = ""
		s.stats.Syncs.Add(1)
	}
	s.broker.Publish(runID)
	return events, nil
}

// appendTx stores drafts in one BEGIN IMMEDIATE transaction of w,
// rolled back on any error.
func (s *Store) appendTx(ctx context.Context, w *writer, runID string, after int64, drafts []journal.Draft) (_ []journal.Event, err error) {
	committed := false
	defer func() {
		if !committed {
			// Also after a failed BEGIN: the driver reports the
			// context's end even for a statement that ran. Without a
			// transaction (or after a failed COMMIT that ended it),
			// ROLLBACK fails and changes nothing.
			w.exec(context.Background(), w.rollback)
		}
	}()
	if err := w.exec(ctx, w.begin); err != nil {
		return nil, dbError(fmt.Sprintf("append run %s", runID), err)
	}
	last, prev, err := s.head(ctx, w, runID)
	if err != nil {
		return nil, err
	}
	if after != last {
		return nil, fmt.Errorf("journal/sqlite: append run %s after %d: newest event is %d: %w", runID, after, last, journal.ErrConflict)
	}
	events, err := backend.Seal(runID, after, prev, drafts)
	if err != nil {
		return nil, err
	}
	for i := range events {
		e := &events[i]
		if err := w.exec(ctx, w.insert, e.RunID, e.Seq, string(e.Type), e.Time.Format(journal.TimeFormat), []byte(e.Payload), e.PrevHash, e.Hash); err != nil {
			if sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT {
				// Unreachable while the index agrees with the events
				// table (checked in head); kept so a duplicate is never
				// reported as anything but a conflict.
				err = fmt.Errorf("%w: %w", journal.ErrConflict, err)
			}
			return nil, dbError(fmt.Sprintf("append run %s event %d", runID, e.Seq), err)
		}
	}
	tail := &events[len(events)-1]
	status, keep := tailStatus(events)
	err = w.exec(ctx, w.upsert,
		runID, events[0].Time.Format(journal.TimeFormat), tail.Time.Format(journal.TimeFormat),
		tail.Seq, string(tail.Type), tail.Hash, string(status), keep)
	if err != nil {
		return nil, dbError(fmt.Sprintf("append run %s: update index", runID), err)
	}
	// Not interrupted by ctx: the driver would report the context's end
	// for a COMMIT that took effect. It waits for no lock (BEGIN
	// IMMEDIATE took it).
	if err := w.exec(context.WithoutCancel(ctx), w.commit); err != nil {
		return nil, dbError(fmt.Sprintf("append run %s: commit", runID), err)
	}
	committed = true
	return events, nil
}

// head returns the sequence number and hash of run's newest event (0 and
// the genesis hash for a new run), checking that the events table and the
// runs index agree.
func (s *Store) head(ctx context.Context, w *writer, runID string) (int64, string, error) {
	is, ih, es, eh, err := w.queryHead(ctx, runID)
	if err != nil {
		return 0, "", dbError(fmt.Sprintf("append run %s: read index and newest event", runID), err)
	}
	idxSeq, ok1 := headInt(is)
	evSeq, ok2 := headInt(es)
	idxHash, evHash := headText(ih), headText(eh)
	if !ok1 || !ok2 {
		return 0, "", &journal.CorruptError{RunID: runID, Seq: max(idxSeq, evSeq) + 1, Reason: fmt.Sprintf(
			"the newest sequence number of the runs index (%v) or of the events table (%v) is not an integer", is, es)}
	}
	indexed := is != nil
	if !indexed {
		idxHash = journal.GenesisHash
	}
	if es == nil {
		evHash = journal.GenesisHash
	}
	if idxSeq != evSeq || idxHash != evHash {
		bad := min(idxSeq, evSeq) + 1
		if idxSeq == evSeq {
			bad = evSeq
		}
		return 0, "", &journal.CorruptError{RunID: runID, Seq: bad, Reason: fmt.Sprintf(
			"the runs index ends at event %d (indexed %t) but the events table ends at event %d, or their hashes differ", idxSeq, indexed, evSeq)}
	}
	return evSeq, evHash, nil
}

// headInt is a sequence number of the head row as database/sql's
// NullInt64 scans it: NULL is 0, text must hold an integer.
func headInt(v any) (int64, bool) {
	switch v := v.(type) {
	case nil:
		return 0, true
	case int64:
		return v, true
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	case []byte:
		n, err := strconv.ParseInt(string(v), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// headText is a hash of the head row as its text ("" for NULL).
func headText(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case []byte:
		return string(v)
	}
	return fmt.Sprint(v)
}

// Read implements [journal.Store.Read]: the rows of run with seq >= from,
// in order, exactly as stored; it verifies no hashes (use
// [journal.ReadVerified]). A time that is not in [journal.TimeFormat]
// cannot be represented in a [journal.Event] and is reported as a
// [*journal.CorruptError] for its event. A run that has no entry in the
// runs index and no events from from on returns an error wrapping
// [journal.ErrNotFound]; a known run with no events from from on returns
// an empty slice.
func (s *Store) Read(ctx context.Context, runID string, from int64) ([]journal.Event, error) {
	// One read transaction, so that the events and the runs index come
	// from the same snapshot: an append committing in between must not
	// make a known run look empty.
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, dbError(fmt.Sprintf("read run %s", runID), err)
	}
	defer tx.Rollback()
	rows, err := tx.StmtContext(ctx, s.q.readEvents).QueryContext(ctx, runID, from)
	if err != nil {
		return nil, dbError(fmt.Sprintf("read run %s", runID), err)
	}
	defer rows.Close()
	events := []journal.Event{}
	for rows.Next() {
		var (
			e       = journal.Event{RunID: runID}
			typ, tm string
			payload []byte
		)
		if err := rows.Scan(&e.Seq, &typ, &tm, &payload, &e.PrevHash, &e.Hash); err != nil {
			return nil, &journal.CorruptError{RunID: runID, Seq: lastSeq(events) + 1, Reason: "undecodable row: " + err.Error()}
		}
		e.Type, e.Payload = journal.Type(typ), payload
		if e.Time, err = journal.ParseTime(tm); err != nil {
			return nil, &journal.CorruptError{RunID: runID, Seq: e.Seq, Reason: err.Error()}
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, dbError(fmt.Sprintf("read run %s", runID), err)
	}
	if len(events) == 0 {
		var n int
		if err := tx.StmtContext(ctx, s.q.runExists).QueryRowContext(ctx, runID).Scan(&n); err != nil {
			return nil, dbError(fmt.Sprintf("read run %s", runID), err)
		}
		if n == 0 {
			return nil, fmt.Errorf("journal/sqlite: read run %s: %w", runID, journal.ErrNotFound)
		}
	}
	return events, nil
}

func lastSeq(events []journal.Event) int64 {
	if len(events) == 0 {
		return 0
	}
	return events[len(events)-1].Seq
}

// Runs implements [journal.Store.Runs] from the runs index: newest created
// first, ties broken by run ID descending (so ULID run IDs created in the
// same nanosecond still list newest first).
func (s *Store) Runs(ctx context.Context, p *journal.ListParams) ([]journal.RunSummary, error) {
	if p == nil {
		p = &journal.ListParams{}
	}
	var (
		q    strings.Builder
		args []any
	)
	q.WriteString(`SELECT run_id, created, updated, last_seq, last_type, status FROM runs`)
	if len(p.Status) > 0 {
		q.WriteString(` WHERE status IN (?` + strings.Repeat(`, ?`, len(p.Status)-1) + `)`)
		for _, st := range p.Status {
			args = append(args, string(st))
		}
	}
	q.WriteString(` ORDER BY created DESC, run_id DESC`)
	if p.Limit > 0 {
		q.WriteString(` LIMIT ?`)
		args = append(args, p.Limit)
	}
	rows, err := s.r.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return nil, dbError("list runs", err)
	}
	defer rows.Close()
	out := []journal.RunSummary{}
	for rows.Next() {
		var (
			r                             journal.RunSummary
			created, updated, typ, status string
		)
		if err := rows.Scan(&r.RunID, &created, &updated, &r.LastSeq, &typ, &status); err != nil {
			return nil, dbError("list runs", err)
		}
		if r.Created, err = journal.ParseTime(created); err != nil {
			return nil, &journal.CorruptError{RunID: r.RunID, Reason: "runs index: created: " + err.Error()}
		}
		if r.Updated, err = journal.ParseTime(updated); err != nil {
			return nil, &journal.CorruptError{RunID: r.RunID, Reason: "runs index: updated: " + err.Error()}
		}
		r.LastType, r.Status = journal.Type(typ), journal.Status(status)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, dbError("list runs", err)
	}
	return out, nil
}

// tailStatus is journal.TailStatus of events' types.
func tailStatus(events []journal.Event) (journal.Status, bool) {
	types := make([]journal.Type, len(events))
	for i := range events {
		types[i] = events[i].Type
	}
	return journal.TailStatus(types...)
}
