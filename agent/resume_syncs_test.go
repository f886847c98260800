package agent_test

import (
	"path/filepath"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/tool"
)

// A resume's run.resumed (without a person's message) waits for no
// fsync of its own: nothing it records has an effect outside the
// journal until the next durable append, which makes it durable too,
// and the execution syncs before it returns.
func TestResumeRecordIsDeferred(t *testing.T) {
	sq, err := sqlite.Open(filepath.Join(t.TempDir(), "resume.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	rt := agent.NewRuntime(sq, nil)
	ws, err := tool.NewWorkspace(t.TempDir(), "/workspace", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	params := func(m model.Model) *agent.ExecParams {
		return &agent.ExecParams{Wiring: agent.Wiring{Model: m, Tools: tool.NewRegistry(), Env: &tool.Env{Workspace: ws}}}
	}
	id, err := rt.Create(t.Context(), &agent.RunCreated{Task: "do the thing", Limits: agent.Limits{MaxSteps: 1}})
	if err != nil {
		t.Fatal(err)
	}
	// The first execution stops at its step limit after one turn.
	m := &script{turns: []model.Message{calls(tc("c1", "missing", `{}`)), answer("done"), answer("again")}}
	if out, err := rt.Execute(t.Context(), id, params(m)); err != nil || out.Status == journal.StatusCompleted {
		t.Fatalf("first execution: %v %v", out, err)
	}
	before := sq.Stats()
	p := params(m)
	p.Limits = &agent.Limits{MaxSteps: 5}
	out, err := rt.Execute(t.Context(), id, p)
	if err != nil || out.Status != journal.StatusCompleted {
		t.Fatalf("resume: %v %v", out, err)
	}
	after := sq.Stats()
	evs, err := journal.ReadVerified(t.Context(), sq, id)
	if err != nil {
		t.Fatal(err)
	}
	var types []journal.Type
	for _, e := range evs[len(evs)-3:] {
		types = append(types, e.Type)
	}
	want := []journal.Type{journal.RunResumed, journal.ModelResponded, journal.RunCompleted}
	if len(types) != 3 || types[0] != want[0] || types[1] != want[1] || types[2] != want[2] {
		t.Fatalf("the resume journaled %v, want %v", types, want)
	}
	// run.resumed and the response deferred, the end synced.
	if syncs, deferred := after.Syncs-before.Syncs, after.Deferred-before.Deferred; syncs != 1 || deferred != 2 {
		t.Errorf("the resume's three appends: %d synced, %d deferred; want 1 and 2", syncs, deferred)
	}
	// With a person's message, in the same append: durable at once.
	before = sq.Stats()
	p = params(m)
	p.Message = "one more thing"
	if out, err := rt.Execute(t.Context(), id, p); err != nil || out.Status != journal.StatusCompleted {
		t.Fatalf("follow-up: %v %+v %v", out.Status, out.End, err)
	}
	after = sq.Stats()
	if syncs, deferred := after.Syncs-before.Syncs, after.Deferred-before.Deferred; syncs != 2 || deferred != 1 {
		t.Errorf("the follow-up's appends (resumed with its message, response, end): %d synced, %d deferred; want 2 and 1", syncs, deferred)
	}
}
