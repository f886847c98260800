package cluster_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/keel-run/keel/cluster"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
)

var update = flag.Bool("update", false, "record testdata/history-*.json again against a real Temporal dev server")

// historyFile is a workflow history recorded by an earlier Keel build (a
// run driven to completion through claim, model and tool steps, on a real
// Temporal dev server).
const historyFile = "testdata/history-v1.json"

// A history recorded by an earlier build replays on this build's
// workflow code without a nondeterminism error: deploying a new Keel
// while runs are in flight does not break their workflows. (What the
// runs decided is in the journal, which the steps read; the workflow
// holds only ids.) Record it again with -update when a change is meant to
// be incompatible, and version the workflow instead.
func TestReplayRecordedHistory(t *testing.T) {
	if *update {
		recordHistory(t)
	}
	r := worker.NewWorkflowReplayer()
	d := &cluster.Driver{}
	r.RegisterWorkflowWithOptions(d.Run, workflow.RegisterOptions{Name: cluster.WorkflowName})
	if err := r.ReplayWorkflowHistoryFromJSONFile(nil, historyFile); err != nil {
		t.Fatalf("the recorded history does not replay on this build: %v", err)
	}
}

func recordHistory(t *testing.T) {
	addr := testenv.Temporal(t)
	c, err := cluster.Dial(t.Context(), addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f := newFixture(t, cluster.Driver{})
	id, _ := f.create(t, trajectory(t, "echo one > a", "cat a", ""), "")
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f.w.Run(ctx, c) }()
	defer func() { stop(); <-done }()
	if err := cluster.NewDispatcher(c).Dispatch(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	run := c.GetWorkflow(t.Context(), cluster.WorkflowID(id), "")
	if err := run.Get(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	st, _ := f.events(t, id)
	if st.Status != journal.StatusCompleted {
		t.Fatalf("run %s", st.Status)
	}
	var h historypb.History
	it := c.GetWorkflowHistory(t.Context(), cluster.WorkflowID(id), run.GetRunID(), false, 0)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, e)
	}
	b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(&h)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Dir(historyFile), 0o755)
	if err := os.WriteFile(historyFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded %d history events in %s", len(h.Events), historyFile)
}
