// Package schedule starts agent runs on their own: cron expressions and
// intervals in IANA time zones with jitter and an end time, Temporal's
// overlap policies and catch-up window, pause after N failed runs, trigger
// now and backfill.
//
// Every nominal fire time of a schedule gets exactly one journaled record
// with its outcome ([Fire]: fired with its run, caught up, skipped for
// overlap, missed outside the catch-up window, buffered, or failed to
// dispatch and why), keyed by schedule and nominal time. The records live
// in the schedule's own system stream ([StreamPrefix] + id) of the journal,
// hash-chained like a run; an append is refused when another process
// recorded the same key first ([journal.Stream]), and a fire's run id is
// derived from the schedule and the key, so a fire retried on another
// server or after a crash can never start a second run. The [Scheduler]
// is exact across restarts, several servers on one database and clock
// jumps: it walks nominal times from the newest one recorded, never from
// the clock, so a clock set back fires nothing twice and a clock set
// forward (or a server that was down) catches up by the catch-up window
// and the overlap policy, once.
//
// Runs are started through a [Runner] (the service's create, in Keel's
// wiring); this package reads no flags, files or environment.
package schedule

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// DirectoryID is the system stream listing every schedule (created and
// deleted); each schedule's definition, pauses and fires are in its own
// stream [StreamPrefix] + id.
const DirectoryID = journal.SystemPrefix + "schedules"

// StreamPrefix starts the id of a schedule's own stream.
const StreamPrefix = journal.SystemPrefix + "schedule."

// Event types of the schedule streams.
const (
	// Created defines a schedule (in its own stream and, with its id and
	// name only, in the directory); Deleted ends it (both streams).
	Created journal.Type = "schedule.created"
	Deleted journal.Type = "schedule.deleted"
	// Paused and Resumed stop and restart fires; nominal times while
	// paused are not fires and get no record.
	Paused  journal.Type = "schedule.paused"
	Resumed journal.Type = "schedule.resumed"
	// Fired is the one record of a nominal fire time (any outcome).
	Fired journal.Type = "schedule.fire"
	// Started starts the run of a buffered fire.
	Started journal.Type = "schedule.started"
	// DispatchFailed records that a fire's run could not be created.
	DispatchFailed journal.Type = "schedule.dispatch_failed"
	// RunEnded records that a fire's run ended (for overlap and pause
	// after failures).
	RunEnded journal.Type = "schedule.run_ended"
)

// Overlap says what a fire does while a run of the schedule has not
// ended, with Temporal's vocabulary.
type Overlap string

// Overlap policies.
const (
	// OverlapSkip (the default) records the fire as skipped.
	OverlapSkip Overlap = "skip"
	// OverlapBufferOne starts the fire once the running run ends; while
	// one fire is buffered, later ones are skipped.
	OverlapBufferOne Overlap = "buffer_one"
	// OverlapBufferAll buffers every fire and starts them one after the
	// other.
	OverlapBufferAll Overlap = "buffer_all"
	// OverlapCancelOther cancels the running run and starts the fire once
	// it has ended.
	OverlapCancelOther Overlap = "cancel_other"
	// OverlapTerminateOther cancels the running run and starts the fire
	// at once, without waiting for the cancel to finish.
	OverlapTerminateOther Overlap = "terminate_other"
	// OverlapAllowAll starts every fire, whatever runs.
	OverlapAllowAll Overlap = "allow_all"
)

// Overlaps lists the policies in the order they are documented.
var Overlaps = []Overlap{OverlapSkip, OverlapBufferOne, OverlapBufferAll, OverlapCancelOther, OverlapTerminateOther, OverlapAllowAll}

// ParseOverlap returns the policy named s ("" is [OverlapSkip]).
func ParseOverlap(s string) (Overlap, error) {
	if s == "" {
		return OverlapSkip, nil
	}
	for _, o := range Overlaps {
		if string(o) == s {
			return o, nil
		}
	}
	return "", fmt.Errorf("schedule: unknown overlap policy %q (want %v)", s, Overlaps)
}

// DefaultCatchupWindow is Temporal's default: a fire found late by up to
// a year after a stop still fires (once, by the overlap policy).
const DefaultCatchupWindow = 365 * 24 * time.Hour

// MinInterval is the shortest interval (Spec.Every) a schedule is
// created with: cron's resolution. Shorter ones would journal a record
// per fire, mostly skipped, faster than a scheduler looks (every 5 s).
const MinInterval = time.Minute

// MinCatchupWindow is the shortest catch-up window accepted.
const MinCatchupWindow = 10 * time.Second

// Policy is what a schedule does about overlaps, late fires and failures.
// The zero value is valid: skip, a year's catch-up window, never pause.
type Policy struct {
	Overlap Overlap `json:"overlap,omitempty"`
	// CatchupWindow is how late a fire may be found (the scheduler was
	// stopped, the clock jumped forward) and still fire; later ones are
	// recorded as missed. 0 means [DefaultCatchupWindow].
	CatchupWindow agent.Duration `json:"catchup_window,omitempty"`
	// PauseAfterFailures pauses the schedule after this many consecutive
	// fires whose run failed or could not be dispatched; 0 never pauses.
	PauseAfterFailures int `json:"pause_after_failures,omitempty"`
}

func (p *Policy) window() time.Duration {
	if p.CatchupWindow <= 0 {
		return DefaultCatchupWindow
	}
	return p.CatchupWindow.D()
}

// Schedule is a schedule's definition. It does not change after
// creation (pause and resume are events of their own).
type Schedule struct {
	// ID is assigned at creation; Name is unique among the schedules not
	// deleted.
	ID   string `json:"id"`
	Name string `json:"name"`
	Spec Spec   `json:"spec"`
	// Policy: overlap, catch-up window, pause after failures.
	Policy Policy `json:"policy"`
	// Agent is the principal of the runs; OnBehalfOf the user an
	// assistant agent acts for.
	Agent      string `json:"agent,omitempty"`
	OnBehalfOf string `json:"on_behalf_of,omitempty"`
	// Task is the runs' task, a text/template over [TaskData]
	// ("Summarise the issues opened since {{.Previous}}").
	Task string `json:"task"`
	// Run is the rest of the runs' create request (model, workspace,
	// limits, settings...), kept as given for the [Runner]; its task is
	// Task's rendering.
	Run json.RawMessage `json:"run,omitempty"`
	// Notify names the notification sinks told when a run of the schedule
	// needs a person or ends badly.
	Notify []string `json:"notify,omitempty"`
	// Providers are the credential providers the runs use (found when
	// the schedule was created), for [CredentialWarnings].
	Providers []string `json:"providers,omitempty"`
	// Driver is who walks the nominal times: "" (this package's
	// [Scheduler.Tick]) or "temporal" (a Temporal Schedule calls
	// [Scheduler.FireAt]; Tick then records only the fires Temporal can no
	// longer deliver, as missed).
	Driver string `json:"driver,omitempty"`
	// Owner names, for the [Runner], whose rights the runs are created
	// with (the creator's API token, or the journal's owner at the
	// command line); opaque to this package.
	Owner string `json:"owner,omitempty"`
	// CreatedBy is who created it; Created when (set by [Scheduler.Create]).
	CreatedBy string    `json:"created_by,omitempty"`
	Created   time.Time `json:"created"`
}

// DriverTemporal is [Schedule.Driver] for schedules walked by Temporal.
const DriverTemporal = "temporal"

// Source says what made a fire.
type Source string

// Sources of fires.
const (
	SourceSchedule Source = "schedule" // a nominal time of the spec
	SourceManual   Source = "manual"   // trigger now
	SourceBackfill Source = "backfill" // a nominal time of a backfill range
)

// Outcome is what became of a fire.
type Outcome string

// Fire outcomes.
const (
	// OutcomeFired started a run on time.
	OutcomeFired Outcome = "fired"
	// OutcomeCaughtUp started a run late (the scheduler was stopped or
	// the clock jumped), within the catch-up window.
	OutcomeCaughtUp Outcome = "caught_up"
	// OutcomeSkipped started nothing: a run of the schedule had not ended
	// (Reason names it).
	OutcomeSkipped Outcome = "skipped"
	// OutcomeMissed started nothing: found later than the catch-up window.
	OutcomeMissed Outcome = "missed"
	// OutcomeBuffered waits for the running run to end; it becomes fired
	// when its run starts.
	OutcomeBuffered Outcome = "buffered"
	// OutcomeFailed could not create its run (Reason says why).
	OutcomeFailed Outcome = "failed"
)

// Outcomes lists every outcome.
var Outcomes = []Outcome{OutcomeFired, OutcomeCaughtUp, OutcomeSkipped, OutcomeMissed, OutcomeBuffered, OutcomeFailed}

// Fire is the record of one fire: the payload of a [Fired] event, with
// the later events about it folded in.
type Fire struct {
	// Key identifies the fire within its schedule: the nominal time for
	// scheduled fires, prefixed for manual and backfill ones.
	Key    string `json:"key"`
	Source Source `json:"source"`
	// Nominal is the time the spec named; Due adds the jitter.
	Nominal time.Time `json:"nominal"`
	Due     time.Time `json:"due"`
	// At is when the record was made (the scheduler's clock).
	At      time.Time `json:"at,omitzero"`
	Outcome Outcome   `json:"outcome"`
	// RunID is the fire's run (fired, caught up, buffered: its future
	// run; failed: the run that could not be created).
	RunID string `json:"run_id,omitempty"`
	// Late is how long after Due the fire was decided (or its buffered
	// run started).
	Late agent.Duration `json:"late,omitempty"`
	// Reason explains a skip, a miss or a failure.
	Reason string `json:"reason,omitempty"`
	// By is who asked, for manual and backfill fires.
	By string `json:"by,omitempty"`
	// Canceled are the runs a cancel_other or terminate_other fire
	// canceled.
	Canceled []string `json:"canceled,omitempty"`
	// Started is when a buffered fire's run started.
	Started time.Time `json:"started,omitzero"`
	// RunStatus is the run's status once it ended.
	RunStatus journal.Status `json:"run_status,omitempty"`
}

// ran reports whether the fire has (or is to have) a run.
func (f *Fire) ran() bool {
	return f.Outcome == OutcomeFired || f.Outcome == OutcomeCaughtUp
}

// scheduledKey is the key of a scheduled fire at nominal time n.
func scheduledKey(n time.Time) string { return n.UTC().Format(time.RFC3339Nano) }
