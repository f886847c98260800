package cluster_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"

	"github.com/keel-run/keel/cluster"
	"github.com/keel-run/keel/journal"
)

// pinned returns a fixture with a three-step run and a test workflow
// environment whose claims are counted, for the pin timeout tests.
func pinned(t *testing.T) (*fixture, string, *testsuite.TestWorkflowEnvironment, *atomic.Int32) {
	f := newFixture(t, cluster.Driver{PinTimeout: 10 * time.Second})
	id, _ := f.create(t, trajectory(t, "echo one > a", "cat a", ""), "")
	var s testsuite.WorkflowTestSuite
	env := f.env(&s)
	claims := new(atomic.Int32)
	env.OnActivity(cluster.ClaimActivity, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, runID string) (string, error) { claims.Add(1); return f.w.Claim(ctx, runID) })
	return f, id, env, claims
}

// A step waiting for a busy pinned worker waits in place: every
// PinTimeout the worker is pinged, it answers, and the run is not
// claimed again (before, the step was timed out and put back at the end
// of the worker's queue each time, and some runs waited for minutes).
func TestBusyWorkerKeepsTheRun(t *testing.T) {
	f, id, env, claims := pinned(t)
	var pings atomic.Int32
	env.OnActivity(cluster.PingActivity, mock.Anything).Return(func(context.Context) error { pings.Add(1); return nil })
	// Every step starts 35 s after it is scheduled: three pin timeouts.
	env.OnActivity(cluster.StepActivity, mock.Anything, mock.Anything).Return(f.w.Step).After(35 * time.Second)
	_, evs := f.drive(t, env, id, journal.StatusCompleted)
	if n := claims.Load(); n != 1 {
		t.Errorf("claimed %d times, want once (a busy worker keeps its runs)", n)
	}
	if n := pings.Load(); n < 3 {
		t.Errorf("%d pings, want at least 3 (one per pin timeout of each slow step)", n)
	}
	if n := count(evs, journal.RunResumed); n != 0 {
		t.Errorf("%d run.resumed events, want none", n)
	}
}

// A step whose worker is gone (its ping goes unanswered) is canceled
// and the run claimed afresh: another worker continues it from the
// journal.
func TestGoneWorkerLosesTheRun(t *testing.T) {
	f, id, env, claims := pinned(t)
	var pings atomic.Int32
	// The first worker: its first step never starts, its pings go
	// unanswered.
	env.OnActivity(cluster.StepActivity, mock.Anything, mock.Anything).Return(cluster.StepResult{}, errors.New("the step ran on a dead worker")).After(time.Hour).Once()
	env.OnActivity(cluster.PingActivity, mock.Anything).Return(func(context.Context) error { pings.Add(1); return errors.New("no answer") }).Once()
	// Then the run's next worker.
	env.OnActivity(cluster.StepActivity, mock.Anything, mock.Anything).Return(f.w.Step)
	env.OnActivity(cluster.PingActivity, mock.Anything).Return(func(context.Context) error { pings.Add(1); return nil })
	f.drive(t, env, id, journal.StatusCompleted)
	if n := claims.Load(); n != 2 {
		t.Errorf("claimed %d times, want twice (the run moves after the unanswered ping)", n)
	}
	if n := pings.Load(); n != 1 {
		t.Errorf("%d pings, want 1", n)
	}
}

// A run canceled between two steps stays canceled: the next step finds
// the cancel and executes nothing (before, it resumed the run, journaling
// run.resumed after run.canceled, and the run went on to its end).
func TestCancelBetweenStepsHolds(t *testing.T) {
	f := newFixture(t, cluster.Driver{})
	id, _ := f.create(t, trajectory(t, "echo one > a", "cat a", "echo two >> a", ""), "")
	var s testsuite.WorkflowTestSuite
	env := f.env(&s)
	var steps atomic.Int32
	env.OnActivity(cluster.StepActivity, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in cluster.StepInput) (cluster.StepResult, error) {
			if steps.Add(1) == 2 {
				if _, err := f.rt.Cancel(ctx, id, "ann"); err != nil {
					return cluster.StepResult{}, err
				}
			}
			return f.w.Step(ctx, in)
		})
	_, evs := f.drive(t, env, id, journal.StatusCanceled)
	if last := evs[len(evs)-1]; last.Type != journal.RunCanceled {
		t.Errorf("newest event %s, want run.canceled (nothing after the cancel)", last.Type)
	}
	if n := count(evs, journal.RunResumed); n != 0 {
		t.Errorf("%d run.resumed events, want none", n)
	}
}
