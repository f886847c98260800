package cluster_test

import (
	"encoding/json"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/cluster"
	"github.com/keel-run/keel/journal"
)

// A run stopped by its step limit continues through the workflow with the
// limit a person raised, and the settings they changed, journaled in
// run.resumed beside the message (agent.Runtime.JournalResume, what keel
// serve --temporal does): the worker's execution folds them from the
// journal, and it wires the tools with the new settings.
func TestWorkflowResumesWithNewLimits(t *testing.T) {
	f := newFixture(t, cluster.Driver{})
	id, _ := f.create(t, trajectory(t, "echo one", "echo two", "echo three", ""), "")
	ctx := t.Context()
	// Created with a step limit of 1.
	if _, err := f.rt.JournalResume(ctx, id, &agent.Resumption{Limits: &agent.Limits{MaxSteps: 1}}); err != nil {
		t.Fatal(err)
	}
	var s testsuite.WorkflowTestSuite
	env := f.env(&s)
	env.ExecuteWorkflow(cluster.WorkflowName, cluster.RunInput{RunID: id})
	if !env.IsWorkflowCompleted() || env.GetWorkflowError() != nil {
		t.Fatalf("workflow: completed %t, %v", env.IsWorkflowCompleted(), env.GetWorkflowError())
	}
	st, _ := f.events(t, id)
	if st.Status != journal.StatusFailed || st.Ended == nil || st.Ended.Reason != "max_steps" {
		t.Fatalf("run %s %+v, want failed at max_steps", st.Status, st.Ended)
	}
	set := st.Settings
	set.CommandTimeout = agent.Duration(7 * time.Minute)
	if _, err := f.rt.JournalResume(ctx, id, &agent.Resumption{Message: "go on", By: "ada", Token: "tok1", Limits: &agent.Limits{MaxSteps: 10}, Settings: &set}); err != nil {
		t.Fatal(err)
	}
	env = f.env(&s)
	env.ExecuteWorkflow(cluster.WorkflowName, cluster.RunInput{RunID: id})
	if !env.IsWorkflowCompleted() || env.GetWorkflowError() != nil {
		t.Fatalf("workflow: completed %t, %v", env.IsWorkflowCompleted(), env.GetWorkflowError())
	}
	st, evs := f.events(t, id)
	if st.Status != journal.StatusCompleted || st.Limits.MaxSteps != 10 || st.Settings.CommandTimeout != set.CommandTimeout {
		t.Fatalf("run %s, limits %+v, settings %+v: want completed with max_steps 10 and the new command timeout", st.Status, st.Limits, st.Settings)
	}
	if ws := f.settings.Load(); ws == nil || ws.CommandTimeout != set.CommandTimeout {
		t.Errorf("the worker wired the run with settings %+v, want the resumed ones", ws)
	}
	// The person's resume and message are one append, by ada.
	var found bool
	for i, e := range evs {
		if e.Type != journal.RunResumed || i+1 >= len(evs) {
			continue
		}
		var r agent.RunResumed
		json.Unmarshal(e.Payload, &r)
		if r.By == "ada" && r.Limits != nil && r.Limits.MaxSteps == 10 && evs[i+1].Type == journal.UserMessage {
			found = true
		}
	}
	if !found {
		t.Error("no run.resumed by ada with the new limits followed by her message")
	}
	// A completed run needs a message; an executing one is refused.
	if _, err := f.rt.JournalResume(ctx, id, &agent.Resumption{Limits: &agent.Limits{MaxSteps: 20}}); err == nil {
		t.Error("a resume of a completed run without a message was journaled")
	}
}
