package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

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
)

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
	sig := turnSignature(s.Messages[t.Index].ToolCalls, t)
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
// (content and error flag).
func turnSignature(calls []model.ToolCall, t *Turn) string {
	h := sha256.New()
	for i, c := range calls {
		fmt.Fprintf(h, "%d:%s:%s\x00", len(c.Name), c.Name, c.Arguments)
		if i < len(t.Calls) && t.Calls[i].Finished != nil {
			f := t.Calls[i].Finished
			h.Write([]byte(strconv.FormatBool(f.IsError)))
			h.Write([]byte(f.Content))
		}
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
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
		return finish(journal.RunFailed, "format_errors", fmt.Sprintf("the model answered %d times in a row without an action in the required format", s.ctx.formatStreak), "", ""), true
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
		return finish(journal.RunFailed, "repeated_calls", "the model made "+what, "", ""), true
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
