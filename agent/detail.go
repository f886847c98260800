package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/keel-run/keel/journal"
)

// Payload is the decoded payload of an event ([Decode]). Detail says what
// the event records on one line, for people: keel runs show, and the web
// UI for events it has no layout of its own for. The text comes from the
// journal (a model, a tool, a person) and is not escaped: escape it where
// it is shown (package visible).
type Payload interface {
	Detail() string
}

// payloads is the one table of event types and their payload types. An
// event type is added with one entry here; its payload type must have a
// Detail method, or this table does not compile. Decode, and with it
// every reader of the journal (the fold, keel runs show, the web UI, the
// server's summaries), know the type from here.
var payloads = map[journal.Type]func() Payload{
	journal.RunCreated:        payload[RunCreated],
	journal.RunResumed:        payload[RunResumed],
	journal.SetupFinished:     payload[SetupFinished],
	journal.ModelResponded:    payload[ModelResponded],
	journal.ModelFailed:       payload[ModelFailed],
	journal.GateDecided:       payload[GateDecided],
	journal.ApprovalRequested: payload[ApprovalRequested],
	journal.ApprovalResolved:  payload[ApprovalResolved],
	journal.AuthRequired:      payload[AuthRequired],
	journal.AuthResolved:      payload[AuthResolved],
	journal.InputRequested:    payload[InputRequested],
	journal.InputAnswered:     payload[InputAnswered],
	journal.ToolStarted:       payload[ToolStarted],
	journal.ToolFinished:      payload[ToolFinished],
	journal.RunCompleted:      payload[RunEnded],
	journal.RunFailed:         payload[RunEnded],
	journal.RunCanceled:       payload[RunEnded],
	journal.RunPaused:         payload[RunEnded],
	journal.UserMessage:       payload[UserMessage],
	journal.ContextCompacted:  payload[ContextCompacted],
	journal.SandboxEgress:     payload[SandboxEgress],
	journal.SandboxQuarantine: payload[SandboxQuarantine],

	journal.ChildSpawned:        payload[ChildSpawned],
	journal.ChildDelivered:      payload[ChildDelivered],
	journal.WorkspaceCheckpoint: payload[WorkspaceCheckpoint],
	journal.WorkspaceRestored:   payload[WorkspaceRestored],
	journal.WorkspaceRestoring:  payload[WorkspaceRestoring],
}

// Types returns the event types of the table, sorted: every type
// [Decode] knows. The views of a run check that they show each
// (package internal/view).
func Types() []journal.Type {
	out := make([]journal.Type, 0, len(payloads))
	for t := range payloads {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// payload returns a new *T as a Payload.
func payload[T any, PT interface {
	*T
	Payload
}]() Payload {
	return PT(new(T))
}

// Decode unmarshals an event's payload into the payload type of its event
// type and returns it (for example *RunCreated for run.created); every
// payload it returns is a [Payload]. Unknown types return (nil, nil) so
// that newer journals stay readable.
func Decode(e *journal.Event) (any, error) {
	mk, ok := payloads[e.Type]
	if !ok {
		return nil, nil
	}
	v := mk()
	if err := json.Unmarshal(e.Payload, v); err != nil {
		return nil, &journal.CorruptError{RunID: e.RunID, Seq: e.Seq, Reason: fmt.Sprintf("%s payload does not decode: %v", e.Type, err)}
	}
	return v, nil
}

// Created decodes the run.created event a run's events start with.
func Created(events []journal.Event) (*RunCreated, error) {
	if len(events) == 0 {
		return nil, errors.New("the run has no events")
	}
	v, err := Decode(&events[0])
	if err != nil {
		return nil, err
	}
	c, ok := v.(*RunCreated)
	if !ok {
		return nil, fmt.Errorf("the run's first event is %s, not run.created", events[0].Type)
	}
	return c, nil
}

func (x *RunCreated) Detail() string {
	return fmt.Sprintf("%d tools, limits %s", len(x.Tools), x.Limits)
}

// String says the limits in a few words ("20 steps, $1.00"), or "none".
func (l Limits) String() string {
	var parts []string
	if l.MaxSteps > 0 {
		parts = append(parts, fmt.Sprintf("%d steps", l.MaxSteps))
	}
	if l.MaxTokens > 0 {
		parts = append(parts, Num(l.MaxTokens)+" tok")
	}
	if l.MaxCost > 0 {
		parts = append(parts, fmt.Sprintf("$%.2f", l.MaxCost))
	}
	if l.Timeout > 0 {
		parts = append(parts, time.Duration(l.Timeout).String())
	}
	if l.MaxToolCalls > 0 {
		parts = append(parts, fmt.Sprintf("%d tool calls", l.MaxToolCalls))
	}
	if l.MaxChildren > 0 {
		parts = append(parts, fmt.Sprintf("%d children", l.MaxChildren))
	}
	if l.MaxDepth > 0 {
		parts = append(parts, fmt.Sprintf("depth %d", l.MaxDepth))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func (x *RunResumed) Detail() string {
	d := strings.Join(x.Interrupted, ",")
	if x.ContextWindow > 0 {
		d += fmt.Sprintf(" context window %s", Num(int64(x.ContextWindow)))
	}
	if x.Handoff {
		d += " handoff"
	}
	if x.Limits != nil {
		d += " limits " + x.Limits.String()
	}
	return strings.TrimSpace(d)
}

// Changes says in words what resume x changed ("" for a plain one: after
// a decision, the next turn of a conversation).
func (x *RunResumed) Changes() string {
	var what []string
	if len(x.Interrupted) > 0 {
		what = append(what, "calls a stop interrupted were repaired ("+strings.Join(x.Interrupted, ", ")+")")
	}
	if x.Handoff {
		what = append(what, "a handoff: the next step starts a fresh context from a summary")
	}
	if x.ContextWindow > 0 {
		what = append(what, "context window "+Num(int64(x.ContextWindow))+" tokens")
	}
	if x.Limits != nil {
		what = append(what, "limits "+x.Limits.String())
	}
	return strings.Join(what, "; ")
}

func (x *SetupFinished) Detail() string {
	return fmt.Sprintf("exit %d · %s", x.ExitCode, MS(x.DurationMS))
}

func (x *ModelResponded) Detail() string {
	d := fmt.Sprintf("%s tok in (%s cached) · %s out · $%.5f · %s", Num(x.Usage.InputTokens), Num(x.Usage.CachedInputTokens), Num(x.Usage.OutputTokens), x.Cost, MS(x.DurationMS))
	if x.UsageEstimated {
		d += " · usage estimated"
	}
	if len(x.Message.ToolCalls) == 0 {
		d += " · answer: " + Clip(OneLine(x.Message.Content), 80)
	}
	return d
}

func (x *ModelFailed) Detail() string { return x.Kind + ": " + Clip(x.Message, 100) }

func (x *GateDecided) Detail() string {
	return fmt.Sprintf("%s %s (%s)", x.Effect, x.CallID, strings.Join(x.Policies, ","))
}

func (x *ApprovalRequested) Detail() string {
	if x.Action != "" {
		return fmt.Sprintf("%s %s", x.CallID, Clip(OneLine(x.Action), 80))
	}
	return fmt.Sprintf("%s %s", x.CallID, Clip(string(x.Arguments), 80))
}

func (x *ApprovalResolved) Detail() string {
	return fmt.Sprintf("%s %s by %s", x.CallID, x.Decision, x.By)
}

func (x *AuthRequired) Detail() string {
	d := fmt.Sprintf("%s %s needs %s authorization (%s)", x.CallID, x.Tool, x.Provider, x.Reason)
	if x.Hint != "" {
		d += ": " + x.Hint
	}
	return d
}

func (x *AuthResolved) Detail() string {
	verdict := "authorized"
	if x.Declined {
		verdict = "declined"
	}
	d := fmt.Sprintf("%s %s by %s", x.CallID, verdict, x.By)
	if x.Reason != "" {
		d += ": " + Clip(x.Reason, 100)
	}
	return d
}

func (x *ToolStarted) Detail() string {
	d := x.Tool + " " + x.CallID
	if x.Attempt > 1 {
		d += fmt.Sprintf(" (attempt %d)", x.Attempt)
	}
	return d
}

// Detail says how the call ended: exit code or error, the lines the
// model saw (and the whole output's size and file when that was cut),
// and how long it took.
func (x *ToolFinished) Detail() string {
	if x.Synthetic {
		return "synthetic: " + Clip(FirstLine(x.Content), 100)
	}
	var b strings.Builder
	if x.ExitCode != nil {
		fmt.Fprintf(&b, "exit %d", *x.ExitCode)
	} else if x.IsError {
		// Tools often start their message with "error:" themselves.
		b.WriteString("error: " + Clip(strings.TrimPrefix(FirstLine(x.Content), "error: "), 100))
	} else {
		b.WriteString("ok")
	}
	if x.TimedOut {
		b.WriteString(" · timed out")
	}
	// The line count is of what the model saw; when that is a cut of a
	// longer output, say so, with the whole output's size and file.
	out := ResultOutput(&x.Result)
	lines := 0
	if out != "" {
		lines = strings.Count(out, "\n")
		if !strings.HasSuffix(out, "\n") {
			lines++
		}
	}
	switch {
	case x.OutputBytes > int64(len(x.Content)) && x.Artifact != "":
		fmt.Fprintf(&b, " · %s lines shown of %s bytes in all (full output: %s)", Num(int64(lines)), Num(x.OutputBytes), x.Artifact)
	case x.OutputBytes > int64(len(x.Content)):
		fmt.Fprintf(&b, " · %s lines shown of %s bytes in all", Num(int64(lines)), Num(x.OutputBytes))
	case lines == 1:
		b.WriteString(" · 1 line")
	case lines > 0:
		fmt.Fprintf(&b, " · %s lines", Num(int64(lines)))
	}
	fmt.Fprintf(&b, " · %s", MS(x.DurationMS))
	return b.String()
}

func (x *RunEnded) Detail() string {
	if x.Message != "" {
		return x.Reason + ": " + Clip(x.Message, 100)
	}
	return x.Reason
}

func (x *UserMessage) Detail() string {
	d := Clip(OneLine(x.Content), 80)
	if x.Source != "" {
		d = x.Source + ": " + d
	}
	return d
}

func (x *ContextCompacted) Detail() string {
	kind := "steps"
	if x.Handoff {
		kind = "handoff: steps"
	}
	how := "summary"
	if x.Mechanical {
		how = "mechanical summary"
	}
	s := fmt.Sprintf("%s %d–%d → %s · %s → %s tok", kind, x.FirstStep, x.LastStep, how, Num(int64(x.TokensBefore)), Num(int64(x.TokensAfter)))
	if x.Window > 0 {
		s += " of " + Num(int64(x.Window))
	}
	if x.Usage.InputTokens > 0 {
		s += fmt.Sprintf(" · summary call %s in / %s out · %s", Num(x.Usage.InputTokens), Num(x.Usage.OutputTokens), MS(x.DurationMS))
	}
	return s
}

func (x *SandboxEgress) Detail() string {
	verdict := "refused"
	if x.Allowed {
		verdict = "allowed"
	}
	s := fmt.Sprintf("%s %s:%d (%s phase)", verdict, x.Host, x.Port, x.Phase)
	if x.Path != "" {
		s += fmt.Sprintf(" %s %s, %d bytes out, %d in", x.Method, x.Path, x.BytesOut, x.BytesIn)
	}
	if len(x.Substituted) > 0 {
		s += " with secret " + strings.Join(x.Substituted, ", ") + " put in by the proxy"
	}
	if x.Reason != "" {
		s += ": " + x.Reason
	}
	return s
}

// Detail says what the git guard moved, removed or made readable, or
// could not make safe.
func (x *SandboxQuarantine) Detail() string {
	switch {
	case x.Error != "":
		return fmt.Sprintf("DANGER: could not quarantine %s: %s (%s); commands were refused from then on", x.Path, x.Reason, x.Error)
	case x.Action == "made readable":
		return fmt.Sprintf("made %s readable to the git check: %s", x.Path, x.Reason)
	case x.MovedTo == "":
		return fmt.Sprintf("quarantined %s by removing it: %s", x.Path, x.Reason)
	}
	return fmt.Sprintf("quarantined %s → %s: %s", x.Path, x.MovedTo, x.Reason)
}

// CallSummary renders a tool call on one line: the command of a shell
// call, the path of a file call, else the raw arguments, clipped.
func CallSummary(name, args string) string {
	var m map[string]any
	if json.Unmarshal([]byte(args), &m) == nil {
		for _, k := range []string{"command", "path", "pattern", "url", "code"} {
			if s, ok := m[k].(string); ok {
				return name + " " + Clip(OneLine(s), 120)
			}
		}
	}
	return name + " " + Clip(OneLine(args), 120)
}

// OneLine returns the first line of s, trimmed, with " …" when more
// lines follow.
func OneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

// FirstLine returns the first line of s, trimmed.
func FirstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}

// Clip returns s cut to n characters, with "…" when it was cut.
func Clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// MS says a duration in milliseconds, rounded to the millisecond.
func MS(d int64) string {
	return (time.Duration(d) * time.Millisecond).Round(time.Millisecond).String()
}

// Num writes n with thousands separators (12,345).
func Num(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (x *WorkspaceCheckpoint) Detail() string {
	d := fmt.Sprintf("checkpoint %s: %s", shortTree(x.Tree), filesDetail(x.Files, x.MoreFiles))
	if x.Unfinished != 0 {
		d += fmt.Sprintf(" (the rewind of event %d did not finish: the files are as this checkpoint has them)", x.Unfinished)
	}
	return d
}

func (x *WorkspaceRestored) Detail() string {
	d := fmt.Sprintf("files restored to event %d (%s): %s", x.To, shortTree(x.Tree), filesDetail(x.Files, x.MoreFiles))
	if x.By != "" {
		d += " by " + x.By
	}
	if x.Recovered != 0 {
		d += fmt.Sprintf(" (the rewind of event %d, found finished after it was cut short)", x.Recovered)
	}
	return d
}

func (x *WorkspaceRestoring) Detail() string {
	d := fmt.Sprintf("rewinding files to event %d (%s): %s", x.To, shortTree(x.Tree), filesDetail(x.Files, x.MoreFiles))
	if x.By != "" {
		d += " by " + x.By
	}
	return d
}

func shortTree(t string) string { return t[:min(12, len(t))] }

// filesDetail names a few changed files ("M a.go, A b.go, 3 more").
func filesDetail(files []FileChange, more int) string {
	if len(files) == 0 && more == 0 {
		return "no file changed"
	}
	var parts []string
	for i, f := range files {
		if i == 3 {
			more += len(files) - 3
			break
		}
		parts = append(parts, f.Status+" "+f.Path)
	}
	d := strings.Join(parts, ", ")
	if more > 0 {
		d += fmt.Sprintf(", %d more", more)
	}
	return d
}
