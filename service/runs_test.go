package service_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// Every status runs are listed with is a filter that finds exactly the
// runs shown with it, and another status is refused (fresh-user trial
// 8, F19): a run the journal says is running but that nothing executes
// is queued (it never started) or interrupted (it did), not running.
func TestRunsByStatus(t *testing.T) {
	ctx := t.Context()
	rt := agent.NewRuntime(mem.New(), nil)
	svc := service.New(rt, nil)
	defer svc.Shutdown(context.WithoutCancel(ctx))
	me := service.Local("ada")
	run := func(events ...journal.Type) string {
		t.Helper()
		id, err := rt.Create(ctx, &agent.RunCreated{Task: "t", Model: "test:none", Workspace: t.TempDir(), Sandbox: "none",
			Principal: identity.LocalAgent, Policy: agent.NewPolicyRef(policy.Default())})
		if err != nil {
			t.Fatal(err)
		}
		for i, typ := range events {
			var v any = &agent.RunEnded{Reason: "test"}
			if typ == journal.RunResumed {
				v = &agent.RunResumed{}
			}
			p, _ := json.Marshal(v)
			if _, err := rt.Store().Append(ctx, id, int64(i+1), journal.Draft{Type: typ, Time: time.Now(), Payload: p}); err != nil {
				t.Fatal(err)
			}
		}
		return id
	}
	want := map[journal.Status]string{
		service.StatusQueued:      run(),
		service.StatusInterrupted: run(journal.RunResumed),
		journal.StatusRunning:     run(journal.RunResumed),
		journal.StatusPaused:      run(journal.RunPaused),
		journal.StatusCompleted:   run(journal.RunCompleted),
		journal.StatusFailed:      run(journal.RunFailed),
		journal.StatusCanceled:    run(journal.RunCanceled),
	}
	// Another process executes the running one: it holds its lease.
	unlock, err := rt.Store().(journal.Locker).Lock(ctx, want[journal.StatusRunning])
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if len(want) != len(service.Statuses) {
		t.Fatalf("the test covers %d statuses of %d", len(want), len(service.Statuses))
	}
	for _, st := range service.Statuses {
		runs, err := svc.Runs(ctx, me, &service.ListRuns{Status: []journal.Status{st}})
		if err != nil {
			t.Fatalf("status %s: %v", st, err)
		}
		if len(runs) != 1 || runs[0].ID != want[st] || service.RunStatus(&runs[0]) != string(st) {
			t.Errorf("status %s: %d run(s) %+v, want run %s only, shown %s", st, len(runs), runs, want[st], st)
		}
	}
	all, err := svc.Runs(ctx, me, nil)
	if err != nil || len(all) != len(want) {
		t.Fatalf("all runs: %d, %v", len(all), err)
	}
	for _, bad := range []journal.Status{"bogus", "RUNNING", ""} {
		_, err := svc.Runs(ctx, me, &service.ListRuns{Status: []journal.Status{bad}})
		wantCode(t, err, api.CodeInvalidRequest)
	}
}
