package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// A resume of a run the server executes is refused with what to do, and
// one with a message says the message was not delivered (fresh-user
// report 12, B16: "run … is executing", the message silently dropped):
// the same words as the local form's (service.Executing).
func TestResumeOfExecutingRun(t *testing.T) {
	e := newEnv(t, &envOptions{workers: 1})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	held := heldModel{release: make(chan struct{})}
	e.models.set("test:held", held)
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "test:held", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for r, err := e.admin.Run(ctx, run.ID); !r.Executing; r, err = e.admin.Run(ctx, run.ID) {
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // polls the server's state; no ordering rests on it
	}
	_, err = e.admin.Resume(ctx, run.ID, nil)
	if !client.IsCode(err, api.CodeConflict) || !strings.Contains(err.Error(), "is executing; wait for it to pause or end") || strings.Contains(err.Error(), "NOT delivered") {
		t.Errorf("resume of an executing run: %v", err)
	}
	_, err = e.admin.Resume(ctx, run.ID, &api.ResumeRun{Message: "also update the docs"})
	if !client.IsCode(err, api.CodeConflict) || !strings.Contains(err.Error(), "your message was NOT delivered") {
		t.Errorf("resume --message of an executing run: %v", err)
	}
	close(held.release)
	e.waitType(run.ID, journal.RunCompleted)
	events, err := e.store.Read(ctx, run.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events {
		if ev.Type == journal.UserMessage || ev.Type == journal.RunResumed {
			t.Errorf("a refused resume journaled %s: %s", ev.Type, ev.Payload)
		}
	}
}
