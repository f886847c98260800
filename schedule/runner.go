package schedule

import (
	"context"
	"crypto/sha256"
	"encoding/json"
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

// StartParams is what [Runner.Start] creates: a run of an agent with a
// task, made by a schedule's fire or a trigger's delivery.
type StartParams struct {
	// RunID is the run to create (derived from the fire or delivery).
	RunID string
	// Agent is the run's principal; OnBehalfOf the user it acts for.
	Agent, OnBehalfOf string
	// Task is the rendered task (trusted: the schedule's or trigger's
	// author wrote its template).
	Task string
	// Run is the rest of the create request as the schedule or trigger
	// holds it (model, workspace, limits, settings...).
	Run json.RawMessage
	// Labels name what started the run: [LabelSchedule] and [LabelFire],
	// or a trigger's.
	Labels map[string]string
	// Input is data from outside (a webhook's payload) that the run
	// sees as untrusted input, never as part of its task; nil for
	// schedules.
	Input *Input
	// Notify names the sinks told when the run needs a person.
	Notify []string
	// Owner is the schedule's or trigger's Owner: whose rights the run
	// is created with.
	Owner string
}

// Input is untrusted data handed to a run beside its task.
type Input struct {
	// Source says where it came from ("webhook trigger deploy-failed,
	// message msg_123").
	Source string `json:"source"`
	// ContentType is the sender's media type; Data the bytes as received.
	ContentType string `json:"content_type,omitempty"`
	Data        []byte `json:"data"`
}

// Labels of the runs a scheduler starts.
const (
	LabelSchedule = "keel.schedule" // the schedule's name
	LabelFire     = "keel.fire"     // the fire's key
)

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
