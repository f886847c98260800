package agent

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool"
)

// ActionKind says what the executor must do next.
type ActionKind int

// Action kinds. Their order here is not their precedence: for a run that
// has not ended, [Step] considers the setup script first, then the calls
// of the last turn (cut, recover, gate, reject, run tools, ask, wait),
// then a nudge or an end for an incomplete or malformed answer, the end
// of the run (answer, completion marker, invalid calls, limits), a
// loop-health nudge or end, compaction, and last a model call.
const (
	// ActNone: nothing to do (the run ended, or waits for a person).
	ActNone ActionKind = iota
	// ActSetup: run the setup script.
	ActSetup
	// ActRecover: Calls were started and never finished (the runtime
	// died): re-run the read-only or idempotent ones, give the others a
	// result saying their outcome is unknown.
	ActRecover
	// ActGate: validate and decide Calls.
	ActGate
	// ActReject: give denied Calls their error result.
	ActReject
	// ActAsk: request approval for Calls and pause.
	ActAsk
	// ActRunTools: run Calls (allowed, not started).
	ActRunTools
	// ActWait: Calls wait for an approval; the run is paused.
	ActWait
	// ActCallModel: ask the model for the next turn.
	ActCallModel
	// ActFinish: end the run as End says.
	ActFinish
	// ActCompact: summarise older turns so that they leave the view, as
	// Compact says (context.go).
	ActCompact
	// ActNudge: add Nudge to the conversation as a user message (loop
	// health, text-action format errors; health.go).
	ActNudge
	// ActCut: give Calls, the calls of a response cut at the output-token
	// limit, a result saying nothing ran ([CutResult]).
	ActCut
)

var actionNames = [...]string{"none", "setup", "recover", "gate", "reject", "ask", "run_tools", "wait", "call_model", "finish", "compact", "nudge", "cut"}

// String returns the action kind's snake_case name.
func (k ActionKind) String() string {
	if int(k) < len(actionNames) {
		return actionNames[k]
	}
	return fmt.Sprintf("action(%d)", int(k))
}

// Action is the step function's decision.
type Action struct {
	Kind ActionKind
	// Calls are tool call ids, in the order the model emitted them.
	Calls []string
	// End is set for ActFinish.
	End *End
	// Compact is set for ActCompact.
	Compact *Compaction
	// Nudge is set for ActNudge.
	Nudge *UserMessage
}

// End describes how a run ends.
type End struct {
	// Type is journal.RunCompleted or journal.RunFailed.
	Type    journal.Type
	Reason  string
	Message string
	// Output is the final answer ([ReasonAnswer]) or, for
	// [ReasonMarker], the rest of the output of call CallID.
	Output string
	CallID string
}

// DefaultMaxInvalidCalls is how many consecutive model turns made only of
// malformed tool calls stop a run.
const DefaultMaxInvalidCalls = 5

// Step decides the next action from a folded run. It is pure: it reads
// only s (no clock, no randomness, no map order), so replaying a journal
// yields the same decisions (docs/architecture.md, "Contract — determinism").
func Step(s *State) Action {
	if s.Status.Terminal() {
		return Action{Kind: ActNone}
	}
	if s.Created.Setup != "" && s.Setup == nil {
		return Action{Kind: ActSetup}
	}
	if t := s.LastTurn(); t != nil && !allDone(t) {
		if cut := s.cutCalls(t); len(cut) > 0 {
			// A response cut at the output-token limit is not a
			// completion: none of its calls run, even complete ones.
			return Action{Kind: ActCut, Calls: cut}
		}
		var running, undecided, rejected, ask, runnable, waiting []string
		for _, c := range t.Calls {
			switch {
			case c.Finished != nil:
			case c.Running():
				running = append(running, c.ID)
			case c.Decision == nil:
				undecided = append(undecided, c.ID)
			case c.Decision.Effect == policy.Deny:
				rejected = append(rejected, c.ID)
			case c.Decision.Effect == policy.Ask && c.Approval == nil:
				ask = append(ask, c.ID)
			case c.Decision.Effect == policy.Ask && c.Resolved == nil:
				waiting = append(waiting, c.ID)
			case c.Decision.Effect == policy.Ask && c.Resolved.Decision != policy.Allow:
				rejected = append(rejected, c.ID)
			case c.authDeclined():
				rejected = append(rejected, c.ID)
			case c.authWaiting():
				waiting = append(waiting, c.ID)
			default:
				runnable = append(runnable, c.ID)
			}
		}
		switch {
		case len(running) > 0:
			return Action{Kind: ActRecover, Calls: running}
		case len(undecided) > 0:
			return Action{Kind: ActGate, Calls: undecided}
		case len(rejected) > 0:
			return Action{Kind: ActReject, Calls: rejected}
		case len(runnable) > 0:
			return Action{Kind: ActRunTools, Calls: runnable}
		case len(ask) > 0:
			return Action{Kind: ActAsk, Calls: ask}
		default:
			return Action{Kind: ActWait, Calls: waiting}
		}
	}
	if a, ok := incompleteAction(s); ok {
		return a
	}
	if a, ok := formatAction(s); ok {
		return a
	}
	last := s.Messages[len(s.Messages)-1]
	if last.Role == model.RoleAssistant && len(last.ToolCalls) == 0 {
		if n, by := deniedOnly(s); n > 0 {
			// An answer after nothing could run is no completion.
			which := fmt.Sprintf("the run's %d tool calls", n)
			if len(s.person) > 0 {
				which = fmt.Sprintf("the %d tool calls since the newest message", n)
			}
			return finish(journal.RunFailed, ReasonAllDenied, "every one of "+which+" was denied "+by, last.Content, "")
		}
		return finish(journal.RunCompleted, ReasonAnswer, "the model answered without calling a tool", last.Content, "")
	}
	if t := s.LastTurn(); t != nil && t.Index == len(s.Messages)-1 {
		if a, ok := handedOff(s, t); ok {
			return a
		}
		if m := s.Created.CompletionMarker; m != "" {
			for _, c := range t.Calls {
				if out, ok := afterMarker(c.Finished, m); ok {
					a := finish(journal.RunCompleted, ReasonMarker, "a tool result began with the completion marker "+m, out, c.ID)
					return a
				}
			}
		}
		max := s.Created.MaxInvalidCalls
		if max == 0 {
			max = DefaultMaxInvalidCalls
		}
		if s.InvalidStreak >= max {
			return finish(journal.RunFailed, ReasonInvalidCalls, fmt.Sprintf("the model sent only invalid tool calls %d turns in a row", s.InvalidStreak), "", "")
		}
	}
	if a, ok := limitAction(s); ok {
		return a
	}
	if a, ok := healthAction(s); ok {
		return a
	}
	if a, ok := contextAction(s); ok {
		return a
	}
	return Action{Kind: ActCallModel}
}

func finish(t journal.Type, reason, msg, out, callID string) Action {
	return Action{Kind: ActFinish, End: &End{Type: t, Reason: reason, Message: msg, Output: out, CallID: callID}}
}

// ResultOutput returns the output part of a tool result's content: for
// results with an exit code (command tools), the content after the
// one-line "exit code: N" header; otherwise the whole content.
func ResultOutput(r *tool.Result) string {
	if r.ExitCode == nil {
		return r.Content
	}
	_, rest, ok := strings.Cut(r.Content, "\n")
	if !ok {
		return ""
	}
	return rest
}

// afterMarker reports whether the output of f starts with the line marker,
// and returns the rest of the output.
func afterMarker(f *ToolFinished, marker string) (string, bool) {
	if f == nil || f.IsError || f.Synthetic {
		return "", false
	}
	out := strings.TrimLeft(ResultOutput(&f.Result), " \t\r\n")
	first, rest, _ := strings.Cut(out, "\n")
	if strings.TrimSpace(first) != marker {
		return "", false
	}
	return rest, true
}

func sanitizeCalls(calls []model.ToolCall) []model.ToolCall {
	var out []model.ToolCall
	for i, c := range calls {
		var v map[string]any
		if json.Unmarshal([]byte(c.Arguments), &v) == nil && v != nil {
			continue
		}
		if out == nil {
			out = append([]model.ToolCall(nil), calls...)
		}
		out[i].Arguments = "{}"
	}
	if out == nil {
		return calls
	}
	return out
}

// deniedOnly returns the number of tool calls since the person's newest
// message (the task, or a follow-up) when none of them ran and the gate
// denied at least one, and says who denied; else 0. A person's deny is
// an answer, not a failure: the model acknowledging it ends the turn as
// any answer does (calls refused as malformed count as not run).
func deniedOnly(s *State) (n int, by string) {
	from := 0
	if k := len(s.person); k > 0 {
		from = s.person[k-1]
	}
	gate, timeout := false, false
	for _, t := range s.Turns {
		if t.Index < from {
			continue
		}
		for _, c := range t.Calls {
			n++
			if c.Attempts > 0 {
				return 0, ""
			}
			switch {
			case c.Decision != nil && c.Decision.Effect == policy.Deny && !c.Decision.Invalid() && !c.Decision.Checked():
				gate = true
			case c.Resolved != nil && c.Resolved.Decision == policy.Deny && c.Resolved.By == ByTimeout:
				timeout = true
			case c.Resolved != nil && c.Resolved.Decision == policy.Deny:
				return 0, ""
			}
		}
	}
	switch {
	case gate && timeout:
		return n, "by the policy or at the approval deadline, so nothing ran; the model then answered without a tool (check the policy with `keel policy check`)"
	case gate:
		return n, "by the policy, so nothing ran; the model then answered without a tool (check the policy with `keel policy check`)"
	case timeout:
		return n, "at the approval deadline (nobody decided in time), so nothing ran; the model then answered without a tool"
	}
	return 0, ""
}
