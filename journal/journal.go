// Package journal is Keel's source of truth: an append-only, hash-chained
// sequence of events per run.
//
// A run's state is a fold over its events (see package agent). Events of
// one run have gap-free sequence numbers starting at 1; each carries a
// type, a time, a JSON payload and hash = SHA-256(prev_hash ‖ canonical
// event), where prev_hash of the first event is 32 zero bytes and the
// canonical event is defined by [Canonical]. A journal whose chain fails
// [Verify] is reported as corrupt ([*CorruptError]), never silently
// repaired.
//
// Backends implement [Store]: [github.com/keel-run/keel/journal/sqlite] is
// the default. Every backend must pass the conformance suite in
// [github.com/keel-run/keel/journal/journaltest].
package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Type is an event type such as "run.created". Types are dotted
// "subject.verb" names; the set below is the journal contract
// (docs/architecture.md, "Contract — journal"), and backends store any
// type verbatim.
type Type string

// Event types written by the runtime.
const (
	RunCreated        Type = "run.created"
	RunResumed        Type = "run.resumed"
	RunPaused         Type = "run.paused"
	RunCompleted      Type = "run.completed"
	RunFailed         Type = "run.failed"
	RunCanceled       Type = "run.canceled"
	SetupFinished     Type = "setup.finished"
	ModelResponded    Type = "model.responded"
	ModelFailed       Type = "model.failed"
	GateDecided       Type = "gate.decided"
	ApprovalRequested Type = "approval.requested"
	ApprovalResolved  Type = "approval.resolved"
	ToolStarted       Type = "tool.started"
	ToolFinished      Type = "tool.finished"
	ContextCompacted  Type = "context.compacted"
	UserMessage       Type = "user.message"
	SandboxEgress     Type = "sandbox.egress"
	SandboxQuarantine Type = "sandbox.quarantine"
	// AuthRequired pauses a call until a person authorizes a credential;
	// AuthResolved ends that wait.
	AuthRequired Type = "auth.required"
	AuthResolved Type = "auth.resolved"
	// WorkspaceCheckpoint records a snapshot of the workspace's files
	// (a tree in Keel's checkpoint store); WorkspaceRestored records that
	// the files were put back as an earlier snapshot had them (a rewind,
	// or the start of a fork). WorkspaceRestoring is a rewind's intent,
	// journaled before it writes any file: the WorkspaceRestored that
	// follows says it finished (docs/checkpoints.md).
	WorkspaceCheckpoint Type = "workspace.checkpoint"
	WorkspaceRestored   Type = "workspace.restored"
	WorkspaceRestoring  Type = "workspace.restoring"
	// InputRequested records a question a running call's MCP server asks
	// a person (elicitation); InputAnswered the person's answer, which
	// may be appended by another process while the call waits.
	InputRequested Type = "input.requested"
	InputAnswered  Type = "input.answered"
	// ChildSpawned records a child run a call of this run started, with
	// the slice of this run's budget reserved for it; ChildDelivered the
	// child's result (or what was salvaged of it) and spend, given to
	// this run once (docs/teams.md).
	ChildSpawned   Type = "child.spawned"
	ChildDelivered Type = "child.delivered"
)

// Event is one journal record.
type Event struct {
	RunID string `json:"run_id"`
	// Seq is the 1-based, gap-free position of the event in its run.
	Seq  int64 `json:"seq"`
	Type Type  `json:"type"`
	// Time is when the event was appended, as given by the writer's
	// injected clock; stored with nanosecond precision in UTC.
	Time time.Time `json:"time"`
	// Payload is compact JSON (an object). Backends store it byte for
	// byte, so the hash of a stored event is reproducible.
	Payload json.RawMessage `json:"payload"`
	// PrevHash and Hash are lowercase hex SHA-256 digests.
	PrevHash string `json:"prev_hash"`
	Hash     string `json:"hash"`
	// Redacted is set on an event as a reader was shown it, with parts
	// of its payload it may not see replaced (never in a store): its Hash
	// is the stored event's, so a reader checks only its links.
	Redacted bool `json:"redacted,omitempty"`
}

// Draft is an event to append: the store assigns Seq, PrevHash and Hash.
type Draft struct {
	Type    Type
	Time    time.Time
	Payload json.RawMessage
}

// RunSummary is a store's index entry for one run.
type RunSummary struct {
	RunID   string    `json:"run_id"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	// LastSeq and LastType describe the newest event.
	LastSeq  int64 `json:"last_seq"`
	LastType Type  `json:"last_type"`
	// Status is [StatusOf](LastType).
	Status Status `json:"status"`
}

// Status is a run's lifecycle state as derived from its newest event.
type Status string

// Run statuses.
const (
	StatusRunning   Status = "running"
	StatusPaused    Status = "paused"
	StatusCompleted Status = "completed"
	StatusFailed    Status = "failed"
	StatusCanceled  Status = "canceled"
)

// StatusOf derives a run's status from the type of its newest event:
// run.completed, run.failed, run.canceled and run.paused map to their
// status, approval.requested and auth.required to paused, anything else
// to running.
func StatusOf(t Type) Status {
	switch t {
	case RunCompleted:
		return StatusCompleted
	case RunFailed:
		return StatusFailed
	case RunCanceled:
		return StatusCanceled
	case RunPaused, ApprovalRequested, AuthRequired:
		return StatusPaused
	}
	return StatusRunning
}

// Stops reports whether an event of type t leaves its run stopped:
// paused (run.paused, approval.requested, auth.required) or ended.
// Following a run until it stops (keel runs show --follow, the API's
// ?until=stopped) ends after such an event and the rest of its batch.
func Stops(t Type) bool {
	s := StatusOf(t)
	return s == StatusPaused || s.Terminal()
}

// KeepsStatus reports the event types that do not change a run's status
// (the workspace's files, not the conversation; what the sandbox saw,
// which its proxy and git guard report from their own goroutines and may
// arrive after the run's last step): a store's index keeps the status a
// run had before them, so that a completed run whose files were rewound,
// or whose last connection's end was reported late, stays completed.
func KeepsStatus(t Type) bool {
	switch t {
	case WorkspaceCheckpoint, WorkspaceRestored, WorkspaceRestoring, SandboxEgress, SandboxQuarantine:
		return true
	}
	return false
}

// TailStatus returns the status of a run after events of types are
// appended to it, and keep true when none of them changes the status
// (see [KeepsStatus]): the run keeps the status it had.
func TailStatus(types ...Type) (s Status, keep bool) {
	for i := len(types) - 1; i >= 0; i-- {
		if !KeepsStatus(types[i]) {
			return StatusOf(types[i]), false
		}
	}
	return StatusRunning, true
}

// Terminal reports whether s is completed, failed or canceled.
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCanceled
}

// ListParams filters [Store.Runs]. The zero value lists every run, newest
// first.
type ListParams struct {
	// Status, when non-empty, keeps only runs with one of these statuses.
	Status []Status
	// Limit caps the number of runs returned; 0 means no cap.
	Limit int
}

// Store is a journal backend.
//
// Implementations are safe for concurrent use. Append is atomic: either
// every draft is stored or none is. Close is idempotent.
type Store interface {
	// Append stores drafts as the next events of run, after the event
	// with sequence number after (0 for a new run). It returns the stored
	// events. If the run's newest event is not after, Append stores
	// nothing and returns an error wrapping [ErrConflict]: this is how
	// two writers of one run are kept apart.
	Append(ctx context.Context, runID string, after int64, drafts ...Draft) ([]Event, error)
	// Read returns the events of run with Seq >= from, in order. An
	// unknown run returns an error wrapping [ErrNotFound].
	Read(ctx context.Context, runID string, from int64) ([]Event, error)
	// Runs lists runs, newest created first.
	Runs(ctx context.Context, p *ListParams) ([]RunSummary, error)
	Close() error
}

// Notifier is an optional interface of a [Store] that can wake readers
// when run gains events. The returned channel receives (lossily: a full
// channel is skipped) after each append in this process; stop releases
// it. Readers that need events written by other processes must also poll.
type Notifier interface {
	Notify(runID string) (ch <-chan struct{}, stop func())
}

// Deferrer is an optional interface of a [Store] whose appends can leave
// the wait for stable storage to a later one. The agent's executor uses it
// for the events that need not be durable on their own (docs/architecture.md,
// "Durable points"): the model's response, the gate's decisions and a
// checkpoint before the tools' starts, a result before the turn's last.
type Deferrer interface {
	// AppendDeferred is Append, except that it may return before the
	// events are on stable storage: they are atomic, ordered, visible to
	// readers and safe from a crash of the process at once, and durable
	// once a later Append or Sync of the same Store returns. A power loss
	// before then may lose them and every event after them, never an
	// earlier one.
	AppendDeferred(ctx context.Context, runID string, after int64, drafts ...Draft) ([]Event, error)
	// Sync returns once every event this Store appended is on stable
	// storage.
	Sync(ctx context.Context) error
}

// Versioner is an optional interface of a [Store] that can tell cheaply
// whether anything may have been appended since an earlier call, so that
// a reader can keep what it read of the runs index (a server's list of
// runs) until it changes.
type Versioner interface {
	// Version returns a number that differs from every earlier one it
	// returned once any run gained events, by this process or another,
	// in a commit that ended before the call (it may also differ when
	// nothing changed). ok is false when the Store cannot tell now; the
	// caller must then read.
	Version(ctx context.Context) (v uint64, ok bool)
}

// SharedNotifier is an optional interface of a [Notifier] whose wake-ups
// also follow appends by other processes while Listening reports true
// (journal/postgres, by LISTEN/NOTIFY; when its listening connection is
// lost, it wakes every reader once it listens again). [Follow] then
// re-reads a run only every [SharedPoll] without a wake-up, in case a
// notification is lost, instead of every poll interval.
type SharedNotifier interface {
	Notifier
	Listening() bool
}

// Errors callers branch on.
var (
	ErrConflict = errors.New("journal: append conflict")
	ErrNotFound = errors.New("journal: run not found")
)

// CorruptError reports a journal that fails its hash chain or cannot be
// decoded. Seq is the first bad event (0 when the run itself is unusable).
type CorruptError struct {
	RunID  string
	Seq    int64
	Reason string
}

// Error implements error.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("journal: run %s is corrupt at event %d: %s", e.RunID, e.Seq, e.Reason)
}
