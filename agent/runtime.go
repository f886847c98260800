package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/codefiles"
)

// Sentinel errors of the runtime.
var (
	// ErrRunCompleted is returned when asked to execute a completed run
	// without a message (with one, the run continues as a follow-up).
	ErrRunCompleted = errors.New("agent: run already completed")
	// ErrChildEnded is returned when asked to resume (or follow up) a
	// child agent's run that ended: its result belongs to its parent,
	// which received it (or will) and counted its spend then; a child
	// resumed on its own would work outside its parent's budget and
	// change a result already given. Resume or follow up the parent.
	ErrChildEnded = errors.New("agent: a child agent that ended is not resumed on its own (its result belongs to its parent)")
	// ErrRunBusy is returned when another process appended to the run
	// while this one executed it (journal.ErrConflict underneath).
	ErrRunBusy = errors.New("agent: run is being executed elsewhere")
	// ErrUserCanceled is the cancel cause for a person stopping a run
	// (Ctrl-C); the run ends canceled.
	ErrUserCanceled = errors.New("agent: canceled by user")
	// ErrTimeLimit is the cancel cause when Limits.Timeout expires; the
	// run ends failed with reason "timeout".
	ErrTimeLimit = errors.New("agent: time limit reached")
	// ErrShutdown is the cancel cause for a process shutting down; the
	// run ends paused and can be resumed.
	ErrShutdown = errors.New("agent: runtime shutting down")
	// ErrInterrupted is the cancel cause for a person interrupting the
	// current turn of a conversation (Ctrl-C in keel chat): the calls of
	// the open turn get results saying the user interrupted them, the
	// model is told at its next call (a user.message from
	// "keel.interrupt"), and the run pauses with reason "interrupted"
	// until the next message.
	ErrInterrupted = errors.New("agent: interrupted by the user")
	// ErrParentEnded is the cancel cause of a child run whose parent
	// ended without waiting for its result; the child ends canceled with
	// reason "parent_ended".
	ErrParentEnded = errors.New("agent: the parent run ended without waiting for this child")
	// ErrRunExists is returned by [Runtime.CreateAs] for a run id that
	// has events already; nothing is appended.
	ErrRunExists = errors.New("agent: the run exists already")
)

// CanceledBy returns a cancel cause that ends a run canceled, as
// [ErrUserCanceled] does (errors.Is matches it), and names the person who
// canceled it in the run.canceled message ("canceled by " + by). The team
// server uses it so that a canceled execution names the person, as
// [Runtime.Cancel] does for a run nobody executes.
func CanceledBy(by string) error { return &canceledBy{by: by} }

// CanceledByToken is [CanceledBy] that also records, in the run.canceled
// event's By and Token fields, the person and the id of the API token
// they canceled with (the team server).
func CanceledByToken(by, token string) error { return &canceledBy{by: by, token: token} }

type canceledBy struct{ by, token string }

func (c *canceledBy) Error() string        { return "agent: canceled by " + c.by }
func (c *canceledBy) Is(target error) bool { return target == ErrUserCanceled }

// Runtime creates and executes runs whose source of truth is a journal.
// It is safe for concurrent use; each run is executed by one goroutine
// (and one process: a second executor of the same run gets
// [ErrRunBusy]).
type Runtime struct {
	store  journal.Store
	clock  journal.Clock
	newID  func() string
	logger *slog.Logger
	// onAppend is RuntimeOptions.OnAppend.
	onAppend func(events []journal.Event, took time.Duration)
}

// RuntimeOptions configures a [Runtime]. The zero value is valid.
type RuntimeOptions struct {
	// Clock gives event times; nil means time.Now.
	Clock journal.Clock
	// NewID returns a new run id; nil means a ULID.
	NewID func() string
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// OnAppend, if set, is called after each append this runtime makes
	// (creating, executing, resolving approvals, canceling) with the
	// stored events and the time the append took. It runs on the
	// appending goroutine, with the run's executor lock held: it must
	// return quickly (telemetry hands the events to a queue).
	OnAppend func(events []journal.Event, took time.Duration)
}

// NewRuntime returns a runtime that journals to store.
func NewRuntime(store journal.Store, opts *RuntimeOptions) *Runtime {
	rt := &Runtime{store: store, clock: time.Now, newID: func() string { return strings.ToLower(ulid.Make().String()) }, logger: slog.New(slog.DiscardHandler)}
	if opts != nil {
		if opts.Clock != nil {
			rt.clock = opts.Clock
		}
		if opts.NewID != nil {
			rt.newID = opts.NewID
		}
		if opts.Logger != nil {
			rt.logger = opts.Logger
		}
		rt.onAppend = opts.OnAppend
	}
	return rt
}

// Store returns the runtime's journal.
func (rt *Runtime) Store() journal.Store { return rt.store }

// Create journals a new run and returns its id. It does not execute it;
// call [Runtime.Execute].
func (rt *Runtime) Create(ctx context.Context, c *RunCreated) (string, error) {
	return rt.CreateAs(ctx, rt.newID(), c)
}

// CreateAs is [Runtime.Create] with the run's id chosen by the caller,
// so that a creation retried after a crash cannot make a second run: an
// id that has events already returns [ErrRunExists] and appends nothing.
func (rt *Runtime) CreateAs(ctx context.Context, id string, c *RunCreated) (string, error) {
	if strings.TrimSpace(c.Task) == "" {
		return "", errors.New("agent: create run: empty task")
	}
	if id == "" || journal.IsSystem(id) {
		return "", fmt.Errorf("agent: create run: bad run id %q", id)
	}
	if _, err := rt.append(ctx, id, 0, journal.Draft{Type: journal.RunCreated, Time: rt.clock(), Payload: marshal(c)}); err != nil {
		if errors.Is(err, journal.ErrConflict) {
			return "", fmt.Errorf("agent: create run %s: %w", id, ErrRunExists)
		}
		return "", fmt.Errorf("agent: create run: %w", err)
	}
	return id, nil
}

// append appends to the store and tells OnAppend.
func (rt *Runtime) append(ctx context.Context, runID string, after int64, drafts ...journal.Draft) ([]journal.Event, error) {
	return rt.appendAs(ctx, runID, after, false, drafts...)
}

// appendAs is append, through the store's [journal.Deferrer] when
// deferred and the store has one.
func (rt *Runtime) appendAs(ctx context.Context, runID string, after int64, deferred bool, drafts ...journal.Draft) ([]journal.Event, error) {
	app := rt.store.Append
	if d, ok := rt.store.(journal.Deferrer); ok && deferred {
		app = d.AppendDeferred
	}
	if rt.onAppend == nil {
		return app(ctx, runID, after, drafts...)
	}
	start := time.Now()
	evs, err := app(ctx, runID, after, drafts...)
	if err == nil {
		rt.onAppend(evs, time.Since(start))
	}
	return evs, err
}

// Load reads, verifies and folds a run's journal.
func (rt *Runtime) Load(ctx context.Context, runID string) (*State, []journal.Event, error) {
	events, err := rt.store.Read(ctx, runID, 1)
	if err != nil {
		return nil, nil, err
	}
	if err := journal.Verify(runID, events); err != nil {
		return nil, events, err
	}
	if err := journal.CheckHead(ctx, rt.store, runID, events); err != nil {
		return nil, events, err
	}
	st, err := Fold(runID, events)
	if err != nil {
		return nil, events, err
	}
	return st, events, nil
}

// loadFrom is [Runtime.Load] that starts from a checkpoint when it fits
// the journal (it then returns only the events after the checkpoint), and
// also returns the hash of the newest event.
func (rt *Runtime) loadFrom(ctx context.Context, runID string, from *Checkpoint) (*State, []journal.Event, string, error) {
	if from != nil && from.State != nil && from.State.RunID == runID && from.State.LastSeq > 0 && from.Hash != "" {
		seq := from.State.LastSeq
		tail, err := rt.store.Read(ctx, runID, seq+1)
		if err != nil {
			return nil, nil, "", err
		}
		if journal.VerifyFrom(runID, from.Hash, seq+1, tail) == nil {
			last := journal.Event{RunID: runID, Seq: seq, Hash: from.Hash}
			if n := len(tail); n > 0 {
				last = tail[n-1]
			}
			if err := journal.CheckHead(ctx, rt.store, runID, []journal.Event{last}); err != nil {
				return nil, nil, "", err
			}
			st := from.State
			for i := range tail {
				if err := st.Apply(&tail[i]); err != nil {
					return nil, nil, "", err
				}
			}
			return st, tail, last.Hash, nil
		}
		// Not this journal's events after the checkpoint: load it whole,
		// which reports what is wrong with it, if anything.
	}
	st, events, err := rt.Load(ctx, runID)
	if err != nil {
		return nil, nil, "", err
	}
	return st, events, events[len(events)-1].Hash, nil
}

// Wiring is the live parts of a run: what cannot be stored in the
// journal (a model client, the tools, the sandbox behind them, hooks).
// A [WireFunc] builds it from the run's run.created; every execution of
// the run in a process is given one ([ExecParams.Wiring]).
type Wiring struct {
	// Model answers model calls; required.
	Model model.Model
	// ModelName is recorded in run.resumed (the spec string).
	ModelName string
	// Price returns the dollar cost of one call's usage; nil means 0.
	Price func(u model.Usage) float64
	// Tools holds the run's tools; required.
	Tools *tool.Registry
	// Env is passed to every tool call; required (Workspace non-nil).
	Env *tool.Env
	// Policy decides each valid call of a run created without a policy
	// of its own (RunCreated.Policy, which always wins); nil means
	// [policy.AllowAll].
	Policy policy.Policy
	// Recorder, if set, is bound to this execution while it runs, so that
	// code outside the loop can journal events of the run.
	Recorder *Recorder
	// Principals, if set, is asked before every gate decision and tool
	// run whether the run's principal may still act; a revoked principal
	// pauses the run with reason "revoked" (identity.Directory.Check).
	Principals policy.PrincipalCheck
	// Trace, if set, gives the context of each model call and tool run
	// (telemetry puts the operation's trace context in it, so that the
	// provider request, shell commands and HTTP calls carry a W3C
	// traceparent of the run's trace).
	Trace func(ctx context.Context, op Operation) context.Context
	// Checkpoint, if set, snapshots the workspace's files (a store
	// outside the workspace; internal/checkpoint): Execute calls it before its
	// first step and after each batch of tool calls that may write (not
	// only read-only tools), the setup script and
	// the repair of interrupted calls, with the run's newest checkpoint
	// (nil before the first). It returns nil when the files are those of
	// prev; else the payload is journaled. A failed snapshot is logged
	// and the run goes on without it.
	Checkpoint func(ctx context.Context, runID string, prev *Snapshot) (*WorkspaceCheckpoint, error)
	// MemoryWatch, if set, is called where the workspace is checkpointed
	// (whether or not Checkpoint is set) and when the execution ends,
	// with what first brought untrusted input into the run ("" when
	// nothing did): it notes which memory files (AGENTS.md, KEEL.md) the
	// run changed since the previous call, so that later runs load them
	// as untrusted when this run had read untrusted input (or another
	// person created it). An error is logged and the run goes on.
	MemoryWatch func(runID, untrusted string) error
	// Secrets are the values the run holds that must not leave it (the
	// sandbox's secret variables, connectors' tokens): the gate tells the
	// policy which a call carries ([policy.Flow]) and results are
	// stripped of them before anything sees them.
	Secrets []Secret
	// Team, if set, starts and follows the run's children (spawn_agent,
	// wait_agents); nil: those calls get an error result.
	Team Launcher
	// CodeFiles, if set, keeps the digests of the workspace files Keel
	// last started code from in the run's workspace (in this run or an
	// earlier one): the setup script does not run when files it runs
	// changed since (setup.go). nil: the setup is not compared.
	CodeFiles *codefiles.Store
}

// WireFunc builds the live parts of one execution of the run that c
// describes: model client, tools, sandbox, policy. The returned Closer,
// if not nil, is closed when the execution ends (it stops the sandbox
// and the run's MCP servers). keel run, the team server's pool and the
// cluster's workers all take one.
type WireFunc func(ctx context.Context, c *RunCreated) (*Wiring, io.Closer, error)

// ExecParams are one execution of a run: its [Wiring] and what this
// execution asks for (a person's message and changes, how to wait for
// approvals, a driver's hooks).
type ExecParams struct {
	Wiring
	// Concurrency bounds tool calls of one turn that run at once; 0
	// means the run's Settings.Concurrency.
	Concurrency int
	// MaxOutputTokens is passed to the model; 0 means the run's
	// Settings.MaxOutputTokens.
	MaxOutputTokens int
	// OnEvent, if set, is called with each event after it is appended,
	// in journal order, never concurrently.
	OnEvent func(journal.Event)
	// Message, if non-empty, is a person's message added to the
	// conversation before execution continues (for example "continue").
	// It is never dropped: it is journaled (with run.resumed, in one
	// append) before anything else happens; if calls of the newest turn
	// still wait for results (a run killed mid-turn, or paused for an
	// approval), the model reads it right after those results; a
	// completed run continues with it as a follow-up (run.resumed with
	// FollowUp). Every later request carries it verbatim, like the task,
	// also after compaction (docs/context.md).
	Message string
	// By and Token, if set, name the person who asked for this execution
	// and the id of their API token (the team server): they are recorded
	// in run.resumed and in the user.message of Message.
	By, Token string
	// Limits, when set on a resume, replace the run's limits from here on
	// (journaled in run.resumed).
	Limits *Limits
	// Settings, when set on a resume, replace the run's execution
	// settings from here on (journaled in run.resumed); the caller built
	// the tools and the model client with them.
	Settings *Settings
	// ContextWindow, when positive, replaces the run's context window
	// (tokens) from this execution on; it is journaled in run.resumed.
	ContextWindow int
	// Handoff continues a resumed run in a fresh context: its turns are
	// replaced by a summary, the plan and the workspace notes before
	// anything else happens (docs/context.md).
	Handoff bool
	// Wait keeps Execute running when the run waits for an approval: it
	// follows the journal until every waiting call is decided (by any
	// process sharing the journal) or its deadline passes, then
	// continues. Without Wait, Execute returns the paused run at once.
	// Canceling ctx while waiting leaves the run paused.
	Wait bool
	// OnWait, if set, is called with the pending approvals when Execute
	// starts waiting (with Wait).
	OnWait func([]PendingApproval)
	// IfLastSeq, when positive, makes Execute continue the run only if
	// its newest event is still event IfLastSeq, and return [ErrRunBusy]
	// otherwise: a process that recorded a decision continues the run
	// only if no other process (one waiting for that decision) already
	// did.
	IfLastSeq int64
	// Yield, if set, is asked before each action of the step function
	// whether to stop here: returning true ends Execute with the run
	// still running (Outcome.Status running) and the action not taken, so
	// that a driver can perform a run's actions one batch at a time (a
	// Temporal workflow whose activities each take the next action).
	Yield func(a Action) bool
	// Continue marks an Execute that continues a running run right after
	// the previous Execute yielded (the same driver, no crash between):
	// it journals no run.resumed. A run that is not running (paused,
	// ended) is resumed as usual.
	Continue bool
	// From, if set, is where the previous Execute of this run in this
	// process left it ([Outcome.Checkpoint]): Execute then reads,
	// verifies and folds only the events appended after it (normally
	// none) instead of the whole journal, and checks the run's head
	// against the store's index as a whole load does. A driver that
	// executes a run one batch at a time (Yield) thus reads each event
	// once instead of once per batch. Execute takes the State over (it
	// changes it as the run goes on); a From that does not fit the
	// journal (another run, a hash the journal does not hold) is ignored
	// and the journal is loaded whole.
	From *Checkpoint
	// PauseForChildren makes a team call (spawn_agent, wait_agents,
	// handoff) whose children have not ended pause the run (run.paused,
	// reason [ReasonChildren]) instead of waiting in this execution: the
	// call stays open and runs again when the run is resumed, delivering
	// the children that ended by then. A driver whose executions hold a
	// scarce slot (a cluster worker's) sets it and resumes the run when a
	// child ends, so that a waiting parent holds no slot.
	PauseForChildren bool
}

// Checkpoint is a run folded up to its event State.LastSeq, whose hash
// is Hash.
type Checkpoint struct {
	State *State
	Hash  string
}

// Outcome is where an execution stopped.
type Outcome struct {
	Status journal.Status
	// End is the terminal or pause payload (nil if the run waits for an
	// approval without a pause event).
	End   *RunEnded
	State *State
	// Checkpoint is State with the hash of its newest event: the next
	// Execute of the run may start from it ([ExecParams.From]).
	Checkpoint *Checkpoint
}

// Execute runs the run until it completes, fails, is canceled or pauses.
// It verifies and folds the journal first, so it also resumes a run after
// a crash, a pause or a cancel: interrupted tool calls are repaired as
// the side-effect contract says (docs/architecture.md, "Contract — side
// effects"). Cancelling ctx with cause [ErrUserCanceled] (or no cause)
// ends the run canceled; [ErrShutdown]
// pauses it; [ErrTimeLimit] (also set by Limits.Timeout) fails it. Every
// tool call gets a result in each case.
//
// Errors are for the runtime (journal failures, a corrupt journal,
// [ErrRunBusy], [ErrRunCompleted]); a failed run is an Outcome.
func (rt *Runtime) Execute(ctx context.Context, runID string, p *ExecParams) (*Outcome, error) {
	if p == nil || p.Model == nil || p.Tools == nil || p.Env == nil || p.Env.Workspace == nil {
		return nil, errors.New("agent: execute: ExecParams needs Model, Tools and Env with a Workspace")
	}
	// The lock and the load ignore ctx's end, as appends do: a stop that
	// comes before or while the execution starts (a Ctrl-C while the
	// sandbox started) is recorded by the loop's first step, instead of
	// failing the execution with the run left as it was.
	lctx := context.WithoutCancel(ctx)
	if l, ok := rt.store.(journal.Locker); ok {
		// One executor per run: a second one (a resume of a run that is in
		// fact still running) must not declare live calls interrupted.
		unlock, err := l.Lock(lctx, runID)
		if err != nil {
			if errors.Is(err, journal.ErrLocked) {
				return nil, fmt.Errorf("agent: execute run %s: %w: %v", runID, ErrRunBusy, err)
			}
			return nil, fmt.Errorf("agent: execute run %s: %w", runID, err)
		}
		defer unlock()
	}
	from := p.From
	if p.IfLastSeq > 0 {
		from = nil // onlyAnswers needs the events after IfLastSeq
	}
	st, evs, head, err := rt.loadFrom(lctx, runID, from)
	if err != nil {
		return nil, fmt.Errorf("agent: execute run %s: %w", runID, err)
	}
	// A run that moved on after IfLastSeq was continued by another
	// process, also when that process completed it; answers to input
	// requests are appended by people, not executions.
	if p.IfLastSeq > 0 && st.LastSeq != p.IfLastSeq && !onlyAnswers(evs, p.IfLastSeq) {
		return nil, fmt.Errorf("agent: execute run %s: %w (it moved on after event %d)", runID, ErrRunBusy, p.IfLastSeq)
	}
	followUp := st.Status == journal.StatusCompleted
	if followUp && p.Message == "" {
		return nil, fmt.Errorf("agent: execute run %s: %w", runID, ErrRunCompleted)
	}
	if err := childEnded(st); err != nil {
		return nil, fmt.Errorf("agent: execute run %s: %w", runID, err)
	}
	x := &executor{rt: rt, p: p, st: st, runID: runID, head: head, secrets: newSecretScanner(p.Secrets, st.Created.SecretEnv)}
	message := p.Message
	if p.Recorder != nil {
		p.Recorder.bind(x)
		defer p.Recorder.bind(nil)
	}
	if x.p.Policy == nil {
		x.p.Policy = policy.AllowAll
	}
	settings := p.Settings
	if settings != nil && *settings == st.Settings {
		settings = nil // unchanged: nothing to journal
	}
	// A run's first execution journals nothing of its own, unless it is
	// given limits or settings other than run.created's (a queued run
	// started by keel runs resume --max-steps N): those are journaled as
	// a resume's are, so that they apply and a later fold sees them.
	start := st.LastType == journal.RunCreated
	if !start && !(p.Continue && st.Status == journal.StatusRunning) || start && (p.Limits != nil || settings != nil) {
		var interrupted []string
		if t := st.LastTurn(); t != nil {
			for _, c := range t.Calls {
				if c.Running() {
					interrupted = append(interrupted, c.ID)
				}
			}
		}
		resumed := &RunResumed{Interrupted: interrupted, Model: p.ModelName, ContextWindow: p.ContextWindow, Handoff: p.Handoff, Limits: p.Limits,
			Settings: settings, FollowUp: followUp, By: p.By, Token: p.Token}
		types, payloads := []journal.Type{journal.RunResumed}, []any{resumed}
		if p.Message != "" && (!p.Handoff || followUp) {
			// The person's message is journaled with the resume, in one
			// append: a crash cannot separate them.
			types = append(types, journal.UserMessage)
			payloads = append(payloads, &UserMessage{Content: p.Message, By: p.By, Token: p.Token})
			message = ""
		}
		if err := x.appendMany(ctx, types, payloads); err != nil {
			return nil, err
		}
		if err := x.handoffNow(ctx); err != nil {
			return nil, err
		}
	}
	// The run's settings (as this execution may just have replaced them)
	// apply where the caller left a parameter zero.
	if x.p.Concurrency <= 0 {
		x.p.Concurrency = max(1, x.st.Settings.Concurrency)
	}
	if x.p.MaxOutputTokens <= 0 {
		x.p.MaxOutputTokens = x.st.Settings.MaxOutputTokens
	}
	if message != "" {
		// Never dropped: when calls of the newest turn still wait for
		// results (a run killed mid-turn, or waiting for an approval),
		// the message is journaled now and the model reads it after
		// those results.
		if err := x.append(ctx, journal.UserMessage, &UserMessage{Content: message, By: p.By, Token: p.Token}); err != nil {
			return nil, err
		}
	}
	if p.Recorder != nil {
		// What the sandbox found while it started (before this run was
		// created or resumed), journaled before any step.
		if err := p.Recorder.flush(ctx, x); err != nil {
			return nil, err
		}
	}
	if err := x.checkpoint(ctx); err != nil {
		return nil, err
	}
	if to := time.Duration(st.Limits.Timeout); to > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, to, ErrTimeLimit)
		defer cancel()
	}
	out, err := x.loop(ctx)
	if err == nil && x.snapping.Load() {
		// An execution that ends leaves no snapshot unjournaled.
		if err := x.settle(ctx); err != nil {
			return nil, err
		}
		out = x.outcome()
	}
	if serr := x.sync(ctx); err == nil && serr != nil {
		return nil, serr
	}
	return out, err
}

// executor is one execution of one run. The lock order is: mu, then the
// store's own locks.
type executor struct {
	rt    *Runtime
	p     *ExecParams
	runID string

	mu sync.Mutex // guards st, head and appends
	st *State
	// head is the hash of st's newest event.
	head string
	gs   gateState // gate.go
	// secrets finds and hides the run's secrets (flow.go); nil: none.
	secrets *secretScanner
	// teamMu makes a budget check and the append that spends it one
	// step: child.spawned reservations, child.delivered, tool starts
	// under a tool-call limit (team_exec.go).
	teamMu sync.Mutex
	// asked counts the questions asked per call attempt (input.go).
	asked map[string]int
	// snap is the workspace snapshot in flight, if any; snapping is set
	// while it is (checkpoint).
	snapMu   sync.Mutex
	snap     chan snapResult
	snapPrev *Snapshot
	snapping atomic.Bool
	// unsynced is set while the newest append was deferred (guarded by
	// mu; see deferrable).
	unsynced bool
	// valid holds the arguments the gate validated for the calls of the
	// newest gated turn, so that running them does not parse and
	// validate them again (guarded by mu).
	valid map[string]validArgs
}

// validArgs is a call's arguments as the gate validated them: args, the
// compacted JSON of raw, the arguments the model sent to tool name.
type validArgs struct {
	name, raw string
	args      json.RawMessage
}

// append journals one event (ignoring ctx cancellation: a stop must still
// be recorded) and folds it.
func (x *executor) append(ctx context.Context, t journal.Type, payload any) error {
	return x.appendMany(ctx, []journal.Type{t}, []any{payload})
}

func (x *executor) appendMany(ctx context.Context, types []journal.Type, payloads []any) error {
	if x.snapping.Load() && !syntheticResults(types, payloads) {
		// The snapshot taken before this event is journaled before it.
		if err := x.settle(ctx); err != nil {
			return err
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	now := x.rt.clock()
	drafts := make([]journal.Draft, len(types))
	for i := range types {
		// No secret value is journaled: placeholders name them (seal.go).
		drafts[i] = journal.Draft{Type: types[i], Time: now, Payload: x.secrets.seal(types[i], marshal(payloads[i]))}
	}
	deferred := x.deferrable(types, payloads)
	evs, err := x.rt.appendAs(context.WithoutCancel(ctx), x.runID, x.st.LastSeq, deferred, drafts...)
	for try := 0; errors.Is(err, journal.ErrConflict) && try < 8; try++ {
		// A person's answer to an input request is appended by another
		// process while a call waits: fold it and append after it.
		if !x.foldForeign(ctx) {
			break
		}
		evs, err = x.rt.appendAs(context.WithoutCancel(ctx), x.runID, x.st.LastSeq, deferred, drafts...)
	}
	if err != nil {
		if errors.Is(err, journal.ErrConflict) {
			return fmt.Errorf("agent: run %s: %w (%v)", x.runID, ErrRunBusy, err)
		}
		return fmt.Errorf("agent: run %s: append %s: %w", x.runID, types[0], err)
	}
	x.unsynced = deferred
	for i := range evs {
		if err := x.st.Apply(&evs[i]); err != nil {
			return fmt.Errorf("agent: run %s: fold own event: %w", x.runID, err)
		}
		x.head = evs[i].Hash
		if x.p.OnEvent != nil {
			x.p.OnEvent(evs[i])
		}
	}
	return nil
}

// deferrable reports whether an append of types may be deferred: made
// durable by a later append of this execution before anything acts on
// it (docs/architecture.md, "Durable points"). Those are the model's
// response, the gate's decisions and a workspace checkpoint, which the
// tool starts of their turn follow (each start is durable before its
// tool runs), or the run's end; and a result while another call of its
// turn has none, whose start or result follows; and a resume's
// run.resumed without a person's message (a message is journaled in
// the same append, and that append is durable), which only records
// that an execution starts again (and the limits and settings it
// changed): the first append of the execution that is durable makes it
// durable too. A result that completes
// its turn is durable before the model is asked again. Whatever ends an
// execution is made durable before Execute returns ([executor.sync]).
// Callers hold x.mu.
func (x *executor) deferrable(types []journal.Type, payloads []any) bool {
	if _, ok := x.rt.store.(journal.Deferrer); !ok {
		return false
	}
	var results []string
	for i, t := range types {
		switch t {
		case journal.ModelResponded, journal.GateDecided, journal.WorkspaceCheckpoint, journal.RunResumed:
		case journal.ToolFinished:
			f, ok := payloads[i].(*ToolFinished)
			if !ok {
				return false
			}
			results = append(results, f.CallID)
		default:
			return false
		}
	}
	if results == nil {
		return true
	}
	turn := x.st.LastTurn()
	if turn == nil {
		return false
	}
	for _, c := range turn.Calls {
		if c.Pending() && !slices.Contains(results, c.ID) {
			return true
		}
	}
	return false
}

// sync makes the execution's deferred appends durable, if there are
// any: before Execute returns, whatever the caller does next.
func (x *executor) sync(ctx context.Context) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.unsynced {
		return nil
	}
	d, ok := x.rt.store.(journal.Deferrer)
	if !ok {
		return nil
	}
	if err := d.Sync(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("agent: run %s: sync: %w", x.runID, err)
	}
	x.unsynced = false
	return nil
}

// onlyAnswers reports whether every event of evs after seq is an answer
// to an input request (and there is one).
func onlyAnswers(evs []journal.Event, seq int64) bool {
	n := 0
	for _, e := range evs {
		if e.Seq <= seq {
			continue
		}
		if e.Type != journal.InputAnswered {
			return false
		}
		n++
	}
	return n > 0
}

// foldForeign folds the events appended after x.st by another process
// if each is one a running execution accepts from outside (an answer to
// an input request); it reports whether it folded any. Callers hold x.mu.
func (x *executor) foldForeign(ctx context.Context) bool {
	evs, err := x.rt.store.Read(context.WithoutCancel(ctx), x.runID, x.st.LastSeq+1)
	if err != nil || len(evs) == 0 {
		return false
	}
	for _, e := range evs {
		if e.Type != journal.InputAnswered {
			return false
		}
	}
	for i := range evs {
		if err := x.st.Apply(&evs[i]); err != nil {
			return false
		}
		x.head = evs[i].Hash
		if x.p.OnEvent != nil {
			x.p.OnEvent(evs[i])
		}
	}
	return true
}

func (x *executor) loop(ctx context.Context) (*Outcome, error) {
	for {
		if err := ctx.Err(); err != nil {
			if err := x.settle(ctx); err != nil {
				return nil, err
			}
			if err := x.stop(ctx); err != nil {
				return nil, err
			}
			return x.outcome(), nil
		}
		a := Step(x.st)
		if x.snapping.Load() && a.Kind != ActCallModel && a.Kind != ActRecover {
			// Only a model call, and the repair of interrupted calls
			// up to running tools, go on while the workspace's
			// snapshot is taken: what could change the files waits
			// for it, and so does the end of this execution.
			if err := x.settle(ctx); err != nil {
				return nil, err
			}
			continue
		}
		x.rt.logger.Debug("step", "run_id", x.runID, "action", a.Kind.String(), "calls", a.Calls)
		if x.p.Yield != nil && a.Kind != ActNone && x.p.Yield(a) {
			if err := x.settle(ctx); err != nil {
				return nil, err
			}
			return x.outcome(), nil
		}
		if paused, err := x.checkPrincipal(ctx, a); err != nil || paused {
			if err != nil {
				if ctx.Err() != nil {
					// Stopped while the check read the journal (with ctx,
					// so the read failed): not a runtime failure; nothing
					// runs, and the top of the loop records the stop.
					continue
				}
				return nil, err
			}
			return x.outcome(), nil
		}
		var err error
		switch a.Kind {
		case ActNone:
			return x.outcome(), nil
		case ActWait:
			var done bool
			if done, err = x.wait(ctx, a.Calls); err == nil && done {
				return x.outcome(), nil
			}
			if err == nil {
				// A person may have changed files while the calls
				// waited: the approved calls run after a checkpoint
				// (journaled only if the files changed since the
				// newest), so a rewind can bring those changes back.
				err = x.checkpoint(ctx)
			}
		case ActSetup:
			if err = x.setup(ctx); err == nil {
				err = x.checkpoint(ctx)
			}
		case ActRecover:
			if err = x.recover(ctx, a.Calls); err == nil {
				err = x.checkpoint(ctx)
			}
		case ActGate:
			err = x.gate(ctx, a.Calls)
		case ActReject:
			err = x.reject(ctx, a.Calls)
		case ActAsk:
			err = x.ask(ctx, a.Calls)
		case ActRunTools:
			if err = x.runTools(ctx, a.Calls); err == nil && x.mayWrite(a.Calls) {
				err = x.checkpoint(ctx)
			}
		case ActCallModel:
			err = x.callModel(ctx)
		case ActFinish:
			err = x.finish(ctx, a.End)
		case ActCompact:
			err = x.compact(ctx, a.Compact)
		case ActNudge:
			err = x.append(ctx, journal.UserMessage, a.Nudge)
		case ActCut:
			err = x.cut(ctx, a.Calls)
		}
		if errors.Is(err, errAwaitChildren) {
			// A team call waits for children that have not ended: the
			// run pauses, giving its worker back ([ReasonChildren]).
			if err = x.pauseForChildren(ctx); err == nil {
				return x.outcome(), nil
			}
		}
		if err != nil {
			return nil, err
		}
	}
}

// mayWrite reports whether any of calls is of a tool that may change
// files (not read-only): a batch of reads needs no snapshot.
func (x *executor) mayWrite(ids []string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, id := range ids {
		c := x.st.call(id)
		if c == nil {
			return true
		}
		if t := x.registry(c.Name).Tool(c.Name); t == nil || t.Effect != tool.ReadOnly {
			return true
		}
	}
	return false
}

// snapResult is what a snapshot in flight gave.
type snapResult struct {
	cp  *WorkspaceCheckpoint
	err error
}

// checkpoint starts a snapshot of the workspace if ExecParams.Checkpoint
// is set; settle journals it (if the files changed since the run's
// newest one). The snapshot runs while the model is asked (or
// interrupted calls are closed), and is journaled before the next event
// (but the results of calls that did not run), before anything that
// could change the files and before the execution ends; so its place
// in the journal is where the files were so. Only a journal failure is
// an error.
func (x *executor) checkpoint(ctx context.Context) error {
	x.watchMemory()
	if x.p.Checkpoint == nil || ctx.Err() != nil {
		return nil
	}
	if err := x.settle(ctx); err != nil {
		return err
	}
	x.mu.Lock()
	prev := x.st.Checkpoint
	x.mu.Unlock()
	ch := make(chan snapResult, 1)
	go func() {
		cp, err := x.p.Checkpoint(ctx, x.runID, prev)
		ch <- snapResult{cp, err}
	}()
	x.snapMu.Lock()
	x.snap, x.snapPrev = ch, prev
	x.snapping.Store(true)
	x.snapMu.Unlock()
	return nil
}

// watchMemory calls ExecParams.MemoryWatch with the run's untrusted
// input so far.
func (x *executor) watchMemory() {
	if x.p.MemoryWatch == nil {
		return
	}
	x.mu.Lock()
	why := x.st.Flow.Untrusted.String()
	x.mu.Unlock()
	if err := x.p.MemoryWatch(x.runID, why); err != nil {
		x.rt.logger.Warn("noting the writers of memory files failed; the run goes on", "run_id", x.runID, "error", err)
	}
}

// settle waits for the snapshot in flight, if any, and journals it.
func (x *executor) settle(ctx context.Context) error {
	x.snapMu.Lock()
	defer x.snapMu.Unlock()
	if x.snap == nil {
		return nil
	}
	r, prev := <-x.snap, x.snapPrev
	x.snap, x.snapPrev = nil, nil
	x.snapping.Store(false)
	if r.err != nil {
		x.rt.logger.Warn("workspace checkpoint failed; the run goes on without it", "run_id", x.runID, "error", r.err)
		return nil
	}
	x.mu.Lock()
	open := x.st.Restoring != nil
	x.mu.Unlock()
	cp := r.cp
	if open && prev != nil && (cp == nil || cp.Tree == prev.Tree) {
		// A rewind's intent with no outcome (cut short): the files are
		// still the newest checkpoint's, which is journaled again to
		// say the rewind did not finish.
		cp = &WorkspaceCheckpoint{Tree: prev.Tree, Commit: prev.Commit, Store: prev.Store}
	}
	if cp == nil || (!open && prev != nil && cp.Tree == prev.Tree) {
		return nil
	}
	x.mu.Lock()
	typ, v := x.st.CloseRestoring(cp)
	x.mu.Unlock()
	return x.append(ctx, typ, v)
}

// syntheticResults reports whether an append is only results of calls
// that did not run (closeCalls): they change no file, so a snapshot in
// flight may be journaled after them.
func syntheticResults(types []journal.Type, payloads []any) bool {
	for i, t := range types {
		f, ok := payloads[i].(*ToolFinished)
		if t != journal.ToolFinished || !ok || !f.Synthetic {
			return false
		}
	}
	return len(types) > 0
}

func (x *executor) outcome() *Outcome {
	// A memory file written since the last checkpoint (by a process the
	// run left behind, such as its Python kernel) is noted too.
	x.watchMemory()
	return &Outcome{Status: x.st.Status, End: x.st.Ended, State: x.st, Checkpoint: &Checkpoint{State: x.st, Hash: x.head}}
}

// stop records why ctx ended: every call of the open turn gets a result,
// then the run ends canceled, failed (time limit) or paused (shutdown).
func (x *executor) stop(ctx context.Context) error {
	cause := context.Cause(ctx)
	if x.st.Status.Terminal() {
		return nil
	}
	reason, typ, msg := ReasonUser, journal.RunCanceled, "canceled by user"
	end := &RunEnded{}
	var by *canceledBy
	if errors.As(cause, &by) && by.by != "" {
		msg = "canceled by " + by.by
		end.By, end.Token = by.by, by.token
	}
	switch {
	case errors.Is(cause, ErrTimeLimit):
		reason, typ, msg = ReasonTimeout, journal.RunFailed, fmt.Sprintf("time limit reached (%s)", time.Duration(x.st.Limits.Timeout))
	case errors.Is(cause, ErrParentEnded):
		reason, msg = ReasonParentEnded, "its parent ended without waiting for its result"
	case errors.Is(cause, ErrShutdown):
		reason, typ, msg = ReasonShutdown, journal.RunPaused, "the runtime shut down; resume the run to continue"
	case errors.Is(cause, ErrInterrupted):
		if err := x.closeOpenCalls(ctx, "interrupted by the user"); err != nil {
			return err
		}
		end.Reason, end.Message = ReasonInterrupted, "interrupted by the user"
		return x.appendMany(ctx, []journal.Type{journal.UserMessage, journal.RunPaused}, []any{
			&UserMessage{Source: InterruptSource, Content: InterruptNote}, end,
		})
	}
	if typ != journal.RunPaused {
		if err := x.closeOpenCalls(ctx, msg); err != nil {
			return err
		}
		if err := x.stopChildren(ctx, cause); err != nil {
			return err
		}
	}
	end.Reason, end.Message = reason, msg
	return x.append(ctx, typ, end)
}
