package journal_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/journal"
)

// sealed returns a run's journal of n events, each sealed after the one
// before.
func sealed(t *testing.T, run string, n int) []journal.Event {
	t.Helper()
	prev := journal.GenesisHash
	var out []journal.Event
	for i := range n {
		e := journal.Event{RunID: run, Seq: int64(i + 1), Type: journal.ToolFinished, Time: time.Unix(int64(i), 0),
			Payload: json.RawMessage(`{"content":"the build uses make"}`)}
		if err := journal.Seal(prev, &e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
		prev = e.Hash
	}
	return out
}

// A reader of a server's events checks every event shown with its
// hashes whole; from the first event whose hashes the server withheld
// (they commit to text hidden from the reader), events only by their
// sequence numbers. A payload changed without withholding, hashes after
// a withheld one, a redacted event with hashes, or a dropped event is
// corrupt.
func TestVerifyShown(t *testing.T) {
	const run = "r1"
	shown := func(mod func([]journal.Event)) []journal.Event {
		evs := sealed(t, run, 4)
		mod(evs)
		return evs
	}
	hide := func(e *journal.Event) {
		e.Payload, e.Redacted = json.RawMessage(`{"content":"[memory entry: not yours to see]"}`), true
	}
	withhold := func(evs []journal.Event) {
		for i := range evs {
			evs[i].PrevHash, evs[i].Hash = "", ""
		}
	}
	for _, tt := range []struct {
		name               string
		events             []journal.Event
		redacted, withheld int
		bad                int64 // the corrupt event; 0: none
	}{
		{"as stored", shown(func([]journal.Event) {}), 0, 0, 0},
		{"two redacted", shown(func(evs []journal.Event) { hide(&evs[1]); hide(&evs[3]); withhold(evs[1:]) }), 2, 3, 0},
		{"changed without the mark", shown(func(evs []journal.Event) { hide(&evs[1]); evs[1].Redacted = false }), 0, 0, 2},
		{"redacted with its hashes", shown(func(evs []journal.Event) { hide(&evs[1]); withhold(evs[2:]) }), 1, 0, 2},
		{"hashes after a withheld one", shown(func(evs []journal.Event) { hide(&evs[1]); withhold(evs[1:3]) }), 1, 2, 4},
		{"redacted one dropped", shown(func(evs []journal.Event) { hide(&evs[1]); withhold(evs[1:]); copy(evs[1:], evs[2:]) }), 0, 2, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			evs := tt.events
			if tt.name == "redacted one dropped" {
				evs = evs[:3]
			}
			c, err := journal.VerifyShown(run, journal.GenesisHash, 1, evs)
			var ce *journal.CorruptError
			switch {
			case tt.bad == 0 && err != nil:
				t.Fatalf("VerifyShown = %v, want nil", err)
			case tt.bad != 0 && (!errors.As(err, &ce) || ce.Seq != tt.bad):
				t.Fatalf("VerifyShown = %v, want corrupt at event %d", err, tt.bad)
			case tt.bad == 0 && (c.Redacted != tt.redacted || c.Withheld != tt.withheld || c.Checked != len(evs)-tt.withheld):
				t.Errorf("VerifyShown counted %+v, want %d redacted, %d withheld", c, tt.redacted, tt.withheld)
			}
		})
	}
	// Verify, for stored journals, checks every hash: the mark is no
	// way past it.
	evs := shown(func(evs []journal.Event) { hide(&evs[1]) })
	if err := journal.Verify(run, evs); err == nil || !strings.Contains(err.Error(), "hash does not match") {
		t.Errorf("Verify of a redacted event = %v, want a hash mismatch", err)
	}
}
