package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
)

// Loop health: a model that repeats the same calls and gets the same
// results, or that keeps answering in the wrong format, is stuck. The
// step function first nudges it with a user message (journaled as
// user.message with Source "keel.health" or "keel.format"), then stops
// the run with a clear reason. Malformed and unknown tool calls are
// handled by the gate and MaxInvalidCalls.

// Defaults of [HealthConfig].
const (
	// DefaultRepeatNudge is the streak of identical turns (same calls,
	// same results) at which the model is nudged.
	DefaultRepeatNudge = 3
	// DefaultMaxRepeats is the streak of identical turns that stops the
	// run (reason "repeated_calls").
	DefaultMaxRepeats = 5
	// DefaultMaxFormatErrors is the number of consecutive text-action
	// format errors that stops the run (reason "format_errors").
	DefaultMaxFormatErrors = 3
	// DefaultMaxIncomplete is the number of consecutive incomplete model
	// responses (cut at the output-token limit, or empty) that stops the
	// run (reason "output_limit" or "empty_answers"); the ones before it
	// are answered with a note and the model tries again.
	DefaultMaxIncomplete = 3
	// DefaultMaxOversize is the number of consecutive model responses over
	// [MaxResponseBytes] that stops the run (reason
	// "response_too_large"); the ones before it are dropped and the model
	// is told to write less at once.
	DefaultMaxOversize = 3
)

// StopLength is the normalised [model.Response].StopReason of a response
// cut at the output-token limit (OpenAI finish_reason "length",
// Anthropic stop_reason "max_tokens"): it is not a completion, and its
// tool calls never run.
const StopLength = "length"

// HealthConfig configures loop detection; zero fields take the defaults.
type HealthConfig struct {
	// RepeatNudge is the streak of identical turns that gets a nudge;
	// 0 means [DefaultRepeatNudge], negative never nudges.
	RepeatNudge int `json:"repeat_nudge,omitempty"`
	// MaxRepeats is the streak of identical turns that stops the run;
	// 0 means [DefaultMaxRepeats], negative never stops.
	MaxRepeats int `json:"max_repeats,omitempty"`
	// MaxFormatErrors is the number of consecutive format errors (text
	// action mode) that stops the run; 0 means [DefaultMaxFormatErrors].
	MaxFormatErrors int `json:"max_format_errors,omitempty"`
}

func (s *State) healthConfig() HealthConfig {
	var h HealthConfig
	if s.Created.Health != nil {
		h = *s.Created.Health
	}
	if h.RepeatNudge == 0 {
		h.RepeatNudge = DefaultRepeatNudge
	}
	if h.MaxRepeats == 0 {
		h.MaxRepeats = DefaultMaxRepeats
	}
	if h.MaxFormatErrors <= 0 {
		h.MaxFormatErrors = DefaultMaxFormatErrors
	}
	return h
}

// healthState is the part of [State] loop health folds.
type healthState struct {
	// formatStreak counts consecutive assistant messages without a tool
	// call (format errors in text-action mode).
	formatStreak int
	// repeatStreak counts how many times in a row the newest turns
	// repeat a cycle of 1 to maxPeriod turns with the same signatures
	// (A A A, or A B A B...); repeatPeriod is that cycle's length. sigs
	// are the newest turns' signatures, newest last; runs[p] counts the
	// consecutive newest turns equal to the turn p before them.
	repeatStreak int
	repeatPeriod int
	sigs         []string
	runs         [maxPeriod + 1]int
	// grew is set when the newest turn made repeatStreak grow (a cycle of
	// two turns grows it every second turn), so each count nudges once.
	grew bool
	// sigTurn is 1 + the message index of the newest turn whose
	// signature was taken (0: none).
	sigTurn int
	// incomplete counts consecutive model responses that were cut at the
	// output-token limit or empty; lastCut says the newest one was cut,
	// and cutTurn is 1 + the message index of a cut response (0: the
	// newest response was not cut), whose calls never run.
	incomplete int
	lastCut    bool
	cutTurn    int
	// oversize counts model responses over MaxResponseBytes since the
	// newest stored response (model.failed with ResponseBytes set).
	oversize int
}

// applyHealth folds the loop-health parts of an event that
// [State.applyContext] does not: incomplete (cut or empty) responses and
// oversize responses. It runs after [State.Apply]'s own handling.
func (s *State) applyHealth(v any) {
	h := &s.ctx.healthState
	switch p := v.(type) {
	case *ModelResponded:
		h.oversize = 0
		cut := p.StopReason == StopLength
		empty := len(p.Message.ToolCalls) == 0 && strings.TrimSpace(p.Message.Content) == ""
		h.cutTurn = 0
		if cut {
			h.cutTurn = len(s.Messages)
		}
		if cut || empty {
			h.incomplete++
			h.lastCut = cut
		} else {
			h.incomplete, h.lastCut = 0, false
		}
	case *ModelFailed:
		if p.ResponseBytes > 0 {
			h.oversize++
		}
	case *RunResumed:
		// A person resumed the run (perhaps with a larger
		// --max-output-tokens): the model gets the whole allowance again.
		// An incomplete newest response still counts once, so that it is
		// answered with a note rather than taken for an answer.
		h.oversize = 0
		h.incomplete = min(h.incomplete, 1)
	}
}

// OversizeStreak returns how many model responses in a row, since the
// newest stored one, were over [MaxResponseBytes] and dropped.
func (s *State) OversizeStreak() int { return s.ctx.oversize }

// cutCalls returns the calls of t that still need a result when t is a
// response cut at the output-token limit (none of them may run), or nil.
func (s *State) cutCalls(t *Turn) []string {
	if s.ctx.cutTurn != t.Index+1 {
		return nil
	}
	var ids []string
	for _, c := range t.Calls {
		if c.Finished == nil && !c.Running() {
			ids = append(ids, c.ID)
		}
	}
	return ids
}

// CutResult is the content of the result every tool call of a response
// cut at the output-token limit gets: none of them ran.
const CutResult = "this call did not run: your response was cut at the output-token limit, so nothing in it ran (not even calls whose arguments look complete). Send a shorter response: fewer calls at once, and write large files in parts."

// incompleteAction answers a model response that is not a completion: one
// cut at the output-token limit, or an empty one (no text, no tool call).
// The first ones get a note and the model tries again (a cut turn's calls
// already got [CutResult]); [DefaultMaxIncomplete] in a row stop the run.
func incompleteAction(s *State) (Action, bool) {
	h := &s.ctx.healthState
	last := s.Messages[len(s.Messages)-1]
	if last.Role != model.RoleAssistant || h.incomplete == 0 {
		return Action{}, false
	}
	if h.incomplete >= DefaultMaxIncomplete {
		if h.lastCut {
			return finish(journal.RunFailed, ReasonOutputLimit, fmt.Sprintf("the model's response was cut at the output-token limit %d times in a row (raise --max-output-tokens, or ask for shorter steps)", h.incomplete), "", ""), true
		}
		return finish(journal.RunFailed, ReasonEmptyAnswers, fmt.Sprintf("the model's response was incomplete %d times in a row; the last was empty (no text and no tool call)", h.incomplete), "", ""), true
	}
	if len(last.ToolCalls) > 0 {
		return Action{}, false // each call's result says the response was cut
	}
	msg := "[Keel: your response was empty: no text and no tool call. That does not finish the task. Continue with the next step"
	if h.lastCut {
		msg = "[Keel: your response was cut at the output-token limit before it was complete, so it does not count as your answer. Continue more briefly"
	}
	msg += fmt.Sprintf(", and keep each response short. The run stops after %d incomplete responses in a row.]", DefaultMaxIncomplete)
	return Action{Kind: ActNudge, Nudge: &UserMessage{Source: "keel.output", Content: msg}}, true
}

// RepeatStreak returns how many times in a row the newest completed turns
// repeated the same calls with the same results: the same turn (A A A),
// or a cycle of two or three turns (A B A B); 1 when nothing repeats.
func (s *State) RepeatStreak() int { return s.ctx.repeatStreak }

// noteResponse folds a model response into the format streak.
func (s *State) noteResponse(m *model.Message) {
	if len(m.ToolCalls) == 0 {
		s.ctx.formatStreak++
	} else {
		s.ctx.formatStreak = 0
	}
}

// noteTurnDone updates the repeat streak when the newest turn has just
// received its last result.
func (s *State) noteTurnDone() {
	t := s.LastTurn()
	if t == nil || t.Index != len(s.Messages)-1 || !allDone(t) || s.ctx.sigTurn == t.Index+1 {
		return
	}
	s.ctx.sigTurn = t.Index + 1
	sig := turnSignature(s.Messages[t.Index].ToolCalls, t, s.Created.MountPath)
	h := &s.ctx.healthState
	prev := h.repeatStreak
	h.repeatStreak, h.repeatPeriod = 1, 1
	for p := 1; p <= maxPeriod; p++ {
		if n := len(h.sigs); n >= p && h.sigs[n-p] == sig {
			h.runs[p]++
		} else {
			h.runs[p] = 0
		}
		// A cycle of p turns repeated: the first p turns, then one more
		// cycle for every p turns that matched the turn p before.
		if h.runs[p] >= p {
			if streak := 1 + h.runs[p]/p; streak > h.repeatStreak {
				h.repeatStreak, h.repeatPeriod = streak, p
			}
		}
	}
	h.grew = h.repeatStreak > prev
	h.sigs = append(h.sigs, sig)
	if len(h.sigs) > maxPeriod {
		h.sigs = append(h.sigs[:0:0], h.sigs[len(h.sigs)-maxPeriod:]...)
	}
}

// maxPeriod is the longest cycle of turns loop health recognises: the
// same turn again (1), two turns alternating (2), or three in turn.
const maxPeriod = 3

// turnSignature hashes a turn's calls (names and arguments) and results
// (content and error flag). Spellings of the same call are the same
// call (see [callKey]: JSON spelling, default arguments, paths, and what
// the gate's parser reads from a command line), and the calls of a turn
// in any order. mount is the run's mount path.
func turnSignature(calls []model.ToolCall, t *Turn, mount string) string {
	sigs := make([]string, len(calls))
	for i, c := range calls {
		var b strings.Builder
		key := callKey(c, mount)
		fmt.Fprintf(&b, "%d:%s\x00", len(key), key)
		if i < len(t.Calls) && t.Calls[i].Finished != nil {
			f := t.Calls[i].Finished
			b.WriteString(strconv.FormatBool(f.IsError))
			// The artifact's name differs from call to call (it holds the
			// call id); the same output is the same result.
			content := f.Content
			if f.Artifact != "" {
				content = strings.ReplaceAll(content, f.Artifact, "")
			}
			b.WriteString(content)
		}
		sigs[i] = b.String()
	}
	slices.Sort(sigs)
	h := sha256.New()
	for _, s := range sigs {
		fmt.Fprintf(h, "%d:%s\x00", len(s), s)
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// canonicalArgs is a call's arguments as one spelling of their JSON
// value (object keys sorted, no spacing, one escape of each string), or
// as written when they are not JSON.
func canonicalArgs(raw string) string {
	d := json.NewDecoder(strings.NewReader(raw))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil || d.More() {
		return raw
	}
	b, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return string(b)
}

// formatAction handles an assistant message without tool calls in
// text-action mode: a format error fed back to the model, or the end of
// the run after too many in a row.
func formatAction(s *State) (Action, bool) {
	if s.Created.FormatError == "" {
		return Action{}, false
	}
	last := s.Messages[len(s.Messages)-1]
	if last.Role != model.RoleAssistant || len(last.ToolCalls) > 0 {
		return Action{}, false
	}
	h := s.healthConfig()
	if s.ctx.formatStreak >= h.MaxFormatErrors {
		return finish(journal.RunFailed, ReasonFormatErrors, fmt.Sprintf("the model answered %d times in a row without an action in the required format", s.ctx.formatStreak), "", ""), true
	}
	msg := s.Created.FormatError
	if left := h.MaxFormatErrors - s.ctx.formatStreak; left == 1 {
		msg += "\n\nThis is the last format error the run accepts: the next reply without an action ends it."
	}
	return Action{Kind: ActNudge, Nudge: &UserMessage{Content: msg, Source: "keel.format"}}, true
}

// healthAction nudges or stops a run whose newest turn repeats the turns
// before it.
func healthAction(s *State) (Action, bool) {
	t := s.LastTurn()
	if t == nil || t.Index != len(s.Messages)-1 || !allDone(t) {
		return Action{}, false
	}
	h := s.healthConfig()
	n := s.ctx.repeatStreak
	switch {
	case h.MaxRepeats > 0 && n >= h.MaxRepeats:
		what := fmt.Sprintf("the same tool calls and got the same results %d turns in a row", n)
		if p := s.ctx.repeatPeriod; p > 1 {
			what = fmt.Sprintf("the same %d turns of tool calls over and over, with the same results, %d times in a row", p, n)
		}
		return finish(journal.RunFailed, ReasonRepeatedCalls, "the model made "+what, "", ""), true
	case h.RepeatNudge > 0 && n == h.RepeatNudge && s.ctx.grew:
		what := fmt.Sprintf("made the same tool call %d times in a row and got the same result each time", n)
		if p := s.ctx.repeatPeriod; p > 1 {
			what = fmt.Sprintf("gone through the same %d tool calls in turn %d times and got the same results each time", p, n)
		}
		return Action{Kind: ActNudge, Nudge: &UserMessage{Source: "keel.health", Content: fmt.Sprintf(
			"[Keel: you have %s. Repeating them will not change the outcome. Try a different approach, look at the problem from another side, or finish if the task is done. The run stops if this repeats %d times.]", what, h.MaxRepeats)}}, true
	}
	return Action{}, false
}
