package journal_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/keel-run/keel/journal"
)

// referenceCanonical is the canonical form as first written, every
// string through json.Marshal: Canonical must give the same bytes, or
// stored hashes would no longer verify.
func referenceCanonical(e *journal.Event) []byte {
	var b bytes.Buffer
	q := func(s string) { j, _ := json.Marshal(s); b.Write(j) }
	b.WriteString(`{"run_id":`)
	q(e.RunID)
	b.WriteString(`,"seq":`)
	b.WriteString(strconv.FormatInt(e.Seq, 10))
	b.WriteString(`,"type":`)
	q(string(e.Type))
	b.WriteString(`,"time":`)
	q(e.Time.UTC().Format(journal.TimeFormat))
	b.WriteString(`,"payload":`)
	if len(e.Payload) == 0 {
		b.WriteString("null")
	} else {
		b.Write(e.Payload)
	}
	b.WriteByte('}')
	return b.Bytes()
}

func TestCanonicalAsEncodingJSON(t *testing.T) {
	zone := time.FixedZone("X", -5*3600)
	for _, id := range []string{"r1", "_keel.identity", "run-<b>&\"x\"\\", "ünïcode", "tab\there", "del\x7f", "bad\xffutf8", "line\u2028sep", ""} {
		for _, typ := range []journal.Type{journal.RunCreated, "odd<type>&"} {
			for _, payload := range []string{"", `{"a":1}`, `{"s":"<&>"}`} {
				for _, tm := range []time.Time{time.Unix(0, 0), time.Date(2026, 12, 7, 4, 5, 6, 7, zone), time.Date(1999, 1, 2, 23, 59, 59, 999999999, time.UTC)} {
					e := &journal.Event{RunID: id, Seq: 42, Type: typ, Time: tm, Payload: json.RawMessage(payload)}
					want := referenceCanonical(e)
					if got := journal.Canonical(e); !bytes.Equal(got, want) {
						t.Fatalf("Canonical(%q, %q, %q)\n got %s\nwant %s", id, typ, payload, got, want)
					}
					prev := journal.GenesisHash
					p, _ := hex.DecodeString(prev)
					sum := sha256.Sum256(append(p, want...))
					if got, err := journal.ChainHash(prev, e); err != nil || got != hex.EncodeToString(sum[:]) {
						t.Fatalf("ChainHash(%q) = %s, %v; want %x", id, got, err, sum)
					}
				}
			}
		}
	}
	for _, bad := range []string{"", "00", journal.GenesisHash[:63] + "g", journal.GenesisHash + "00"} {
		if _, err := journal.ChainHash(bad, &journal.Event{RunID: "r"}); err == nil {
			t.Errorf("ChainHash(prev %q): no error", bad)
		}
	}
}
