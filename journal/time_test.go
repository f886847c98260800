package journal_test

import (
	"testing"
	"time"

	"github.com/keel-run/keel/journal"
)

// ParseTime accepts exactly the text journal.TimeFormat gives a UTC time,
// as re-formatting and comparing did.
func TestParseTimeCanonical(t *testing.T) {
	for _, tt := range []struct {
		in string
		ok bool
	}{
		{"2026-12-07T01:02:03.000000004Z", true},
		{"2026-12-07T21:02:03.123456789Z", true},
		{"2026-12-07T01:02:03.000000004+00:00", false},
		{"2026-12-07T02:02:03.000000004+01:00", false},
		{"2026-12-07T1:02:03.000000004Z", false},
		{"2026-12-07T01:02:03.00000004Z", false},
		{"2026-12-07T01:02:03.0000000040Z", false},
		{"2026-12-07T01:02:03Z", false},
		{"2026-02-30T01:02:03.000000004Z", false},
		{"2026-12-07T24:02:03.000000004Z", false},
		{"2026-12-07 01:02:03.000000004Z", false},
		{"", false},
	} {
		got, err := journal.ParseTime(tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("journal.ParseTime(%q) = %v, %v; want ok %v", tt.in, got, err, tt.ok)
			continue
		}
		if err == nil && got.Format(journal.TimeFormat) != tt.in {
			t.Errorf("journal.ParseTime(%q) = %s: not the same time", tt.in, got.Format(journal.TimeFormat))
		}
		if err == nil && got.Location() != time.UTC {
			t.Errorf("journal.ParseTime(%q): location %v", tt.in, got.Location())
		}
	}
}
