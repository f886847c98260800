package agent_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
)

// A run.created written before settings were journaled folds to Keel's
// defaults; a run.resumed with settings replaces them, one without keeps
// them.
func TestSettingsFold(t *testing.T) {
	old := []byte(`{"task":"t","system":"","model":"replay:x","tools":[],"limits":{"max_steps":10},"workspace":"/w","mount_path":"/workspace","sandbox_limits":{}}`)
	evs := []journal.Event{{RunID: "r", Seq: 1, Type: journal.RunCreated, Payload: old}}
	st, err := agent.Fold("r", evs)
	if err != nil {
		t.Fatal(err)
	}
	if st.Settings != agent.DefaultSettings() {
		t.Fatalf("old journal: settings %+v, want the defaults", st.Settings)
	}
	changed := agent.DefaultSettings()
	changed.CommandTimeout = agent.Duration(10 * time.Minute)
	b, _ := json.Marshal(&agent.RunResumed{Settings: &changed})
	evs = append(evs, journal.Event{RunID: "r", Seq: 2, Type: journal.RunResumed, Payload: b},
		journal.Event{RunID: "r", Seq: 3, Type: journal.RunResumed, Payload: []byte(`{}`)})
	if st, err = agent.Fold("r", evs); err != nil {
		t.Fatal(err)
	}
	if st.Settings != changed {
		t.Errorf("after run.resumed: %+v", st.Settings)
	}
	if got := changed.Changes(agent.DefaultSettings()); len(got) != 1 || got[0] != "command_timeout 1m0s → 10m0s" {
		t.Errorf("Changes = %q", got)
	}
}

// Execute journals ExecParams.Settings in run.resumed only when they
// differ from the run's, and applies the run's concurrency and output
// token limit when the caller leaves them zero.
func TestExecuteJournalsSettingsChange(t *testing.T) {
	e := newEnv(t)
	set := agent.DefaultSettings()
	set.MaxOutputTokens = 321
	id := e.create(&agent.RunCreated{Settings: &set, Limits: agent.Limits{MaxSteps: 1}})
	m := &script{turns: []model.Message{calls(tc("c1", "echo", `{"text":"a"}`)), calls(tc("c2", "echo", `{"text":"b"}`)), answer("done")}}
	if _, err := e.rt.Execute(context.Background(), id, e.params(m)); err != nil {
		t.Fatal(err)
	}
	if m.reqs[0].MaxOutputTokens != 321 {
		t.Errorf("first request: max output tokens %d, want the run's 321", m.reqs[0].MaxOutputTokens)
	}
	// Same settings: nothing journaled. Changed: journaled and used.
	p := e.params(m)
	same := set
	p.Settings, p.Limits = &same, &agent.Limits{MaxSteps: 2}
	if _, err := e.rt.Execute(context.Background(), id, p); err != nil {
		t.Fatal(err)
	}
	next := set
	next.MaxOutputTokens = 654
	p = e.params(m)
	p.Settings, p.Limits = &next, &agent.Limits{MaxSteps: 5}
	out, err := e.rt.Execute(context.Background(), id, p)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusCompleted || out.State.Settings != next {
		t.Fatalf("outcome %s, settings %+v", out.Status, out.State.Settings)
	}
	var journaled []*agent.Settings
	for _, ev := range e.events(id) {
		if ev.Type == journal.RunResumed {
			v, _ := agent.Decode(&ev)
			journaled = append(journaled, v.(*agent.RunResumed).Settings)
		}
	}
	if len(journaled) != 2 || journaled[0] != nil || journaled[1] == nil || *journaled[1] != next {
		t.Errorf("run.resumed settings = %v", journaled)
	}
	if last := m.reqs[len(m.reqs)-1]; last.MaxOutputTokens != 654 {
		t.Errorf("after the change: max output tokens %d, want 654", last.MaxOutputTokens)
	}
}
