package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/internal/backend"
)

// notifyChannel is the LISTEN/NOTIFY channel of appends; a notification's
// payload is "STOREID RUNID".
const notifyChannel = "keel_events"

// Append implements [journal.Store.Append] in one transaction (see the
// package documentation). Invalid drafts (an empty type, a zero time, a
// payload that is not a JSON object) fail the whole call and store
// nothing. A run whose events table disagrees with its index entry (rows
// deleted or rewritten behind Keel's back) returns a [*journal.CorruptError]
// and is not appended to. Subscribers from [Store.Notify] are woken after
// the commit, before Append returns.
func (s *Store) Append(ctx context.Context, runID string, after int64, drafts ...journal.Draft) ([]journal.Event, error) {
	if err := backend.CheckRunID(runID); err != nil {
		return nil, err
	}
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	op := func(what string, err error) error {
		return fmt.Errorf("journal/postgres: append run %s%s: %w", runID, what, err)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, op("", err)
	}
	// Two round trips: BEGIN and the locked head read in one pipeline,
	// then the writes and COMMIT in another. Whatever fails in between
	// leaves a transaction to roll back before the connection is reused.
	defer func() {
		if conn.Conn().PgConn().TxStatus() != 'I' {
			if _, err := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
				conn.Conn().Close(context.WithoutCancel(ctx))
			}
		}
		conn.Release()
	}()
	last, prev, err := head(ctx, conn, runID)
	if err != nil {
		return nil, err
	}
	if after != last {
		return nil, fmt.Errorf("journal/postgres: append run %s after %d: newest event is %d: %w", runID, after, last, journal.ErrConflict)
	}
	events, err := backend.Seal(runID, after, prev, drafts)
	if err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	for i := range events {
		e := &events[i]
		b.Queue(`INSERT INTO keel_events (run_id, seq, type, time, payload, prev_hash, hash) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			e.RunID, e.Seq, string(e.Type), e.Time.Format(journal.TimeFormat), []byte(e.Payload), e.PrevHash, e.Hash)
	}
	tail := &events[len(events)-1]
	types := make([]journal.Type, len(events))
	for i := range events {
		types[i] = events[i].Type
	}
	status, keep := journal.TailStatus(types...)
	b.Queue(`
INSERT INTO keel_runs (run_id, created, updated, last_seq, last_type, last_hash, status)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (run_id) DO UPDATE SET
	updated = excluded.updated, last_seq = excluded.last_seq, last_type = excluded.last_type,
	last_hash = excluded.last_hash, status = CASE WHEN $8 THEN keel_runs.status ELSE excluded.status END`,
		runID, events[0].Time.Format(journal.TimeFormat), tail.Time.Format(journal.TimeFormat),
		tail.Seq, string(tail.Type), tail.Hash, string(status), keep)
	b.Queue(`SELECT pg_notify($1, $2)`, notifyChannel, s.id+" "+runID)
	b.Queue(`COMMIT`)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		if pgCode(err) == uniqueViolation {
			// Another writer created the run first (or the index lost
			// its row while the events stayed: also not ours to write).
			return nil, fmt.Errorf("journal/postgres: append run %s after %d: %w: %w", runID, after, journal.ErrConflict, err)
		}
		return nil, op("", err)
	}
	s.broker.Publish(runID)
	return events, nil
}

// advisoryClass is the first key of the per-run transaction locks taken
// by appends ("keel" in ASCII).
const advisoryClass int32 = 0x6b65656c

// head begins a transaction on conn, locks run's index row and returns the sequence number and hash of
// its newest event (0 and the genesis hash for a new run), checking that
// the events table and the index agree.
func head(ctx context.Context, conn *pgxpool.Conn, runID string) (int64, string, error) {
	var (
		idxSeq, evSeq   int64
		idxHash, evHash = journal.GenesisHash, journal.GenesisHash
		indexed         = true
	)
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	// The row lock below serializes writers of a run that is indexed; a
	// new run has no row to lock, so writers also take a transaction
	// advisory lock on the run id (two-key form: it cannot collide with
	// the single-key lease locks). Without it a second writer could read
	// "no index row" and then see the first writer's committed event, and
	// report a conflict as corruption.
	b.Queue(`SELECT pg_advisory_xact_lock($1, hashtext($2))`, advisoryClass, runID)
	b.Queue(`SELECT last_seq, last_hash FROM keel_runs WHERE run_id = $1 FOR UPDATE`, runID).QueryRow(func(r pgx.Row) error {
		err := r.Scan(&idxSeq, &idxHash)
		if errors.Is(err, pgx.ErrNoRows) {
			indexed, idxHash = false, journal.GenesisHash
			return nil
		}
		return err
	})
	// Queued after the lock: it reads once the lock is ours, and sees
	// what the previous holder committed.
	b.Queue(`SELECT seq, hash FROM keel_events WHERE run_id = $1 ORDER BY seq DESC LIMIT 1`, runID).QueryRow(func(r pgx.Row) error {
		err := r.Scan(&evSeq, &evHash)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return 0, "", fmt.Errorf("journal/postgres: append run %s: read newest event: %w", runID, err)
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

// readQuery returns run's events from $2 on and, first, one row with a
// NULL seq when the run is in the index: one statement, one snapshot, so a
// run committing meanwhile is seen either not at all or whole.
const readQuery = `
SELECT NULL::bigint AS seq, NULL::text, NULL::text, NULL::bytea, NULL::text, NULL::text
	FROM keel_runs WHERE run_id = $1
UNION ALL
SELECT seq, type, time, payload, prev_hash, hash
	FROM keel_events WHERE run_id = $1 AND seq >= $2
ORDER BY seq NULLS FIRST`

// Read implements [journal.Store.Read]: the rows of run with seq >= from,
// in order, exactly as stored; it verifies no hashes (use
// [journal.ReadVerified]). A time that is not in [journal.TimeFormat]
// is reported as a [*journal.CorruptError] for its event. A run that has
// no entry in the index and no events from from on returns an error
// wrapping [journal.ErrNotFound]; a known run with no events from from on
// returns an empty slice.
func (s *Store) Read(ctx context.Context, runID string, from int64) ([]journal.Event, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, readQuery, runID, from)
	if err != nil {
		return nil, fmt.Errorf("journal/postgres: read run %s: %w", runID, err)
	}
	defer rows.Close()
	var (
		events  = []journal.Event{}
		indexed bool
	)
	for rows.Next() {
		var (
			seq                     *int64
			typ, tm, prevHash, hash *string
			payload                 []byte
		)
		if err := rows.Scan(&seq, &typ, &tm, &payload, &prevHash, &hash); err != nil {
			return nil, &journal.CorruptError{RunID: runID, Seq: lastSeq(events) + 1, Reason: "undecodable row: " + err.Error()}
		}
		if seq == nil {
			indexed = true
			continue
		}
		e := journal.Event{RunID: runID, Seq: *seq, Type: journal.Type(*typ), Payload: payload, PrevHash: *prevHash, Hash: *hash}
		if e.Time, err = journal.ParseTime(*tm); err != nil {
			return nil, &journal.CorruptError{RunID: runID, Seq: e.Seq, Reason: err.Error()}
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("journal/postgres: read run %s: %w", runID, err)
	}
	if len(events) == 0 && !indexed {
		return nil, fmt.Errorf("journal/postgres: read run %s: %w", runID, journal.ErrNotFound)
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
// first, ties broken by run ID descending.
func (s *Store) Runs(ctx context.Context, p *journal.ListParams) ([]journal.RunSummary, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if p == nil {
		p = &journal.ListParams{}
	}
	var (
		q    strings.Builder
		args []any
	)
	q.WriteString(`SELECT run_id, created, updated, last_seq, last_type, status FROM keel_runs`)
	if len(p.Status) > 0 {
		st := make([]string, len(p.Status))
		for i, x := range p.Status {
			st[i] = string(x)
		}
		args = append(args, st)
		q.WriteString(` WHERE status = ANY($1)`)
	}
	q.WriteString(` ORDER BY created DESC, run_id DESC`)
	if p.Limit > 0 {
		args = append(args, p.Limit)
		fmt.Fprintf(&q, ` LIMIT $%d`, len(args))
	}
	rows, err := s.pool.Query(ctx, q.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("journal/postgres: list runs: %w", err)
	}
	defer rows.Close()
	out := []journal.RunSummary{}
	for rows.Next() {
		var (
			r                             journal.RunSummary
			created, updated, typ, status string
		)
		if err := rows.Scan(&r.RunID, &created, &updated, &r.LastSeq, &typ, &status); err != nil {
			return nil, fmt.Errorf("journal/postgres: list runs: %w", err)
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
		return nil, fmt.Errorf("journal/postgres: list runs: %w", err)
	}
	return out, nil
}

// Head implements [journal.Head] from the runs index, which each append
// updates in the same transaction as its events.
func (s *Store) Head(ctx context.Context, runID string) (int64, string, error) {
	if err := s.checkOpen(); err != nil {
		return 0, "", err
	}
	var seq int64
	var hash string
	err := s.pool.QueryRow(ctx, `SELECT last_seq, last_hash FROM keel_runs WHERE run_id = $1`, runID).Scan(&seq, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, "", fmt.Errorf("journal/postgres: run %s: %w", runID, journal.ErrNotFound)
	}
	if err != nil {
		return 0, "", fmt.Errorf("journal/postgres: read run head: %w", err)
	}
	return seq, hash, nil
}
