package audit_test

import (
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/audit"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
)

// The attacks the hash chain alone cannot show, because the attacker
// recomputes the hashes: rewriting who revoked an agent, and un-revoking
// an agent by deleting its revocation. The chain verifies afterwards; an
// anchor taken before the attack shows both.
func TestAnchorsShowRewrites(t *testing.T) {
	for _, tt := range []struct {
		name   string
		attack func(t *testing.T, raw *sql.DB, events []journal.Event)
		want   string
	}{
		{"rewrite who revoked", func(t *testing.T, raw *sql.DB, events []journal.Event) {
			e := events[1]
			e.Payload = json.RawMessage(strings.Replace(string(e.Payload), `"by":"sec"`, `"by":"alice"`, 1))
			rehash(t, raw, events[:1], e)
		}, "rewritten at or before it"},
		{"delete the revocation", func(t *testing.T, raw *sql.DB, events []journal.Event) {
			if _, err := raw.Exec(`DELETE FROM events WHERE run_id = ? AND seq = 2`, identity.StreamID); err != nil {
				t.Fatal(err)
			}
			if _, err := raw.Exec(`UPDATE runs SET last_seq = 1, last_type = ?, last_hash = ? WHERE run_id = ?`, string(events[0].Type), events[0].Hash, identity.StreamID); err != nil {
				t.Fatal(err)
			}
		}, "events were removed"},
		{"delete the stream", func(t *testing.T, raw *sql.DB, _ []journal.Event) {
			if _, err := raw.Exec(`DELETE FROM events WHERE run_id = ?; DELETE FROM runs WHERE run_id = ?`, identity.StreamID, identity.StreamID); err != nil {
				t.Fatal(err)
			}
		}, "no longer exists"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "j.db")
			s := open(t, db)
			d := identity.NewDirectory(s, nil)
			if _, err := d.Create(t.Context(), &identity.CreateParams{Name: "bot", By: "ann"}); err != nil {
				t.Fatal(err)
			}
			if _, err := d.Revoke(t.Context(), "bot", &identity.RevokeParams{By: "sec", Reason: "leaked"}); err != nil {
				t.Fatal(err)
			}
			anchors, err := audit.Anchors(t.Context(), s)
			if err != nil || len(anchors) != 1 || anchors[0].RunID != identity.StreamID || anchors[0].Seq != 2 {
				t.Fatalf("Anchors = %+v, %v", anchors, err)
			}
			events, err := s.Read(t.Context(), identity.StreamID, 1)
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			raw, err := sql.Open("sqlite", db)
			if err != nil {
				t.Fatal(err)
			}
			tt.attack(t, raw, events)
			raw.Close()
			s = open(t, db)
			if tt.name != "delete the stream" {
				// The limit of the chain alone: the rewrite verifies.
				if r, err := audit.Verify(t.Context(), s, identity.StreamID); err != nil || !r.OK {
					t.Fatalf("Verify after the attack = %+v %v; the attack should keep the chain consistent", r, err)
				}
			}
			reports, err := audit.CheckAnchors(t.Context(), s, anchors)
			if err != nil {
				t.Fatal(err)
			}
			if len(reports) != 1 || reports[0].OK || !strings.Contains(reports[0].Reason, tt.want) {
				t.Errorf("CheckAnchors = %+v, want a failure containing %q", reports, tt.want)
			}
		})
	}
}

// Anchors of an untouched journal check out, also after more events were
// appended; a journal that does not verify cannot be anchored.
func TestAnchorsOfAnUntouchedJournal(t *testing.T) {
	db, _ := record(t)
	s := open(t, db)
	anchors, err := audit.Anchors(t.Context(), s)
	if err != nil || len(anchors) == 0 {
		t.Fatalf("Anchors = %v, %v", anchors, err)
	}
	if _, err := identity.NewDirectory(s, nil).Create(t.Context(), &identity.CreateParams{Name: "later"}); err != nil {
		t.Fatal(err)
	}
	reports, err := audit.CheckAnchors(t.Context(), s, anchors)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reports {
		if !r.OK {
			t.Errorf("%s: %s", r.RunID, r.Reason)
		}
	}
	s.Close()
	raw, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	run := anchors[0]
	for _, a := range anchors {
		if a.Seq > run.Seq {
			run = a
		}
	}
	res, err := raw.Exec(`UPDATE events SET hash = ? WHERE run_id = ? AND seq = 3`, strings.Repeat("0", 64), run.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("updated %d rows of %s", n, run.RunID)
	}
	raw.Close()
	if _, err := audit.Anchors(t.Context(), open(t, db)); err == nil || !strings.Contains(err.Error(), "do not verify") {
		t.Errorf("Anchors of a bad journal = %v", err)
	}
}

// rehash stores e in place of the event with its sequence number and
// recomputes the hashes from it on, as someone with write access to the
// file can; kept are the events before it.
func rehash(t *testing.T, raw *sql.DB, kept []journal.Event, e journal.Event) {
	t.Helper()
	prev := journal.GenesisHash
	if len(kept) > 0 {
		prev = kept[len(kept)-1].Hash
	}
	if err := journal.Seal(prev, &e); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`UPDATE events SET payload = ?, prev_hash = ?, hash = ? WHERE run_id = ? AND seq = ?`, []byte(e.Payload), e.PrevHash, e.Hash, e.RunID, e.Seq); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`UPDATE runs SET last_hash = ? WHERE run_id = ? AND last_seq = ?`, e.Hash, e.RunID, e.Seq); err != nil {
		t.Fatal(err)
	}
}
