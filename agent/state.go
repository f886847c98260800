package agent

import (
	"fmt"
	"time"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
)

// State is a run folded from its journal. The step function reads it;
// only [State.Apply] changes it.
type State struct {
	RunID   string
	Created *RunCreated
	// LastSeq and LastType describe the newest folded event.
	LastSeq  int64
	LastType journal.Type
	// Status is the run's lifecycle state; Ended holds the payload of the
	// terminal or pause event that set it, if any.
	Status journal.Status
	Ended  *RunEnded
	// Setup is the setup script's outcome, nil until it ran.
	Setup *SetupFinished
	// Messages is the conversation after the system prompt, in order:
	// the task, assistant turns, and user messages. Tool results live in
	// the calls of each turn (see [State.Conversation]).
	Messages []model.Message
	// Turns indexes the assistant messages with tool calls.
	Turns []*Turn
	// Limits are the run's limits: those of run.created, or of the newest
	// run.resumed that replaced them.
	Limits Limits
	// Settings are the run's execution settings: those of run.created
	// ([DefaultSettings] when it has none), or of the newest run.resumed
	// that replaced them.
	Settings Settings
	// Steps counts model responses; Usage and Cost sum them.
	Steps int
	Usage model.Usage
	Cost  float64
	// InvalidStreak counts consecutive model turns whose tool calls were
	// all rejected before running (malformed or unknown).
	InvalidStreak int
	// ModelFailures counts model.failed events since the last response.
	ModelFailures int
	// ModelCalls counts model.responded and model.failed events (not
	// compaction summaries): the ordinal of a run's model calls.
	ModelCalls int
	// Grants are the approvals remembered in this run (approval.resolved
	// with remember), in order; the gate applies them to later calls.
	Grants []policy.Grant
	// FollowUps counts the times the run continued after it completed
	// (a person's message to a completed run).
	FollowUps int
	// Checkpoint is the run's newest workspace snapshot (of a
	// workspace.checkpoint or workspace.restored event), nil before the
	// first.
	Checkpoint *Snapshot
	// Restoring is the rewind whose intent was journaled
	// (workspace.restoring) and whose outcome was not: no snapshot of
	// the files followed it (a crash or a failed write came between);
	// nil otherwise. [State.CloseRestoring] says what records it.
	Restoring *Restoring
	// Flow holds the events that first brought untrusted input and
	// private or secret data into the run (flow.go).
	Flow Flow
	// Inputs are the questions MCP servers asked a person during calls
	// (input.requested), in order, each with its answer once given.
	Inputs []*Input
	// ToolCalls counts the tool calls started (a re-run of an interrupted
	// call counts once).
	ToolCalls int
	// Children are the child runs the run spawned (child.spawned), in
	// order, each with its delivered result once given (docs/teams.md).
	Children []*Child
	// person indexes, in Messages, the messages a person sent after the
	// task (user.message without a Source): every request shows them
	// verbatim, like the task, also once their turns were compacted.
	person []int
	// estIn and in are the newest response's estimated and reported
	// input tokens (when both are known), to correct the next estimate
	// (beforeCall).
	estIn, in int64
	// followUp is set while the newest event is a follow-up run.resumed.
	followUp bool
	// ctx is the folded context: compactions, plan and loop health
	// (context.go, health.go).
	ctx contextState
}

// Turn is one assistant message that requested tool calls.
type Turn struct {
	// Index is the position of the assistant message in State.Messages.
	Index int
	Calls []*Call
	// sent are the message's calls as requests send them (arguments
	// that are not a JSON object replaced by {}), made once at the fold.
	sent []model.ToolCall
}

// sentCalls returns the calls of m, t's assistant message, as requests
// send them (see [sanitizeCalls]).
func (t *Turn) sentCalls(m *model.Message) []model.ToolCall {
	if t.sent == nil {
		t.sent = sanitizeCalls(m.ToolCalls)
	}
	return t.sent
}

// Call is the state of one tool call.
type Call struct {
	model.ToolCall
	Decision *GateDecided
	Approval *ApprovalRequested
	Resolved *ApprovalResolved
	// Started is the newest start; Attempts counts starts.
	Started  *ToolStarted
	Attempts int
	Finished *ToolFinished
	// approvalSeq and approvalTime locate the approval.requested event.
	approvalSeq  int64
	approvalTime time.Time
	// Auth is the newest authorization wait (auth.required), and
	// AuthResolved its end, if it ended.
	Auth         *AuthRequired
	AuthResolved *AuthResolved
	authSeq      int64
	authTime     time.Time
}

// Pending reports whether c still needs a result.
func (c *Call) Pending() bool { return c.Finished == nil }

// Running reports whether c was started and has no result: after a crash,
// such a call was interrupted.
func (c *Call) Running() bool { return c.Started != nil && c.Finished == nil }

// Fold applies events in order to a new State and returns it. It returns a
// [*journal.CorruptError] when the events do not form a valid run.
func Fold(runID string, events []journal.Event) (*State, error) {
	s := &State{RunID: runID}
	for i := range events {
		if err := s.Apply(&events[i]); err != nil {
			return nil, err
		}
	}
	if s.Created == nil {
		return nil, &journal.CorruptError{RunID: runID, Seq: 1, Reason: "run has no run.created event"}
	}
	return s, nil
}

// LastTurn returns the newest turn with tool calls, or nil. Its calls are
// the only ones that can still lack a result.
func (s *State) LastTurn() *Turn {
	if len(s.Turns) == 0 {
		return nil
	}
	return s.Turns[len(s.Turns)-1]
}

// call returns the call with id in the newest turn that has it.
func (s *State) call(id string) *Call {
	for i := len(s.Turns) - 1; i >= 0; i-- {
		for _, c := range s.Turns[i].Calls {
			if c.ID == id {
				return c
			}
		}
	}
	return nil
}

// Apply folds one event into s. Events must arrive in sequence order.
func (s *State) Apply(e *journal.Event) error {
	bad := func(format string, args ...any) error {
		return &journal.CorruptError{RunID: s.RunID, Seq: e.Seq, Reason: fmt.Sprintf(format, args...)}
	}
	if e.Seq != s.LastSeq+1 {
		return bad("expected event %d, found %d", s.LastSeq+1, e.Seq)
	}
	if s.Created == nil && e.Type != journal.RunCreated {
		return bad("first event is %s, want run.created", e.Type)
	}
	v, err := Decode(e)
	if err != nil {
		return err
	}
	if s.Status == journal.StatusCompleted && !workspaceEvent(e.Type) {
		// A completed run continues only as a follow-up: run.resumed
		// with FollowUp, then the person's message (appended together).
		// Its files may be rewound.
		if r, ok := v.(*RunResumed); !ok || !r.FollowUp {
			return bad("%s after run.completed", e.Type)
		}
	}
	if s.LastType == journal.RunResumed && s.followUp {
		if u, ok := v.(*UserMessage); !ok || u.Source != "" {
			return bad("follow-up run.resumed not followed by a person's user.message")
		}
	}
	switch p := v.(type) {
	case *RunCreated:
		if s.Created != nil {
			return bad("second run.created")
		}
		s.Created = p
		s.foldCreatedFlow(p)
		s.Limits = p.Limits
		s.Settings = DefaultSettings()
		if p.Settings != nil {
			s.Settings = *p.Settings
		}
		s.Status = journal.StatusRunning
		s.Messages = append(s.Messages, model.Message{Role: model.RoleUser, Content: p.Task})
	case *RunResumed:
		s.Status, s.Ended = journal.StatusRunning, nil
		s.followUp = p.FollowUp
		if p.FollowUp {
			s.FollowUps++
		}
		if p.Limits != nil {
			s.Limits = *p.Limits
		}
		if p.Settings != nil {
			s.Settings = *p.Settings
		}
	case *SetupFinished:
		s.Setup = p
	case *ModelResponded:
		s.ModelCalls++
		if t := s.LastTurn(); t != nil {
			for _, c := range t.Calls {
				if c.Pending() {
					return bad("model.responded while call %s has no result", c.ID)
				}
			}
		}
		msg := p.Message
		msg.Role = model.RoleAssistant
		s.Messages = append(s.Messages, msg)
		s.Steps++
		s.Usage = s.Usage.Add(p.Usage)
		s.Cost += p.Cost
		if p.EstimatedInputTokens > 0 && !p.UsageEstimated {
			s.estIn, s.in = p.EstimatedInputTokens, p.Usage.InputTokens
		}
		s.ModelFailures = 0
		if len(msg.ToolCalls) > 0 {
			t := &Turn{Index: len(s.Messages) - 1, sent: sanitizeCalls(msg.ToolCalls)}
			seen := map[string]bool{}
			for _, tc := range msg.ToolCalls {
				if seen[tc.ID] {
					return bad("duplicate tool call id %q in one turn", tc.ID)
				}
				seen[tc.ID] = true
				t.Calls = append(t.Calls, &Call{ToolCall: tc})
			}
			s.Turns = append(s.Turns, t)
		}
	case *ModelFailed:
		s.ModelCalls++
		s.ModelFailures++
	case *GateDecided:
		c := s.call(p.CallID)
		if c == nil {
			return bad("gate.decided for unknown call %q", p.CallID)
		}
		c.Decision = p
	case *ApprovalRequested:
		c := s.call(p.CallID)
		if c == nil {
			return bad("approval.requested for unknown call %q", p.CallID)
		}
		c.Approval = p
		c.approvalSeq, c.approvalTime = e.Seq, e.Time
		s.Status = journal.StatusPaused
	case *ApprovalResolved:
		c := s.call(p.CallID)
		if c == nil || c.Approval == nil {
			return bad("approval.resolved for call %q with no request", p.CallID)
		}
		c.Resolved = p
		s.Grants = append(s.Grants, p.Grants...)
	case *AuthRequired, *AuthResolved:
		if err := s.applyAuth(e, v, bad); err != nil {
			return err
		}
	case *InputRequested, *InputAnswered:
		if err := s.applyInput(e, v, bad); err != nil {
			return err
		}
	case *ChildSpawned, *ChildDelivered:
		if err := s.applyTeam(e.Seq, v, bad); err != nil {
			return err
		}
	case *ToolStarted:
		c := s.call(p.CallID)
		if c == nil {
			return bad("tool.started for unknown call %q", p.CallID)
		}
		if c.Finished != nil {
			return bad("tool.started for finished call %q", p.CallID)
		}
		c.Started = p
		if c.Attempts == 0 {
			s.ToolCalls++
		}
		c.Attempts++
	case *SandboxEgress:
		s.foldEgress(e.Seq, p)
	case *ToolFinished:
		c := s.call(p.CallID)
		if c == nil {
			return bad("tool.finished for unknown call %q", p.CallID)
		}
		if c.Finished != nil {
			return bad("second tool.finished for call %q", p.CallID)
		}
		c.Finished = p
		s.foldResultFlow(e.Seq, c, p)
		if t := s.Turns[len(s.Turns)-1]; t.Index == len(s.Messages)-1 && allDone(t) {
			if allInvalid(t) {
				s.InvalidStreak++
			} else {
				s.InvalidStreak = 0
			}
		}
	case *UserMessage:
		if t := s.LastTurn(); t != nil && p.Source != "" {
			// Keel's own messages come between turns. A person's may
			// arrive while calls of the newest turn wait for results (a
			// resume of a run killed mid-turn or waiting for an
			// approval): the request shows it after those results.
			for _, c := range t.Calls {
				if c.Pending() {
					return bad("user.message while call %s has no result", c.ID)
				}
			}
		}
		if p.Source == "" {
			s.person = append(s.person, len(s.Messages))
		}
		s.Messages = append(s.Messages, model.Message{Role: model.RoleUser, Content: p.Content})
	case *RunEnded:
		s.Ended = p
		s.Status = journal.StatusOf(e.Type)
	case *WorkspaceCheckpoint:
		s.Checkpoint = &Snapshot{Seq: e.Seq, Tree: p.Tree, Commit: p.Commit, Store: p.Store}
		s.Restoring = nil
	case *WorkspaceRestored:
		s.Checkpoint = &Snapshot{Seq: e.Seq, Tree: p.Tree, Commit: p.Commit, Store: p.Store}
		s.Restoring = nil
	case *WorkspaceRestoring:
		s.Restoring = &Restoring{Seq: e.Seq, WorkspaceRestoring: *p}
	}
	if err := s.applyContext(e, v); err != nil {
		return err
	}
	s.applyHealth(v)
	s.LastSeq, s.LastType = e.Seq, e.Type
	return nil
}

// Restoring is an open rewind intent ([State.Restoring]): its
// workspace.restoring event (Seq) and payload.
type Restoring struct {
	Seq int64
	WorkspaceRestoring
}

// Unfinished says, for a person, what an open rewind intent means and
// what to do about it (keel runs show, a resume).
func (r *Restoring) Unfinished(runID string) string {
	return fmt.Sprintf("the rewind of event %d (to event %d) was journaled but not its end: the files may be as before it, partly or wholly rewound; the run's next snapshot (a resume, or keel runs rewind %s --to %d, which finishes it) records which", r.Seq, r.To, runID, r.To)
}

// CloseRestoring returns the event that closes the open rewind intent
// (s.Restoring) once the files are known to be cp (a new snapshot of
// them): the rewind's workspace.restored when cp has the tree the
// rewind wrote (it finished; only its end was not journaled), else cp
// marked as the files of a rewind that did not finish. It returns
// cp's type and cp unchanged when no intent is open, and "" when cp is
// nil.
func (s *State) CloseRestoring(cp *WorkspaceCheckpoint) (journal.Type, any) {
	switch r := s.Restoring; {
	case cp == nil:
		return "", nil
	case r == nil:
		return journal.WorkspaceCheckpoint, cp
	case cp.Tree == r.Tree && cp.Store == r.Store:
		done := WorkspaceRestored(r.WorkspaceRestoring)
		done.Recovered = r.Seq
		return journal.WorkspaceRestored, &done
	default:
		c := *cp
		c.Unfinished = r.Seq
		return journal.WorkspaceCheckpoint, &c
	}
}

// Snapshot is a run's newest workspace snapshot (a checkpoint of its
// files).
type Snapshot struct {
	// Seq is the event that recorded it.
	Seq                 int64
	Tree, Commit, Store string
}

// workspaceEvent reports the event types that record the workspace's
// files, not the conversation.
// workspaceEvent reports the events that may follow run.completed: the
// workspace's files, and what the sandbox saw (an egress decision or a
// quarantine reported after the last step), see [journal.KeepsStatus].
func workspaceEvent(t journal.Type) bool {
	return journal.KeepsStatus(t)
}

func allDone(t *Turn) bool {
	for _, c := range t.Calls {
		if c.Pending() {
			return false
		}
	}
	return true
}

// allInvalid reports whether every call of t was refused by validation.
func allInvalid(t *Turn) bool {
	for _, c := range t.Calls {
		if c.Decision == nil || !c.Decision.Invalid() {
			return false
		}
	}
	return len(t.Calls) > 0
}

// Invalid reports whether the decision rejected a malformed call (bad
// JSON, schema violation or unknown tool) rather than a policy outcome.
func (d *GateDecided) Invalid() bool {
	return d.Effect == policy.Deny && len(d.Policies) == 1 && d.Policies[0] == PolicyValidate
}

// PolicyValidate is the policy id of decisions that reject malformed calls.
const PolicyValidate = "keel.validate"

// PolicyWorkspace is the policy id of decisions that refuse a file
// tool's path the run's workspace refuses ([tool.Workspace.ResolveCall]:
// outside the workspace, protected, hidden by the run's policy).
const PolicyWorkspace = "keel.workspace"

// PolicyCheck is the policy id of decisions that fail a call its tool
// says cannot succeed as things are ([tool.Tool].Check), before a person
// is asked: the call's result is the tool's error, as if it had run.
const PolicyCheck = "keel.check"

// Checked reports whether the decision failed the call on its tool's
// check ([PolicyCheck]) rather than on a policy or a malformed call.
func (d *GateDecided) Checked() bool {
	return d.Effect == policy.Deny && len(d.Policies) == 1 && d.Policies[0] == PolicyCheck
}

// Conversation returns the messages to send to the model after the system
// prompt: each assistant message with tool calls is followed by one tool
// message per call, in call order. Calls without a result (a run that is
// mid-turn) are left out, so callers build requests only when a turn is
// complete. Tool-call arguments that are not a JSON object are replaced by
// "{}" (the error result quotes them), so a malformed call never breaks a
// later request.
func (s *State) Conversation() []model.Message {
	out := make([]model.Message, 0, len(s.Messages)*2)
	ti := 0
	for i, m := range s.Messages {
		if ti < len(s.Turns) && s.Turns[ti].Index == i {
			t := s.Turns[ti]
			ti++
			m.ToolCalls = t.sentCalls(&m)
			out = append(out, m)
			for _, c := range t.Calls {
				if c.Finished == nil {
					continue
				}
				out = append(out, model.Message{Role: model.RoleTool, ToolCallID: c.ID, Content: c.Finished.Content, IsError: c.Finished.IsError})
			}
			continue
		}
		out = append(out, m)
	}
	return out
}
