package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/keel-run/keel/journal"
)

// InputRequested is the payload of journal.InputRequested: during a call,
// the tool's server (an MCP server's elicitation) asks a person for
// input. The call waits, running, until the answer (input.answered) is
// journaled, by this process or any other; the wait is durable: when the
// execution stops meanwhile, the next one runs the call again and gives
// the server's same question the journaled answer (see [Recorder.AskInput]).
type InputRequested struct {
	// ID names the request in its run ("input-1", ...).
	ID     string `json:"id"`
	CallID string `json:"call_id,omitempty"`
	Tool   string `json:"tool,omitempty"`
	// Server is the MCP server that asks.
	Server string `json:"server"`
	// Mode is "form" (Schema describes the answer's fields) or "url" (the
	// person opens URL and then says done).
	Mode    string          `json:"mode"`
	Message string          `json:"message"`
	Schema  json.RawMessage `json:"schema,omitempty"`
	URL     string          `json:"url,omitempty"`
	// Fingerprint identifies the question (server, mode, message, schema,
	// URL), so that a call run again asking the same one gets its answer.
	Fingerprint string `json:"fingerprint"`
	// Attempt is the call's attempt (tool.started) that asked.
	Attempt int `json:"attempt,omitempty"`
}

// InputAnswered is the payload of journal.InputAnswered: a person's
// answer to an input request.
type InputAnswered struct {
	ID string `json:"id"`
	// Action is "accept" (with Content), "decline" or "cancel".
	Action  string          `json:"action"`
	Content json.RawMessage `json:"content,omitempty"`
	By      string          `json:"by,omitempty"`
}

// Detail implements Payload.
func (p *InputRequested) Detail() string {
	s := fmt.Sprintf("%s asks (%s, call %s): %s", p.Server, p.ID, p.CallID, p.Message)
	if p.URL != "" {
		s += " " + p.URL
	}
	return s
}

// Detail implements Payload.
func (p *InputAnswered) Detail() string {
	s := fmt.Sprintf("%s %s", p.ID, p.Action)
	if p.By != "" {
		s += " by " + p.By
	}
	return s
}

// Input is one input request of a run and its answer, if given.
type Input struct {
	InputRequested
	Answer *InputAnswered
	// Seq and Time are those of the input.requested event.
	Seq  int64
	Time time.Time
}

// applyInput folds input.requested and input.answered.
func (s *State) applyInput(e *journal.Event, v any, bad func(string, ...any) error) error {
	switch p := v.(type) {
	case *InputRequested:
		if p.ID == "" || s.input(p.ID) != nil {
			return bad("input.requested with a missing or repeated id %q", p.ID)
		}
		if p.CallID != "" {
			if c := s.call(p.CallID); c == nil || !c.Running() {
				return bad("input.requested for call %q, which is not running", p.CallID)
			}
		}
		s.Inputs = append(s.Inputs, &Input{InputRequested: *p, Seq: e.Seq, Time: e.Time})
	case *InputAnswered:
		in := s.input(p.ID)
		if in == nil || in.Answer != nil {
			return bad("input.answered for %q, which is not an open input request", p.ID)
		}
		in.Answer = p
	}
	return nil
}

func (s *State) input(id string) *Input {
	for _, in := range s.Inputs {
		if in.ID == id {
			return in
		}
	}
	return nil
}

// waiting reports whether in waits for an answer: unanswered, and its call
// (if any) not finished.
func (s *State) waiting(in *Input) bool {
	if in.Answer != nil {
		return false
	}
	if in.CallID != "" {
		if c := s.call(in.CallID); c == nil || c.Finished != nil {
			return false
		}
	}
	return true
}

// PendingInput is an input request a run waits for.
type PendingInput struct {
	RunID string `json:"run_id"`
	InputRequested
	Seq  int64     `json:"seq"`
	Time time.Time `json:"time"`
	// Task is the run's task, for context.
	Task string `json:"task,omitempty"`
}

// PendingInputs returns the input requests s waits for, oldest first.
func (s *State) PendingInputs() []PendingInput {
	var out []PendingInput
	for _, in := range s.Inputs {
		if s.waiting(in) {
			out = append(out, PendingInput{RunID: s.RunID, InputRequested: in.InputRequested, Seq: in.Seq, Time: in.Time, Task: s.Created.Task})
		}
	}
	return out
}

// hasInputs reports whether call id asked for input.
func (s *State) hasInputs(id string) bool {
	return slices.ContainsFunc(s.Inputs, func(in *Input) bool { return in.CallID == id })
}

// InputWaits returns the input requests every run that has not ended
// waits for, oldest first (runs that fail to load are skipped).
func (rt *Runtime) InputWaits(ctx context.Context) ([]PendingInput, error) {
	return openWaits(ctx, rt, "input requests", (*State).PendingInputs, func(in PendingInput) time.Time { return in.Time })
}

// ErrNoInput is returned by [Runtime.AnswerInput] when the run does not
// wait for that input.
var ErrNoInput = errors.New("agent: no open input request with this id")

// ErrBadAnswer wraps an answer that does not fit its request.
var ErrBadAnswer = errors.New("agent: the answer does not fit the request")

// AnswerInput journals a person's answer to input request id of run
// runID (a.ID is set to id). A form's accepted content must be a JSON
// object matching the request's schema. The execution waiting for it
// (in any process) delivers it; if none does, the run's next execution
// runs the call again and delivers it to the server's same question. It
// retries once if the journal moved on meanwhile.
func (rt *Runtime) AnswerInput(ctx context.Context, runID, id string, a *InputAnswered) error {
	switch a.Action {
	case "accept", "decline", "cancel":
	default:
		return fmt.Errorf("%w: action %q, want accept, decline or cancel", ErrBadAnswer, a.Action)
	}
	for attempt := 0; ; attempt++ {
		st, _, err := rt.Load(ctx, runID)
		if err != nil {
			return fmt.Errorf("agent: answer input: %w", err)
		}
		in := st.input(id)
		if in == nil || !st.waiting(in) {
			return fmt.Errorf("agent: run %s input %s: %w", runID, id, ErrNoInput)
		}
		p := *a
		p.ID = id
		if p.Action == "accept" && in.Mode != "url" {
			if err := checkAnswer(in.Schema, p.Content); err != nil {
				return err
			}
		} else {
			p.Content = nil
		}
		_, err = rt.store.Append(ctx, runID, st.LastSeq, journal.Draft{Type: journal.InputAnswered, Time: rt.clock(), Payload: marshal(&p)})
		if errors.Is(err, journal.ErrConflict) && attempt < 3 {
			continue
		}
		if err != nil {
			return fmt.Errorf("agent: answer input: %w", err)
		}
		*a = p
		return nil
	}
}

// checkAnswer validates an accepted form's content against its schema.
func checkAnswer(schema, content json.RawMessage) error {
	var obj map[string]any
	if err := json.Unmarshal(content, &obj); err != nil || obj == nil {
		return fmt.Errorf("%w: the content of an accepted form must be a JSON object", ErrBadAnswer)
	}
	if len(schema) == 0 {
		return nil
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(schema, &s); err != nil {
		return fmt.Errorf("%w: the request's schema does not decode: %v", ErrBadAnswer, err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		return fmt.Errorf("%w: the request's schema does not compile: %v", ErrBadAnswer, err)
	}
	if err := rs.Validate(obj); err != nil {
		return fmt.Errorf("%w: %v", ErrBadAnswer, err)
	}
	return nil
}

// AskInput journals a question of the server of a running call and
// waits until a person answers it (input.answered, appended by any
// process), or ctx ends. A call run again after its execution stopped
// asks its questions again: the k-th ask of a question (same
// fingerprint) in this attempt is the k-th of an earlier attempt, whose
// journaled answer is delivered at once, or whose wait continues. It
// returns [ErrNotExecuting] when no execution is bound.
func (r *Recorder) AskInput(ctx context.Context, q *InputRequested) (*InputAnswered, error) {
	r.mu.Lock()
	x := r.x
	r.mu.Unlock()
	if x == nil {
		return nil, ErrNotExecuting
	}
	x.mu.Lock()
	attempt := 0
	if c := x.st.call(q.CallID); c != nil {
		attempt = c.Attempts
	}
	key := fmt.Sprintf("%s\x00%d\x00%s", q.CallID, attempt, q.Fingerprint)
	if x.asked == nil {
		x.asked = map[string]int{}
	}
	k := x.asked[key]
	x.asked[key]++
	var prior []*Input
	for _, in := range x.st.Inputs {
		if in.CallID == q.CallID && in.Fingerprint == q.Fingerprint && in.Attempt < attempt {
			prior = append(prior, in)
		}
	}
	var in *Input
	if k < len(prior) {
		c := *prior[k]
		in = &c
	}
	n := len(x.st.Inputs) + 1
	x.mu.Unlock()
	if in != nil && in.Answer != nil {
		return in.Answer, nil
	}
	id, from := "", int64(0)
	if in != nil {
		id, from = in.ID, in.Seq+1
	} else {
		p := *q
		p.ID, p.Attempt = fmt.Sprintf("input-%d", n), attempt
		if err := x.append(ctx, journal.InputRequested, &p); err != nil {
			return nil, err
		}
		x.mu.Lock()
		id, from = p.ID, x.st.LastSeq+1
		x.mu.Unlock()
	}
	for e, err := range journal.Follow(ctx, x.rt.store, x.runID, from, 0) {
		if err != nil {
			return nil, fmt.Errorf("agent: run %s: wait for input %s: %w", x.runID, id, err)
		}
		if e.Type != journal.InputAnswered {
			continue
		}
		var a InputAnswered
		if json.Unmarshal(e.Payload, &a) == nil && a.ID == id {
			return &a, nil
		}
	}
	return nil, fmt.Errorf("agent: run %s: wait for input %s: %w", x.runID, id, context.Cause(ctx))
}
