package journal_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
)

// exportFixture returns two runs' events, with payloads that a careless
// encoder would change (HTML characters, escapes, key order, unicode).
func exportFixture(t *testing.T) []journal.Event {
	t.Helper()
	s := mem.New()
	defer s.Close()
	ctx := t.Context()
	a, err := s.Append(ctx, "run-a", 0,
		journal.Draft{Type: journal.RunCreated, Time: t0.Add(time.Nanosecond), Payload: []byte(`{"task":"<b>&amp;</b>","z":1,"a":2}`)},
		journal.Draft{Type: journal.ToolFinished, Time: t0.Add(time.Second), Payload: []byte(`{"out":"line1\nline2\u0000","u":"世界🎉","n":1.50}`)},
	)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Append(ctx, "run-b", 0, journal.Draft{Type: journal.RunCreated, Time: t0, Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	return append(a, b...)
}

func TestJSONLRoundTrip(t *testing.T) {
	events := exportFixture(t)
	var buf bytes.Buffer
	if err := journal.WriteJSONL(&buf, events); err != nil {
		t.Fatalf("WriteJSONL = %v", err)
	}
	if n := strings.Count(buf.String(), "\n"); n != len(events) {
		t.Errorf("WriteJSONL wrote %d lines, want %d:\n%s", n, len(events), buf.String())
	}
	if !strings.Contains(buf.String(), `"payload":{"task":"<b>&amp;</b>","z":1,"a":2}`) {
		t.Errorf("WriteJSONL changed a payload's bytes:\n%s", buf.String())
	}
	got, torn, err := journal.ReadJSONL(&buf)
	if err != nil || torn != nil {
		t.Fatalf("ReadJSONL = %v, %v", torn, err)
	}
	if diff := cmp.Diff(events, got); diff != "" {
		t.Errorf("ReadJSONL(WriteJSONL(events)) (-want +got):\n%s", diff)
	}
	if err := journal.Verify("run-a", got[:2]); err != nil {
		t.Errorf("Verify(imported run-a) = %v", err)
	}
}

func TestReadJSONLTornTail(t *testing.T) {
	events := exportFixture(t)
	var buf bytes.Buffer
	if err := journal.WriteJSONL(&buf, events); err != nil {
		t.Fatal(err)
	}
	whole := buf.String()
	lines := strings.SplitAfter(whole, "\n")
	half := lines[1][:len(lines[1])/2]
	for _, tt := range []struct {
		name     string
		in       string
		want     []journal.Event
		wantTorn *journal.TornTail // Reason is not compared
		// corrupt wants a CorruptError for run corruptRun at event
		// corruptSeq.
		corrupt    bool
		corruptRun string
		corruptSeq int64
	}{
		{name: "complete", in: whole, want: events},
		{name: "last newline missing", in: strings.TrimSuffix(whole, "\n"), want: events},
		{name: "blank lines", in: lines[0] + "\n  \n" + lines[1] + lines[2] + "\n", want: events},
		{name: "empty", in: "", want: nil},
		{
			name: "half a record", in: lines[0] + half, want: events[:1],
			wantTorn: &journal.TornTail{Line: 2, Offset: int64(len(lines[0])), Size: int64(len(half))},
		},
		{
			name: "zero bytes after the last record", in: whole + "\x00\x00\x00\x00", want: events,
			wantTorn: &journal.TornTail{Line: 4, Offset: int64(len(whole)), Size: 4},
		},
		{
			name: "record cut before its closing brace", in: lines[0] + lines[1] + strings.TrimSuffix(lines[2], "}\n"), want: events[:2],
			wantTorn: &journal.TornTail{Line: 3, Offset: int64(len(lines[0]) + len(lines[1])), Size: int64(len(lines[2]) - 2)},
		},
		{name: "half a record in the middle", in: lines[0] + half + "\n" + lines[2], corrupt: true, corruptRun: "run-a", corruptSeq: 2},
		{name: "bad last line with its newline", in: lines[0] + "{}\n", corrupt: true, corruptRun: "run-a", corruptSeq: 2},
		{name: "bad first line", in: "not json\n" + whole, corrupt: true},
		{name: "unknown field", in: strings.Replace(whole, `"seq":2,`, `"seq":2,"extra":1,`, 1), corrupt: true, corruptRun: "run-a", corruptSeq: 2},
		{name: "missing hash", in: strings.Replace(lines[0], `,"hash":`, `,"hush":`, 1) + lines[1], corrupt: true},
		{name: "bad time", in: lines[0] + strings.Replace(lines[1], `"time":"2026`, `"time":"x026`, 1) + lines[2], corrupt: true, corruptRun: "run-a", corruptSeq: 2},
		{name: "two records on one line", in: strings.TrimSuffix(lines[0], "\n") + lines[1], corrupt: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, torn, err := journal.ReadJSONL(strings.NewReader(tt.in))
			if tt.corrupt {
				var ce *journal.CorruptError
				if !errors.As(err, &ce) || ce.Seq != tt.corruptSeq || ce.RunID != tt.corruptRun {
					t.Fatalf("ReadJSONL = %d events, %v, %v; want a CorruptError for run %q at event %d", len(got), torn, err, tt.corruptRun, tt.corruptSeq)
				}
				if got != nil {
					t.Errorf("ReadJSONL returned %d events with a CorruptError, want none", len(got))
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadJSONL = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantTorn, torn, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Reason" }, cmp.Ignore())); diff != "" {
				t.Errorf("torn tail (-want +got):\n%s", diff)
			}
			if torn != nil && torn.Reason == "" {
				t.Error("torn tail has no reason")
			}
		})
	}
}

func TestWriteJSONLRefusesBadPayloads(t *testing.T) {
	for _, tt := range []struct{ name, payload string }{
		{"not JSON", `{"a":`},
		{"not compact", "{\n\"a\": 1}"},
		{"empty", ``},
	} {
		e := journal.Event{RunID: "r", Seq: 1, Type: journal.RunCreated, Time: t0, Payload: []byte(tt.payload)}
		var buf bytes.Buffer
		if err := journal.WriteJSONL(&buf, []journal.Event{e}); err == nil {
			t.Errorf("WriteJSONL(payload %s) = nil, want an error", tt.name)
		}
		if buf.Len() != 0 {
			t.Errorf("WriteJSONL(payload %s) wrote %q before failing", tt.name, buf.String())
		}
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteJSONLWriteError(t *testing.T) {
	if err := journal.WriteJSONL(failingWriter{}, exportFixture(t)); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("WriteJSONL(failing writer) = %v, want the write error", err)
	}
}
