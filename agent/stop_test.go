package agent_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
)

// A stop (Ctrl-C or a closed terminal in keel run, an interruption in a
// conversation, a server shutting down) lands wherever the loop is. Here
// it lands while the principal check of a step reads the identity
// journal, which then fails with ctx, or before the execution has even
// loaded the run: that failure is the stop, not a runtime error. The
// execution ends as the cause says, nothing runs, every call has one
// result (but after a shutdown, whose resume runs them), and a resume
// completes the run. (keel run exited 1, the run
// left running, when a signal came between a step's start and its
// check.)
func TestStopDuringPrincipalCheck(t *testing.T) {
	causes := []struct {
		name   string
		cause  error
		status journal.Status
		reason string
		closes bool // the open calls get results (a shutdown leaves them to the resume)
	}{
		{"user", agent.ErrUserCanceled, journal.StatusCanceled, agent.ReasonUser, true},
		{"interrupted", agent.ErrInterrupted, journal.StatusPaused, agent.ReasonInterrupted, true},
		{"shutdown", agent.ErrShutdown, journal.StatusPaused, agent.ReasonShutdown, false},
	}
	// The directory is consulted three times in the run: before the gate,
	// before the tools run, and as the call starts (checked below).
	points := []struct {
		name string
		at   int // the check the stop comes in; 0: before Execute
	}{
		{"before execute", 0},
		{"before the gate", 1},
		{"before the tools", 2},
		{"as the call starts", 3},
	}
	for _, c := range causes {
		for _, pt := range points {
			t.Run(c.name+"/"+pt.name, func(t *testing.T) {
				e := newEnv(t)
				withBash(e)
				dir := identity.NewDirectory(e.store, nil)
				m := &script{turns: []model.Message{calls(bash("c1", "ls")), answer("done")}}
				id := e.create(&agent.RunCreated{Principal: identity.LocalAgent})
				ctx, cancel := context.WithCancelCause(t.Context())
				defer cancel(nil)
				if pt.at == 0 {
					cancel(c.cause)
				}
				checks := 0
				p := e.params(m)
				p.Principals = func(ctx context.Context, principal, obo string) ([]policy.Grant, error) {
					checks++
					if checks == pt.at {
						cancel(c.cause) // the stop arrives: the read below fails
					}
					return dir.Check(ctx, principal, obo)
				}
				out, err := e.rt.Execute(ctx, id, p)
				if err != nil {
					t.Fatalf("Execute = %v, want the outcome of the stop", err)
				}
				if out.Status != c.status || out.End == nil || out.End.Reason != c.reason {
					t.Fatalf("outcome %s %+v, want %s with reason %q", out.Status, out.End, c.status, c.reason)
				}
				if got := e.log.get(); len(got) != 0 {
					t.Errorf("ran %v after the stop", got)
				}
				if c.closes {
					checkOneResult(t, out.State)
				}

				p.Principals = dir.Check
				out, err = e.rt.Execute(t.Context(), id, p)
				if err != nil || out.Status != journal.StatusCompleted {
					t.Fatalf("resume: %v %+v", err, out)
				}
				checkOneResult(t, out.State)
				checkPairs(t, m.reqs)
			})
		}
	}
	// Without a stop, the run consults the directory as many times as
	// the table has points after the start.
	e := newEnv(t)
	withBash(e)
	dir := identity.NewDirectory(e.store, nil)
	id := e.create(&agent.RunCreated{Principal: identity.LocalAgent})
	p := e.params(&script{turns: []model.Message{calls(bash("c1", "ls")), answer("done")}})
	checks := 0
	p.Principals = func(ctx context.Context, principal, obo string) ([]policy.Grant, error) {
		checks++
		return dir.Check(ctx, principal, obo)
	}
	if out, err := e.rt.Execute(t.Context(), id, p); err != nil || out.Status != journal.StatusCompleted {
		t.Fatalf("Execute: %v %+v", err, out)
	}
	if checks != len(points)-1 {
		t.Errorf("%d principal checks, want %d: the table misses a point", checks, len(points)-1)
	}
	if diff := cmp.Diff([]string{"bash ls"}, e.log.get()); diff != "" {
		t.Errorf("ran (-want +got):\n%s", diff)
	}
}
