package schedule

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/keel-run/keel/journal"
)

// Runner starts and watches the runs of fires; Keel's wiring implements
// it with the service's run operations.
type Runner interface {
	// Start creates the run p.RunID and queues it for execution. It is
	// idempotent by run id: when a run with that id exists it creates
	// nothing and returns an error wrapping [ErrRunExists]. An error
	// wrapping [ErrPermanent] (the agent is revoked, the workspace is
	// gone) fails the fire at once; other errors are retried at the next
	// tick until [Options.DispatchTimeout] passes.
	Start(ctx context.Context, p *StartParams) error
	// Status returns the run's status, or an error wrapping
	// [journal.ErrNotFound] when it does not exist.
	Status(ctx context.Context, runID string) (journal.Status, error)
	// Cancel asks the run to stop (a cancel_other or terminate_other
	// fire); it does not wait for it.
	Cancel(ctx context.Context, runID, reason string) error
}

// Errors of a [Runner].
var (
	ErrRunExists = errors.New("schedule: the run exists already")
	ErrPermanent = errors.New("schedule: the run cannot be created")
)

// StartParams is what [Runner.Start] creates: the schedule's run
// template with its task rendered for one fire.
type StartParams struct {
	RunID    string
	Schedule *Schedule
	Fire     *Fire
	// Task is the schedule's task template rendered for the fire.
	Task string
}

// RunID returns the run id of the fire key of schedule id: a ULID whose
// time is the nominal time and whose other bits are a hash of both, so
// every process that starts the fire names the same run and the
// journal keeps all but the first out.
func RunID(id, key string, nominal time.Time) string {
	h := sha256.Sum256([]byte(id + "\x00" + key))
	var u ulid.ULID
	ms := nominal.UnixMilli()
	if ms < 0 {
		ms = 0
	}
	if err := u.SetTime(uint64(ms)); err != nil {
		_ = u.SetTime(ulid.MaxTime())
	}
	copy(u[6:], h[:10])
	return strings.ToLower(u.String())
}
