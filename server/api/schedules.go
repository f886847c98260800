package api

import "time"

// CreateSchedule is the body of POST /v1/schedules: when the runs start
// (a cron expression or an interval, in a time zone), what a fire does
// while a run of the schedule has not ended, and the runs' request (see
// docs/schedules.md).
type CreateSchedule struct {
	// Name is unique among the schedules: 1 to 100 letters, digits, '-',
	// '_' and '.'.
	Name string `json:"name"`
	// Cron is five cron fields ("0 9 * * MON-FRI") or a descriptor
	// (@hourly, @daily, @weekly, @monthly, @yearly); Every an interval
	// ("1h", at every multiple since the Unix epoch, shifted by Offset)
	// instead. Exactly one of the two.
	Cron   string `json:"cron,omitempty"`
	Every  string `json:"every,omitempty"`
	Offset string `json:"offset,omitempty"`
	// TimeZone is an IANA name ("Europe/Paris"); default UTC.
	TimeZone string `json:"time_zone,omitempty"`
	// Jitter delays each fire by a deterministic share of this ("5m").
	Jitter string `json:"jitter,omitempty"`
	// Start and End bound the fires (default: from the creation, no end).
	Start *time.Time `json:"start,omitempty"`
	End   *time.Time `json:"end,omitempty"`
	// Overlap is what a fire does while a run of the schedule has not
	// ended: skip (the default), buffer_one, buffer_all, cancel_other,
	// terminate_other or allow_all.
	Overlap string `json:"overlap,omitempty"`
	// CatchupWindow is how late a fire may be found and still start a
	// run ("1h"; default a year).
	CatchupWindow string `json:"catchup_window,omitempty"`
	// PauseAfterFailures pauses the schedule after this many consecutive
	// fires whose run failed (0: never).
	PauseAfterFailures int `json:"pause_after_failures,omitempty"`
	// Notify names the server's notification sinks told when a run of
	// the schedule waits for a person or fails (GET /v1/sinks).
	Notify []string `json:"notify,omitempty"`
	// Run is the runs' request, as for POST /v1/runs. Its task is a
	// template: {{.Time}} (the fire's nominal time in the schedule's
	// zone), {{.Previous}}, {{.Schedule}}, {{.Source}}.
	Run CreateRun `json:"run"`
}

// Schedule is a schedule as the API shows it: its definition and what
// its records say.
type Schedule struct {
	ID string `json:"id"`
	CreateSchedule
	// Driver is "" (the servers' scheduler) or "temporal" (Temporal
	// Schedules time the fires).
	Driver    string    `json:"driver,omitempty"`
	CreatedBy string    `json:"created_by,omitempty"`
	Created   time.Time `json:"created"`
	Paused    bool      `json:"paused,omitempty"`
	// PausedBy and PausedReason say who paused it and why
	// ("keel.scheduler": after failures).
	PausedBy     string     `json:"paused_by,omitempty"`
	PausedReason string     `json:"paused_reason,omitempty"`
	PausedAt     *time.Time `json:"paused_at,omitempty"`
	// Next is the next nominal fire time (none once it ended or while
	// paused).
	Next *time.Time `json:"next,omitempty"`
	// Counts are the fire records by outcome.
	Counts map[string]int `json:"counts"`
	// Open are the runs fired that have not ended; Buffered the fires
	// waiting for one to end; Failures the consecutive failed fires.
	Open     []string `json:"open,omitempty"`
	Buffered int      `json:"buffered,omitempty"`
	Failures int      `json:"failures,omitempty"`
	// Last is the newest fire record.
	Last *Fire `json:"last,omitempty"`
	// Warnings are credentials the runs will miss (none granted, to be
	// authorized again, expiring before the next fire), each with the
	// command that fixes it.
	Warnings []string `json:"warnings,omitempty"`
}

// ScheduleList is the body of GET /v1/schedules.
type ScheduleList struct {
	Schedules []Schedule `json:"schedules"`
}

// Fire is the one record of a schedule's fire: its nominal time and
// what became of it.
type Fire struct {
	// Key identifies the fire in its schedule: the nominal time, or
	// "manual:..." and "backfill:..." for fires a person asked for.
	Key string `json:"key"`
	// Source is "schedule", "manual" or "backfill".
	Source string `json:"source"`
	// Nominal is the time the spec named; Due adds the jitter; At is
	// when the record was made.
	Nominal time.Time `json:"nominal"`
	Due     time.Time `json:"due"`
	At      time.Time `json:"at,omitzero"`
	// Outcome is fired, caught_up, skipped, missed, buffered or failed.
	Outcome string `json:"outcome"`
	// RunID is the fire's run (fired, caught up, buffered: its future
	// run; failed: the run that could not be created).
	RunID string `json:"run_id,omitempty"`
	// Late is how long after Due the fire was decided ("2m30s").
	Late string `json:"late,omitempty"`
	// Reason explains a skip, a miss or a failure.
	Reason string `json:"reason,omitempty"`
	// By is who asked for a manual or backfill fire.
	By string `json:"by,omitempty"`
	// Canceled are the runs a cancel_other or terminate_other fire
	// canceled.
	Canceled []string `json:"canceled,omitempty"`
	// Started is when a buffered fire's run started.
	Started *time.Time `json:"started,omitempty"`
	// RunStatus is the run's status once it ended.
	RunStatus string `json:"run_status,omitempty"`
}

// FireList is the body of GET /v1/schedules/{id}/fires and of the answer
// to a backfill.
type FireList struct {
	Fires []Fire `json:"fires"`
}

// PauseSchedule is the body of POST /v1/schedules/{id}/pause (and of a
// trigger's pause); it may be empty.
type PauseSchedule struct {
	Reason string `json:"reason,omitempty"`
}

// TriggerSchedule is the body of POST /v1/schedules/{id}/trigger ("trigger
// now"); it may be empty.
type TriggerSchedule struct {
	// Overlap replaces the schedule's overlap policy for this fire.
	Overlap string `json:"overlap,omitempty"`
}

// Backfill is the body of POST /v1/schedules/{id}/backfill: fire the
// schedule at each of its nominal times after From and up to To, as if
// it had run then (at most 10,000).
type Backfill struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Overlap defaults to buffer_all (one run after the other).
	Overlap string `json:"overlap,omitempty"`
}

// CreateTrigger is the body of POST /v1/triggers: a webhook trigger (a
// URL that starts a run for each signed message) or, with On, a run
// trigger (the end of another agent's run starts one).
type CreateTrigger struct {
	Name string `json:"name"`
	// On makes a run trigger.
	On *RunEvents `json:"on,omitempty"`
	// Tolerance bounds the distance between a message's timestamp and
	// the server's clock ("5m", the default); Dedupe how long message
	// ids are remembered ("168h", the default).
	Tolerance string `json:"tolerance,omitempty"`
	Dedupe    string `json:"dedupe,omitempty"`
	// Notify names the sinks told when a run waits for a person or fails.
	Notify []string `json:"notify,omitempty"`
	// Run is the runs' request. Its task is a template over
	// {{.Trigger}}, {{.MessageID}} and {{.Received}}: never the payload,
	// which reaches the run as untrusted input.
	Run CreateRun `json:"run"`
}

// RunEvents names the ends of another agent's runs that start a run
// trigger's run: "completed", "failed", "output" (completed with an
// output, which the new run gets as untrusted input).
type RunEvents struct {
	Agent  string   `json:"agent"`
	Events []string `json:"events"`
}

// Trigger is a trigger as the API shows it.
type Trigger struct {
	ID string `json:"id"`
	CreateTrigger
	// URL is where a webhook trigger's sender posts (none for a run
	// trigger); SecretHash identifies its signing secret.
	URL        string    `json:"url,omitempty"`
	SecretHash string    `json:"secret_hash,omitempty"`
	CreatedBy  string    `json:"created_by,omitempty"`
	Created    time.Time `json:"created"`
	Paused     bool      `json:"paused,omitempty"`
	// Counts are the deliveries by outcome (accepted, duplicate) and by
	// refusal reason.
	Counts map[string]int `json:"counts"`
}

// NewTrigger is the answer to POST /v1/triggers: the only time a webhook
// trigger's signing secret ("whsec_...", the Standard Webhooks format)
// is shown.
type NewTrigger struct {
	Trigger
	Secret string `json:"secret,omitempty"`
}

// TriggerList is the body of GET /v1/triggers.
type TriggerList struct {
	Triggers []Trigger `json:"triggers"`
}

// Delivery is the record of one request to a trigger (or of a run's end
// that fired a run trigger). It holds the payload's digest and size,
// never the payload.
type Delivery struct {
	MessageID string `json:"message_id,omitempty"`
	// Outcome is accepted, duplicate or refused; Reason why refused
	// (bad_signature, too_old, too_new, replayed, missing_headers,
	// paused, too_large).
	Outcome   string     `json:"outcome"`
	Reason    string     `json:"reason,omitempty"`
	Timestamp *time.Time `json:"timestamp,omitempty"`
	Received  time.Time  `json:"received"`
	RunID     string     `json:"run_id,omitempty"`
	SHA256    string     `json:"sha256,omitempty"`
	Size      int        `json:"size,omitempty"`
	Remote    string     `json:"remote,omitempty"`
	RunError  string     `json:"run_error,omitempty"`
	// Cause is what fired a run trigger ("run 01J... completed").
	Cause string `json:"cause,omitempty"`
}

// DeliveryList is the body of GET /v1/triggers/{id}/deliveries.
type DeliveryList struct {
	Deliveries []Delivery `json:"deliveries"`
}

// TriggerAnswer is the answer to POST /v1/triggers/{id} (a webhook's
// delivery): the run it started (202) or had started (200, a retry).
type TriggerAnswer struct {
	RunID   string `json:"run_id"`
	Outcome string `json:"outcome"`
}

// Sink is a notification sink of the server, as configured by its
// operator: its name and kind (email, webhook, slack), never its
// address or secret.
type Sink struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Agents are the agents every run of which tells this sink.
	Agents []string `json:"agents,omitempty"`
}

// SinkList is the body of GET /v1/sinks.
type SinkList struct {
	Sinks []Sink `json:"sinks"`
}

// Notification is one notification the server queued: a wait or a
// failure of a run, sent to one sink, and what became of it.
type Notification struct {
	ID   string `json:"id"`
	Sink string `json:"sink"`
	// Kind is approval, auth, input or failed; Item the call or input
	// waiting.
	Kind   string    `json:"kind"`
	RunID  string    `json:"run_id"`
	Item   string    `json:"item,omitempty"`
	Title  string    `json:"title"`
	Link   string    `json:"link,omitempty"`
	Queued time.Time `json:"queued"`
	// State is queued, delivered or gave_up.
	State     string     `json:"state"`
	Attempts  int        `json:"attempts"`
	LastError string     `json:"last_error,omitempty"`
	Next      *time.Time `json:"next,omitempty"`
	Delivered *time.Time `json:"delivered,omitempty"`
}

// NotificationList is the body of GET /v1/notifications.
type NotificationList struct {
	Notifications []Notification `json:"notifications"`
}

// FiresParams are the query of GET /v1/schedules/{id}/fires: the fire
// records it returns.
type FiresParams struct {
	// Outcome keeps only records with this outcome ("" all).
	Outcome string
	// Last keeps the newest Last records (0: all).
	Last int
}
