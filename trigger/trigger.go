// Package trigger starts agent runs when something happens outside:
// webhooks verified with the Standard Webhooks signature scheme
// (webhook-id, webhook-timestamp, webhook-signature; HMAC-SHA256 over
// "id.timestamp.body"), with a timestamp tolerance and de-duplication by
// message id.
//
// Every delivery is journaled in the trigger's own system stream
// ([StreamPrefix] + id) with its outcome: accepted (with its run), a
// duplicate of an accepted message (a sender's retry: no second run), or
// refused and why (bad signature, timestamp too old or too new, a replayed
// id with another body, missing headers, the trigger paused). The run id
// of an accepted message derives from the trigger and the message id, so
// deliveries racing on several servers start one run. The payload reaches
// the run as untrusted input beside its task ([schedule.Input]), never
// inside the task text, and the journal keeps only its digest and size.
package trigger

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/schedule"
)

// DirectoryID lists every trigger; each trigger's definition and
// deliveries are in its own stream [StreamPrefix] + id.
const DirectoryID = journal.SystemPrefix + "triggers"

// StreamPrefix starts the id of a trigger's own stream.
const StreamPrefix = journal.SystemPrefix + "trigger."

// Event types of the trigger streams.
const (
	Created  journal.Type = "trigger.created"
	Deleted  journal.Type = "trigger.deleted"
	Paused   journal.Type = "trigger.paused"
	Resumed  journal.Type = "trigger.resumed"
	Received journal.Type = "trigger.received"
	// RunFailed records that an accepted delivery's run could not be
	// created.
	RunFailed journal.Type = "trigger.run_failed"
)

// Labels of the runs a trigger starts.
const (
	LabelTrigger = "keel.trigger" // the trigger's name
	LabelMessage = "keel.message" // the delivery's message id
)

// DefaultTolerance is how far a message's timestamp may be from the
// server's clock (the Standard Webhooks libraries' default).
const DefaultTolerance = 5 * time.Minute

// DefaultDedupe is how long accepted message ids are remembered.
const DefaultDedupe = 7 * 24 * time.Hour

// MaxBody bounds a delivery's payload.
const MaxBody = 1 << 20

// Trigger is a webhook trigger's definition.
type Trigger struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Agent is the principal of the runs; OnBehalfOf the user it acts for.
	Agent      string `json:"agent,omitempty"`
	OnBehalfOf string `json:"on_behalf_of,omitempty"`
	// Task is the runs' task, a text/template over [TaskData]. The
	// payload is never in it: the run gets it as untrusted input.
	Task string `json:"task"`
	// Run is the rest of the runs' create request, kept as given.
	Run json.RawMessage `json:"run,omitempty"`
	// Notify names the sinks told when a run needs a person.
	Notify []string `json:"notify,omitempty"`
	// On, when set, makes this a run trigger: the end of another agent's
	// run starts it (no webhook, no secret).
	On *On `json:"on,omitempty"`
	// Tolerance bounds the distance between a message's timestamp and
	// the clock; 0 means [DefaultTolerance].
	Tolerance agent.Duration `json:"tolerance,omitempty"`
	// Dedupe is how long a message id is remembered; 0 means
	// [DefaultDedupe]. A message older than that is refused as too old
	// anyway, by its timestamp, unless the sender re-signs it.
	Dedupe agent.Duration `json:"dedupe,omitempty"`
	// Secret names the signing secret in the [Secrets] store (set at
	// creation); the secret itself is never journaled.
	Secret string `json:"secret"`
	// SecretHash identifies the secret without revealing it.
	SecretHash string `json:"secret_hash,omitempty"`
	// Owner names, for the runner, whose rights the runs are created
	// with (see schedule.Schedule.Owner).
	Owner     string    `json:"owner,omitempty"`
	CreatedBy string    `json:"created_by,omitempty"`
	Created   time.Time `json:"created"`
}

// TaskData is what a trigger's task template sees: no part of the
// payload, and plain values that print as text with any verb (never Go
// syntax).
type TaskData struct {
	Trigger   string
	MessageID string
	Received  schedule.TaskTime
}

// String says the data in words.
func (d TaskData) String() string {
	return fmt.Sprintf("trigger %s, message %s, received %s", d.Trigger, d.MessageID, d.Received)
}

// GoString is String.
func (d TaskData) GoString() string { return d.String() }

// Outcome is what became of a delivery.
type Outcome string

// Delivery outcomes.
const (
	Accepted  Outcome = "accepted"
	Duplicate Outcome = "duplicate" // a retry of an accepted message
	Refused   Outcome = "refused"
	// Failed is an accepted delivery whose run could not be created
	// (RunError says why): it has no run.
	Failed Outcome = "failed"
)

// Reasons a delivery is refused.
const (
	ReasonHeaders   = "missing_headers"
	ReasonSignature = "bad_signature"
	ReasonTooOld    = "too_old"
	ReasonTooNew    = "too_new"
	ReasonReplayed  = "replayed" // an accepted id with another body
	ReasonPaused    = "paused"
	ReasonTooLarge  = "too_large"
)

// Delivery is the record of one request to a trigger.
type Delivery struct {
	// MessageID is the sender's webhook-id ("" when missing). Visible
	// escapes are the caller's business: it is the sender's text.
	MessageID string  `json:"message_id,omitempty"`
	Outcome   Outcome `json:"outcome"`
	Reason    string  `json:"reason,omitempty"`
	// Timestamp is the message's webhook-timestamp, when it parsed.
	Timestamp time.Time `json:"timestamp,omitzero"`
	// Received is when it arrived (the hub's clock).
	Received time.Time `json:"received"`
	// RunID is the run of an accepted message (and of its duplicates).
	RunID string `json:"run_id,omitempty"`
	// Digest and Size describe the payload (SHA-256, hex).
	Digest string `json:"sha256,omitempty"`
	Size   int    `json:"size,omitempty"`
	// Remote is the sender's address as the server saw it.
	Remote string `json:"remote,omitempty"`
	// RunError is why a failed delivery's run could not be created.
	RunError string `json:"run_error,omitempty"`
	// Cause is what fired a run trigger ("run 01j... completed").
	Cause string `json:"cause,omitempty"`
}

// Sign returns the headers a Standard Webhooks sender sends with body:
// message id, timestamp at, and the signature under secret ("whsec_"
// and base64). A sender (or a test) posts them to the trigger's URL.
func Sign(secret, id string, at time.Time, body []byte) (http.Header, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, err
	}
	sig, err := wh.Sign(id, at, body)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set(standardwebhooks.HeaderWebhookID, id)
	h.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(at.Unix(), 10))
	h.Set(standardwebhooks.HeaderWebhookSignature, sig)
	return h, nil
}
