package agent_test

import (
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// A tool's "error:" is not repeated after the detail's own.
func TestToolFinishedDetailError(t *testing.T) {
	x := &agent.ToolFinished{}
	x.CallID, x.IsError, x.Content = "c", true, "error: BlockingIOError: [Errno 11] would block\nTraceback ..."
	if got := x.Detail(); got != "error: BlockingIOError: [Errno 11] would block · 2 lines · 0s" {
		t.Errorf("Detail = %q", got)
	}
}

// Every event type Keel writes decodes to a payload that says itself.
func TestEveryEventTypeDecodes(t *testing.T) {
	for _, typ := range []journal.Type{journal.RunCreated, journal.RunResumed, journal.SetupFinished, journal.ModelResponded, journal.ModelFailed,
		journal.GateDecided, journal.ApprovalRequested, journal.ApprovalResolved, journal.AuthRequired, journal.AuthResolved, journal.ToolStarted,
		journal.ToolFinished, journal.RunCompleted, journal.RunFailed, journal.RunCanceled, journal.RunPaused, journal.UserMessage,
		journal.ContextCompacted, journal.SandboxEgress, journal.SandboxQuarantine} {
		v, err := agent.Decode(&journal.Event{RunID: "r", Seq: 1, Type: typ, Payload: []byte(`{}`)})
		if _, ok := v.(agent.Payload); err != nil || !ok {
			t.Errorf("Decode(%s) = %T, %v", typ, v, err)
		}
	}
	if v, err := agent.Decode(&journal.Event{Type: "future.event", Payload: []byte(`{}`)}); v != nil || err != nil {
		t.Errorf("an unknown type: %v, %v", v, err)
	}
	if _, err := agent.Decode(&journal.Event{Type: journal.ToolStarted, Payload: []byte(`[`)}); err == nil {
		t.Error("a payload that does not decode")
	}
}
