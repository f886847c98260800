package service_test

import (
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// A rewind of a run that a process executes says so once, with who
// executes it: not "the run is executing: journal: run is locked by
// another executor: run R is executing (…)" (trial 6, F32).
func TestRewindOfExecutingRunSaysItOnce(t *testing.T) {
	ctx := t.Context()
	store := mem.New()
	rt := agent.NewRuntime(store, nil)
	svc := service.New(rt, nil)
	id, _ := forkSource(t, ctx, rt)
	unlock, err := store.Lock(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	_, err = svc.Rewind(ctx, service.Local("ada"), id, &api.RewindRun{To: 2})
	e, _ := service.Classify(err)
	if e == nil || strings.Count(e.Message, "executing") != 1 || strings.Contains(e.Message, "journal:") || strings.Count(e.Message, id) != 1 ||
		!strings.Contains(e.Message, "(this process)") || !strings.Contains(e.Message, "cancel it") {
		t.Errorf("rewind of an executing run: %v, want run ID is executing (WHO) once, and what to do", err)
	}
}
