package tui

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/server/api"
)

// A run followed on a team server prints the model's text as the
// server's deltas bring it, once: a reconnection that sends the call's
// text again from offset 0 (and its retry note) prints only what is
// new, a stale delta nothing, and the journaled answer only the part no
// delta brought, before the step line.
func TestRemoteLivePrintsEachPieceOnce(t *testing.T) {
	var errOut, out bytes.Buffer
	p := NewPrinter(&errOut, &out, false, false)
	live := &RemoteLive{p: p}
	d := func(offset int, text, retry string) api.Delta {
		return api.Delta{RunID: "r1", After: 1, ModelCall: 1, Offset: offset, Text: text, Retry: retry}
	}
	live.Delta(d(0, "", "rate limited (HTTP 429): retrying in 1s (attempt 2)"), 1)
	live.Delta(d(0, "Hel", ""), 1)
	live.Delta(d(3, "lo", ""), 1)
	live.Reconnected()
	live.Delta(d(0, "", "rate limited (HTTP 429): retrying in 1s (attempt 2)"), 1)
	live.Delta(d(0, "Hello wo", ""), 1)
	live.Delta(api.Delta{RunID: "r1", After: 0, ModelCall: 1, Text: "stale"}, 1)
	b, err := json.Marshal(&agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, Content: "Hello world"}, Usage: model.Usage{InputTokens: 10, OutputTokens: 2}, DurationMS: 5})
	if err != nil {
		t.Fatal(err)
	}
	e := journal.Event{RunID: "r1", Seq: 2, Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Type: journal.ModelResponded, Payload: b}
	live.Event(&e)
	p.Event(e)
	// A delta of the finished call changes nothing.
	live.Delta(d(11, "!", ""), 2)
	want := "  model rate limited (HTTP 429): retrying in 1s (attempt 2)\n    Hello world\nstep 1 · 12 tok · 5ms · total 12 tok $0.0000\n"
	if diff := cmp.Diff(want, errOut.String()); diff != "" {
		t.Errorf("printed (-want +got):\n%s", diff)
	}
}
