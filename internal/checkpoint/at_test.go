package checkpoint_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/journal"
)

// The files "at" an event before the run's first checkpoint (its task)
// are that checkpoint's when nothing that changes files came between
// (chat's /undo after the first answer); otherwise they are unknown.
func TestAtEventBeforeFirstCheckpoint(t *testing.T) {
	t.Parallel()
	cp, _ := json.Marshal(&agent.WorkspaceCheckpoint{Tree: "4b825dc642cb6eb9a060e54bf8d69288fbee4904", Commit: "c1", Store: "/s"})
	ev := func(seq int64, typ journal.Type) journal.Event {
		e := journal.Event{RunID: "r", Seq: seq, Type: typ, Payload: json.RawMessage(`{}`)}
		if typ == journal.WorkspaceCheckpoint {
			e.Payload = cp
		}
		return e
	}
	for _, tt := range []struct {
		name   string
		events []journal.Event
		want   int64 // the checkpoint's event; 0: none
	}{
		{"checkpoint right after the task", []journal.Event{ev(1, journal.RunCreated), ev(2, journal.WorkspaceCheckpoint), ev(3, journal.ModelResponded)}, 2},
		{"a model answer between", []journal.Event{ev(1, journal.RunCreated), ev(2, journal.ModelResponded), ev(3, journal.WorkspaceCheckpoint)}, 3},
		{"a tool ran between", []journal.Event{ev(1, journal.RunCreated), ev(2, journal.ToolStarted), ev(3, journal.ToolFinished), ev(4, journal.WorkspaceCheckpoint)}, 0},
		{"no checkpoint at all", []journal.Event{ev(1, journal.RunCreated), ev(2, journal.ModelResponded)}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, _, _, err := checkpoint.AtEvent(tt.events, 1)
			switch {
			case tt.want == 0 && !errors.Is(err, checkpoint.ErrNone):
				t.Errorf("AtEvent(1) = %+v, %v; want ErrNone", got, err)
			case tt.want != 0 && (err != nil || got == nil || got.Seq != tt.want):
				t.Errorf("AtEvent(1) = %+v, %v; want the checkpoint of event %d", got, err, tt.want)
			}
		})
	}
}
