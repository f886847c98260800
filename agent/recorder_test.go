package agent_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
)

// What a sandbox finds while it starts, before the execution is bound
// (a crashed run's leftovers), is kept and journaled when the execution
// starts, before any step; Record alone still refuses it.
func TestRecorderKeepsEventsUntilExecution(t *testing.T) {
	e := newEnv(t)
	rec := &agent.Recorder{}
	q := &agent.SandboxQuarantine{Path: "sub/.git/config", MovedTo: ".keel/quarantine/x/sub/.git/config", Action: "moved", Reason: "left by a crashed run"}
	if err := rec.Record(context.Background(), journal.SandboxQuarantine, q); !errors.Is(err, agent.ErrNotExecuting) {
		t.Fatalf("Record before execution = %v, want %v", err, agent.ErrNotExecuting)
	}
	if err := rec.RecordOrKeep(context.Background(), journal.SandboxQuarantine, q); err != nil {
		t.Fatal(err)
	}
	m := &turnModel{turns: []model.Message{calls(tc("c1", "echo", `{"text":"hi"}`)), answer("done")}}
	id := e.create(&agent.RunCreated{})
	p := e.params(m)
	p.Recorder = rec
	out, err := e.rt.Execute(context.Background(), id, p)
	if err != nil || out.Status != journal.StatusCompleted {
		t.Fatalf("Execute = %+v, %v", out, err)
	}
	var types []journal.Type
	for _, ev := range e.events(id) {
		types = append(types, ev.Type)
	}
	want := []journal.Type{journal.RunCreated, journal.SandboxQuarantine, journal.ModelResponded}
	if diff := cmp.Diff(want, types[:3]); diff != "" {
		t.Errorf("first events (-want +got):\n%s", diff)
	}
	got, err := agent.Decode(&e.events(id)[1])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(q, got); diff != "" {
		t.Errorf("kept event (-want +got):\n%s", diff)
	}
}
