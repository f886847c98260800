package schedule

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/keel-run/keel/internal/testclock"
	"github.com/keel-run/keel/journal"
)

// fakeRunner is a fake executor: a run lasts dur on the clock, then
// completes (or fails, when failing is set); canceled runs end at once.
type fakeRunner struct {
	clock *testclock.Clock
	dur   time.Duration

	mu       sync.Mutex
	runs     map[string]*fakeRun
	order    []string
	exists   int   // Start calls refused as duplicates
	failing  bool  // new runs fail
	startErr error // Start fails with it (nothing created)
	canceled []string
}

type fakeRun struct {
	p        StartParams
	started  time.Time
	canceled bool
	fail     bool
}

func newFakeRunner(c *testclock.Clock, dur time.Duration) *fakeRunner {
	return &fakeRunner{clock: c, dur: dur, runs: map[string]*fakeRun{}}
}

func (r *fakeRunner) Start(ctx context.Context, p *StartParams) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.startErr != nil {
		return r.startErr
	}
	if _, ok := r.runs[p.RunID]; ok {
		r.exists++
		return fmt.Errorf("%w: %s", ErrRunExists, p.RunID)
	}
	r.runs[p.RunID] = &fakeRun{p: *p, started: r.clock.Now(), fail: r.failing}
	r.order = append(r.order, p.RunID)
	return nil
}

func (r *fakeRunner) Status(ctx context.Context, id string) (journal.Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	run := r.runs[id]
	switch {
	case run == nil:
		return "", fmt.Errorf("run %s: %w", id, journal.ErrNotFound)
	case run.canceled:
		return journal.StatusCanceled, nil
	case r.clock.Now().Sub(run.started) < r.dur:
		return journal.StatusRunning, nil
	case run.fail:
		return journal.StatusFailed, nil
	}
	return journal.StatusCompleted, nil
}

func (r *fakeRunner) Cancel(ctx context.Context, id, reason string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if run := r.runs[id]; run != nil {
		run.canceled = true
	}
	r.canceled = append(r.canceled, id)
	return nil
}

func (r *fakeRunner) created() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.order...)
}

// task returns the rendered task run id was started with.
func (r *fakeRunner) task(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[id].p.Task
}
