package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/server/api"
)

// panicking is a model whose Generate panics, as a bug on an unforeseen
// answer would.
type panicking struct{}

func (panicking) Generate(context.Context, *model.Request) (*model.Response, error) {
	var calls []model.ToolCall
	_ = calls[len(calls)] // an index out of range: a runtime panic
	return nil, nil
}

// A panic while executing one run ends that run failed (reason internal)
// and leaves the server serving; a restart does not execute it again.
func TestPanicEndsTheRunNotTheServer(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	e.models.set("test:panic", panicking{})
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "test:panic", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	end := e.waitStop(run.ID, 1)
	if end.Type != journal.RunFailed {
		t.Fatalf("the run stopped with %s, want run.failed", end.Type)
	}
	v, _ := agent.Decode(&end)
	if r := v.(*agent.RunEnded); r.Reason != "internal" || !strings.Contains(r.Message, "panic") {
		t.Errorf("run.failed %+v, want reason internal naming the panic", r)
	}
	// The server still serves.
	if _, err := e.admin.Runs(ctx, nil); err != nil {
		t.Fatalf("after the panic: %v", err)
	}
	if _, resumed := e.restart(); len(resumed) != 0 {
		t.Errorf("Start() resumed %v", resumed)
	}
}
