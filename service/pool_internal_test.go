package service

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/server/api"
)

// A person's resume never turns into a job that does nothing or loses
// what it carries: one that arrives while the run's execution ends is
// kept as a resume (a plain resubmit would skip a failed run); one with a
// message or a change is refused while the run executes; and two
// people's changes are never merged in the queue.
func TestPoolKeepsAPersonsResume(t *testing.T) {
	p := newPool(nil, nil, nil, nil, nil, 0, slog.New(slog.DiscardHandler))
	who := &Caller{}
	who.Name, who.ID = "ann", "tok1"
	x := &execution{cancel: func(error) {}, done: make(chan struct{})}
	p.active["r1"] = x
	if err := p.resume("r1", "", change{}, who); err != nil {
		t.Fatal(err)
	}
	if !x.again || x.next == nil || !x.next.resume || x.next.by != "ann" {
		t.Errorf("a plain resume during an execution: again %v, next %+v; want a resume job kept", x.again, x.next)
	}
	ch := change{limits: &agent.Limits{MaxSteps: 9}}
	if err := p.resume("r1", "", ch, who); !errors.Is(err, ErrExecuting) {
		t.Errorf("a resume with new limits during an execution = %v, want ErrExecuting", err)
	}
	if err := p.resume("r1", "hello", change{}, who); !errors.Is(err, ErrExecuting) {
		t.Errorf("a resume with a message during an execution = %v, want ErrExecuting", err)
	}

	if err := p.submit("r2"); err != nil {
		t.Fatal(err)
	}
	if err := p.resume("r2", "", ch, who); err != nil {
		t.Fatal(err)
	}
	if len(p.queue) != 1 || !p.queue[0].resume || p.queue[0].limits == nil || p.queue[0].limits.MaxSteps != 9 {
		t.Errorf("queue after a resume with limits over a queued submit: %+v", p.queue)
	}
	if err := p.resume("r2", "", change{limits: &agent.Limits{MaxSteps: 20}}, who); !errors.Is(err, ErrExecuting) {
		t.Errorf("a second change over a queued one = %v, want refused", err)
	}
	if err := p.resume("r2", "", change{}, who); err != nil || p.queue[0].limits.MaxSteps != 9 {
		t.Errorf("a plain resume over a queued change = %v, queue %+v; want the change kept", err, p.queue)
	}
}

// A resume that read a paused run as executing, when the execution ends
// before the resume looks at the pool again, reads the run again: it
// never refuses a run that stopped as executing (a person who saw the
// run pause and resumed at once was told "run is executing").
func TestUntilIdleReadsAgainWhenTheExecutionEnded(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	rt := agent.NewRuntime(store, nil)
	id, err := rt.Create(ctx, &agent.RunCreated{Task: "t"})
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(&agent.RunEnded{Reason: agent.ReasonApproval})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, id, 1, journal.Draft{Type: journal.RunPaused, Time: time.Now(), Payload: payload}); err != nil {
		t.Fatal(err)
	}
	s := New(rt, &Options{})
	defer s.Shutdown(ctx)
	// As read while the execution was ending: the pool no longer holds it.
	stale := api.Run{ID: id, Status: string(journal.StatusPaused), Executing: true}
	got, err := s.untilIdle(ctx, stale)
	if err != nil {
		t.Fatal(err)
	}
	if got.Executing || got.Status != string(journal.StatusPaused) {
		t.Errorf("untilIdle = executing %v, status %s; want the run read again: idle, paused", got.Executing, got.Status)
	}
}
