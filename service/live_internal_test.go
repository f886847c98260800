package service

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/tool"
)

// A running call's output is kept as its last bytes: a stream that
// subscribes late gets the tail, from a rune, its offset past the start;
// an incomplete rune at the end waits for the write that completes it;
// the next piece continues where the last one ended.
func TestLiveOutputTailAndRunes(t *testing.T) {
	l := newLiveHub()
	ctx := l.trace(context.Background(), agent.Operation{RunID: "r", CallID: "c", Seq: 5})
	write := tool.LiveOf(ctx)
	big := strings.Repeat("é", 3*maxLiveOutput/2) // 2 bytes a rune: 3*maxLiveOutput bytes
	write([]byte(big))
	write([]byte("x\xc3")) // half of a last é
	s := l.subscribe("r")
	defer s.Close()
	if ds := s.Next(4); len(ds) != 0 {
		t.Fatalf("deltas before the stream sent the call's tool.started: %+v", ds)
	}
	ds := s.Next(5)
	if len(ds) != 1 {
		t.Fatalf("next = %+v, want one delta", ds)
	}
	d := ds[0]
	total := len(big) + 2
	if d.CallID != "c" || d.Offset <= 0 || d.End != total-1 || !utf8.ValidString(d.Output) || !strings.HasSuffix(d.Output, "éx") || len(d.Output) > 2*maxLiveOutput {
		t.Errorf("delta offset %d end %d (%d bytes written), %d bytes, valid %v: want the kept tail from a rune, without the half rune",
			d.Offset, d.End, total, len(d.Output), utf8.ValidString(d.Output))
	}
	write([]byte("\xa9!"))
	ds = s.Next(5)
	if len(ds) != 1 || ds[0].Offset != total-1 || ds[0].Output != "é!" {
		t.Errorf("next after the rune's end = %+v, want é! at %d", ds, total-1)
	}
	// The call's result is journaled: nothing more, and a new stream
	// gets nothing of it.
	l.end("r")
	late := l.subscribe("r")
	defer late.Close()
	if ds := late.Next(100); len(ds) != 0 {
		t.Errorf("a stream subscribed after the call ended got %+v", ds)
	}
}
