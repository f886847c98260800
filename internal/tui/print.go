// Package tui is the terminal front end of keel: how a run looks on a
// terminal while it executes (the printer of its events, the status block
// redrawn in place, a team server's streamed text), how keel runs show
// prints a stored run, and the conversation's prompt (keel chat): the
// person's lines, Ctrl-C that interrupts a turn, approvals asked inline.
// Everything it prints that came from a model, a tool or the journal is
// escaped (package visible).
package tui

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/internal/view"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/service"
)

// Printer streams a run's events as human lines to stderr, or as JSON
// lines to stdout.
type Printer struct {
	mu      sync.Mutex
	err     io.Writer
	out     io.Writer
	json    bool
	quiet   bool
	steps   int
	tokens  int64
	cost    float64
	started time.Time
	// rows reads the events into rows (steps, totals, call summaries).
	rows *view.Reader
	// keel is the command hints name: "keel", or "keel --server URL" when
	// the run is on a team server.
	Keel string
	// raw is stderr unescaped (err writes through it); live is the status
	// block when stderr is a terminal (live.go).
	raw  io.Writer
	live *liveView
	// streamed: the model's text of the current call was printed as it
	// arrived; lineStart: the next streamed rune starts a line; textOpen:
	// the cursor is at the end of a streamed line; paused: a question to
	// the person is on screen.
	streamed, lineStart, textOpen, paused bool
	// chat: a conversation (keel chat): answers are printed whole on
	// stderr as they come, not again on stdout.
	Chat bool
	// Converse: the execution is a turn of a conversation (keel chat,
	// also with stdin piped), whose /limit raises a limit.
	Converse bool
	// oneTerm: stdout is the terminal stderr is on (keel run at a
	// terminal): as in a conversation, the answer is printed whole on
	// stderr as it comes, and not again on stdout.
	oneTerm bool
	// answer is the newest model message printed whole on stderr.
	answer string
	// Inline: approvals are asked at this terminal, which shows the
	// call, why it asks and its diff: the printer does not say it first.
	Inline bool
	// created is the run's run.created; diffs are the diffs of the file
	// edits running now (by call id), shown with their results; asked
	// are the calls a person was asked about (their diff was shown
	// then); modelError is the newest model error printed.
	created    *agent.RunCreated
	diffs      map[string]string
	asked      map[string]bool
	modelError string
	// egress is the network line printed last, and egressAgain how many
	// identical ones came after it (a client's retries open one tunnel
	// each): they are said once, as a count, before the next line.
	egress      string
	egressAgain int
}

// maxEditLines bounds the diff shown with an edit's result.
const maxEditLines = 40

// NewPrinter returns the printer of human lines on stderr or, with
// jsonOut, of JSON lines on stdout; quiet prints only why a run did not
// complete.
func NewPrinter(stderr, stdout io.Writer, jsonOut, quiet bool) *Printer {
	one := !jsonOut && !quiet && sameTerminal(stdout, stderr)
	if !jsonOut && IsTerminal(stdout) {
		stdout = escWriter{stdout}
	}
	p := &Printer{raw: stderr, out: stdout, json: jsonOut, quiet: quiet, oneTerm: one, rows: view.NewReader(true), Keel: "keel"}
	p.err = escWriter{guarded{p}}
	return p
}

// OnTerminal draws the status block on term, stderr unescaped (nil: not
// a terminal).
func (p *Printer) OnTerminal(term io.Writer) {
	if term == nil || p.json || p.quiet {
		return
	}
	if p.live = newLiveView(term); p.live != nil {
		p.raw = term
	}
}

// Header prints the line that starts an execution of a run: its model,
// workspace and sandbox (as r, the assembled run, describes the sandbox
// when it is given), the sandbox's warnings and a missing price.
func (p *Printer) Header(runID string, c *agent.RunCreated, w *assemble.Run) {
	if p.quiet {
		return
	}
	sb := c.Sandbox
	if w != nil && w.SandboxNote != "" {
		sb = w.SandboxNote
	}
	fmt.Fprintf(p.err, "keel: run %s · model %s · workspace %s → %s · sandbox %s\n", runID, c.Model, c.Workspace, c.MountPath, sb)
	if w != nil {
		for _, l := range strings.Split(w.Mechanisms, "\n") {
			if strings.HasPrefix(l, "warning: ") {
				fmt.Fprintf(p.err, "keel: sandbox %s\n", l)
			}
		}
	}
	if w != nil && !w.Priced && !strings.HasPrefix(c.Model, "scripted:") {
		fmt.Fprintf(p.err, "keel: %s\n", noPrice(c.Model, w.PriceKey))
	}
}

// Unread says, when run runID (folded in st) waits for calls to be
// decided before the model reads message (a person's message sent with
// a resume), that the message is journaled and when it is read. It says
// nothing for "" or a message the model has read.
func (p *Printer) Unread(runID string, st *agent.State, message string) {
	pending := st.Pending()
	if message == "" || len(pending) == 0 || !unread(st, message) {
		return
	}
	ids := make([]string, len(pending))
	for i, pa := range pending {
		ids[i] = pa.CallID
	}
	keel := p.Keel
	if keel == "" {
		keel = "keel"
	}
	fmt.Fprintf(p.err, "keel: your message is journaled; the model reads it once %s %s decided (%s approve|deny %s CALL)\n",
		strings.Join(ids, ", "), map[bool]string{true: "is", false: "are"}[len(ids) == 1], keel, runID)
}

// unread reports whether message is the newest message of st and comes
// after its newest turn: the model has not read it yet.
func unread(st *agent.State, message string) bool {
	n := len(st.Messages)
	t := st.LastTurn()
	return n > 0 && st.Messages[n-1].Content == message && (t == nil || t.Index < n-1)
}

// noPrice says that model spec has no price, and the config.toml table
// that gives it one: the key its price is looked up by (a recording's
// model for a replay, the model's name without its provider otherwise).
func noPrice(spec, key string) string {
	if key == "" {
		return fmt.Sprintf("no price known for %s: cost shows $0 (add [prices] to config.toml)", spec)
	}
	of := ""
	if !strings.HasSuffix(spec, ":"+key) {
		of = fmt.Sprintf(" (priced as %s)", strconv.Quote(key))
	}
	return fmt.Sprintf("no price known for %s%s: cost shows $0 (add [prices.%s] with input and output USD per million tokens to config.toml)", spec, of, strconv.Quote(key))
}

// Event prints e (on stderr, or as a JSON line on stdout) and counts it.
func (p *Printer) Event(e journal.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started.IsZero() {
		p.started = e.Time
	}
	if p.json {
		b, _ := json.Marshal(e)
		fmt.Fprintf(p.out, "%s\n", b)
	}
	row := p.rows.Read(&e)
	if row.Payload == nil {
		return
	}
	if c, ok := row.Payload.(*agent.RunCreated); ok {
		p.created = c
	}
	p.steps, p.tokens, p.cost = row.Step, row.Tokens, row.Cost
	if p.quiet || p.json {
		return
	}
	if f := printRows[e.Type]; f != nil {
		if e.Type != journal.SandboxEgress {
			p.endEgress()
		}
		f(p, row)
	}
}

// egressLine prints a decision of the sandbox's egress proxy, or counts
// it when it repeats the line printed just before.
func (p *Printer) egressLine(r *view.Row) {
	d := r.Payload.Detail()
	if d == p.egress {
		p.egressAgain++
		return
	}
	p.endEgress()
	fmt.Fprintf(p.err, "    network: %s\n", d)
	p.egress = d
}

// endEgress says how many times the last network line repeated, before
// another line is printed.
func (p *Printer) endEgress() {
	if p.egressAgain > 0 {
		times := "times"
		if p.egressAgain == 1 {
			times = "time"
		}
		fmt.Fprintf(p.err, "    network: the same again, %d more %s\n", p.egressAgain, times)
	}
	p.egress, p.egressAgain = "", 0
}

// printRows says how keel run prints each event type on stderr, one
// entry per type (view.Check); nil prints nothing of it.
var printRows = map[journal.Type]func(*Printer, *view.Row){
	journal.RunCreated:          nil, // the header says it
	journal.RunResumed:          (*Printer).resumed,
	journal.SetupFinished:       (*Printer).setupFinished,
	journal.ModelResponded:      (*Printer).modelResponded,
	journal.ModelFailed:         (*Printer).modelFailed,
	journal.GateDecided:         (*Printer).gateDecided,
	journal.ApprovalRequested:   (*Printer).approvalRequested,
	journal.ApprovalResolved:    nil, // the call's start or its denied result follows
	journal.AuthRequired:        (*Printer).authRequired,
	journal.AuthResolved:        nil, // the call's start follows
	journal.InputRequested:      (*Printer).inputRequested,
	journal.InputAnswered:       func(p *Printer, r *view.Row) { fmt.Fprintf(p.err, "  input %s\n", r.Payload.Detail()) },
	journal.ToolStarted:         (*Printer).toolStarted,
	journal.ToolFinished:        (*Printer).toolFinished,
	journal.RunCompleted:        nil, // the footer says how the run ended
	journal.RunFailed:           nil,
	journal.RunCanceled:         nil,
	journal.RunPaused:           nil,
	journal.UserMessage:         (*Printer).userMessage,
	journal.ContextCompacted:    func(p *Printer, r *view.Row) { fmt.Fprintf(p.err, "context compacted: %s\n", r.Payload.Detail()) },
	journal.SandboxEgress:       (*Printer).egressLine,
	journal.SandboxQuarantine:   func(p *Printer, r *view.Row) { fmt.Fprintf(p.err, "    %s\n", r.Payload.Detail()) },
	journal.WorkspaceCheckpoint: (*Printer).rewindOutcome, // keel runs show and diff list them
	journal.WorkspaceRestored:   (*Printer).rewindOutcome,
	journal.WorkspaceRestoring:  nil, // its outcome follows
	journal.ChildSpawned:        func(p *Printer, r *view.Row) { fmt.Fprintf(p.err, "  child spawned: %s\n", r.Payload.Detail()) },
	journal.ChildDelivered:      func(p *Printer, r *view.Row) { fmt.Fprintf(p.err, "  child delivered: %s\n", r.Payload.Detail()) },
}

// rewindOutcome says what a snapshot found of a rewind that was cut
// short (journaled, its end not): finished, or not; a plain checkpoint
// or restore says nothing (keel runs show and diff list them).
func (p *Printer) rewindOutcome(r *view.Row) {
	switch x := r.Payload.(type) {
	case *agent.WorkspaceCheckpoint:
		if x.Unfinished != 0 {
			fmt.Fprintf(p.err, "keel: the rewind of event %d did not finish: the files are as checkpoint %d has them (rewind again to finish it)\n", x.Unfinished, r.Event.Seq)
		}
	case *agent.WorkspaceRestored:
		if x.Recovered != 0 {
			fmt.Fprintf(p.err, "keel: the rewind of event %d had finished (its end was not journaled): the files are those of event %d\n", x.Recovered, x.To)
		}
	}
}

// resumed says what a resume changed; a plain one (after a decision,
// the next turn of a conversation, keel runs resume) says nothing: the
// run simply goes on.
func (p *Printer) resumed(r *view.Row) {
	if w := r.Payload.(*agent.RunResumed).Changes(); w != "" {
		fmt.Fprintf(p.err, "keel: resumed: %s\n", w)
	}
}

func (p *Printer) setupFinished(r *view.Row) {
	x := r.Payload.(*agent.SetupFinished)
	fmt.Fprintf(p.err, "setup: exit %d (%s)\n", x.ExitCode, ms(x.DurationMS))
	if x.ExitCode != 0 {
		fmt.Fprintln(p.err, indent(tail(x.Output, 20)))
	}
}

func (p *Printer) modelResponded(r *view.Row) {
	x := r.Payload.(*agent.ModelResponded)
	streamed := p.streamed
	p.streamed = false
	if p.live != nil {
		p.live.model = false
	}
	// The step's text, then its line, as a streamed answer shows them
	// (docs/interactive.md): each line closes the step above it.
	whole := p.Chat || p.oneTerm && len(x.Message.ToolCalls) == 0
	p.answer = ""
	if t := strings.TrimSpace(x.Message.Content); t != "" && !streamed {
		if !whole {
			t = clip(t, 400)
		}
		fmt.Fprintln(p.err, indent(t))
	}
	fmt.Fprintf(p.err, "step %d · %s tok", r.Step, num(x.Usage.Total()))
	if x.Usage.CachedInputTokens > 0 {
		fmt.Fprintf(p.err, " (%s cached)", num(x.Usage.CachedInputTokens))
	}
	fmt.Fprintf(p.err, " · %s · total %s tok $%.4f\n", ms(x.DurationMS), num(r.Tokens), r.Cost)
	if streamed || whole {
		p.answer = x.Message.Content
	}
}

func (p *Printer) modelFailed(r *view.Row) {
	x := r.Payload.(*agent.ModelFailed)
	p.streamed = false
	if p.live != nil {
		p.live.model = false
	}
	p.modelError = x.Message
	fmt.Fprintf(p.err, "model error (%s): %s\n", x.Kind, x.Message)
}

func (p *Printer) gateDecided(r *view.Row) {
	x := r.Payload.(*agent.GateDecided)
	if x.Effect == "allow" || x.Effect == "deny" || x.Effect == "ask" && p.Inline {
		// Allowed; denied (the call's result says it, with the reason:
		// "✗ CALL: the policy denied this call: REASON"); or asked at
		// this terminal (the question says why).
		return
	}
	fmt.Fprintf(p.err, "  %s %s: %s\n", x.Effect, r.Call, firstLine(x.Reason))
}

func (p *Printer) approvalRequested(r *view.Row) {
	if p.asked == nil {
		p.asked = map[string]bool{}
	}
	p.asked[r.CallID] = true
	if p.Inline {
		return // the question at this terminal shows it
	}
	fmt.Fprintf(p.err, "  approval needed for %s: %s approve %s %s\n", r.Call, p.Keel, r.Event.RunID, ShellWord(r.CallID))
}

// toolStarted prints the call; for a file edit on a terminal or in a
// conversation, it keeps the diff the edit makes (the file is as it was:
// the event is printed before the tool runs) to show with its result,
// unless a person saw it when asked.
func (p *Printer) toolStarted(r *view.Row) {
	fmt.Fprintf(p.err, "  %s\n", r.Call)
	x := r.Payload.(*agent.ToolStarted)
	if p.created == nil || p.asked[x.CallID] || !p.Chat && p.live == nil {
		return
	}
	if d := editDiff(p.created, x.Tool, x.Arguments, maxEditLines, false); d != "" {
		if p.diffs == nil {
			p.diffs = map[string]string{}
		}
		p.diffs[x.CallID] = d
	}
}

// authRequired says what a call waits for and the command that ends the
// wait (the run pauses; the footer says so).
func (p *Printer) authRequired(r *view.Row) {
	x := r.Payload.(*agent.AuthRequired)
	fmt.Fprintf(p.err, "  authorization needed for %s (%s): %s\n", r.Call, x.Reason, x.Hint)
}

func (p *Printer) inputRequested(r *view.Row) {
	x := r.Payload.(*agent.InputRequested)
	fmt.Fprintf(p.err, "  %s asks a person: %s\n    answer: %s inputs answer %s %s --set NAME=VALUE ... (or --decline; %s inputs list shows the form)\n",
		x.Server, clip(firstLine(x.Message), 200), p.Keel, r.Event.RunID, x.ID, p.Keel)
}

func (p *Printer) toolFinished(r *view.Row) {
	x := r.Payload.(*agent.ToolFinished)
	p.callDone(x.CallID)
	d := p.diffs[x.CallID]
	delete(p.diffs, x.CallID)
	if x.Synthetic {
		fmt.Fprintf(p.err, "  ✗ %s: %s\n", r.Call, firstLine(x.Content))
		return
	}
	fmt.Fprintf(p.err, "    → %s\n", x.Detail())
	if d != "" && !x.IsError {
		fmt.Fprint(p.err, indent(strings.TrimSuffix(d, "\n"))+"\n")
	}
}

func (p *Printer) userMessage(r *view.Row) {
	x := r.Payload.(*agent.UserMessage)
	if p.Chat && (x.Source == "" || x.Source == agent.InterruptSource) {
		return // the person just typed it, or interrupted (said at the prompt)
	}
	who := "user"
	if x.Source != "" {
		who = x.Source
	}
	fmt.Fprintf(p.err, "%s: %s\n", who, clip(x.Content, 200))
}

// Prime records what events (a run's history) say about calls and totals,
// printing nothing.
func (p *Printer) Prime(events []journal.Event) {
	q := p.quiet
	p.quiet = true
	for _, e := range events {
		p.Event(e)
	}
	p.quiet = q
}

// limitFlag maps a limit's end reason to the flag that raises it.
var limitFlag = map[string]string{"max_steps": "--max-steps", "max_tokens": "--max-tokens", "max_cost": "--max-cost", "max_tool_calls": "--max-tool-calls", "timeout": "--timeout"}

// healthStop are the end reasons of loop detection (agent/health.go).
var healthStop = map[string]bool{"repeated_calls": true, "format_errors": true, "output_limit": true, "empty_answers": true,
	"invalid_calls": true, "response_too_large": true}

// ChatLimitHint says how a conversation goes on with a run stopped by
// the limit reason: its /limit command with the value continueHint
// names, then the next message.
func ChatLimitHint(reason string, st *agent.State) string {
	if reason == "timeout" {
		return fmt.Sprintf("the wall-time limit (%s) counts one turn: your next message goes on (/limit --timeout DURATION sets a longer one)", time.Duration(st.Limits.Timeout))
	}
	return fmt.Sprintf("to go on, raise the limit: /limit %s %s, then type your next message", limitFlag[reason], limitValue(reason, st))
}

// limitValue is the value continueHint names to raise the limit reason
// (service.RaisedLimit).
func limitValue(reason string, st *agent.State) string {
	return cmp.Or(service.RaisedLimit(reason, st), "N")
}

// continueHint says how to go on with a run stopped by the limit reason:
// resuming (or handing off) under the same step, token or cost limit
// would stop again at once, so it names the flag and a doubled value; the
// wall-time limit counts one execution, so a plain resume starts afresh.
func continueHint(keel, runID, reason string, st *agent.State) string {
	l := st.Limits
	flag := limitFlag[reason]
	if reason == "timeout" {
		return fmt.Sprintf("the wall-time limit (%s) counts one execution: go on with %s runs resume %s (or a longer %s)", time.Duration(l.Timeout), keel, runID, flag)
	}
	// Twice the larger of the limit and what is used: a run can pass a
	// token or cost limit by a whole model call, and a value below the
	// usage would stop the resumed run at once.
	return fmt.Sprintf("to go on, raise the limit: %s runs resume %s %s %s", keel, runID, flag, limitValue(reason, st))
}

// Footer prints how an execution of runID ended (o), what to do next,
// and a completed run's output on stdout.
func (p *Printer) Footer(runID string, o *agent.Outcome) {
	p.mu.Lock()
	p.endEgress()
	p.mu.Unlock()
	st := o.State
	switch {
	case p.json || o.Status != journal.StatusFailed || o.End == nil:
	case limitFlag[o.End.Reason] != "":
		hint := continueHint(p.Keel, runID, o.End.Reason, st)
		if p.Converse {
			hint = ChatLimitHint(o.End.Reason, st)
		}
		defer fmt.Fprintf(p.err, "keel: %s\n", hint)
	case o.End.RetryAt != nil:
		// The provider limited the rate for longer than the retries
		// wait: say until when, and how to go on then.
		defer fmt.Fprintf(p.err, "keel: the provider asked Keel to wait until %s (%s from now); go on then with: %s runs resume %s\n",
			o.End.RetryAt.Local().Format("15:04:05 MST"), time.Until(*o.End.RetryAt).Round(time.Second), p.Keel, runID)
	case healthStop[o.End.Reason]:
		// Loop detection stopped the model: a plain resume would stop
		// again at once; a person's message starts it afresh.
		defer fmt.Fprintf(p.err, "keel: to go on, tell the model what to do differently: %s runs resume %s --message TEXT\n", p.Keel, runID)
	}
	if p.quiet && !p.json && o.Status != journal.StatusCompleted {
		// Quiet still says why a run did not complete.
		msg := string(o.Status)
		if o.End != nil {
			msg += " (" + o.End.Reason
			if by, ok := canceledBy(o); ok {
				msg = string(o.Status) + " (" + by
			} else if o.End.Message != "" {
				msg += ": " + o.End.Message
			}
			msg += ")"
		}
		fmt.Fprintf(p.err, "keel: run %s %s\n", runID, msg)
	}
	if !p.quiet && !p.json {
		msg := ""
		if o.End != nil {
			msg = o.End.Reason
			by, isBy := canceledBy(o)
			switch {
			case isBy:
				// "canceled (by user)", not "canceled (user: canceled by user)".
				msg = by
			case o.End.Message == "" || o.Status == journal.StatusCompleted:
			case p.modelError != "" && strings.HasPrefix(o.End.Message, p.modelError):
				// The model error was just printed; what the end adds (a
				// provider's wait) has a line of its own below.
				msg += ", above"
			default:
				msg += ": " + o.End.Message
			}
		} else if pending := st.Pending(); o.Status == journal.StatusPaused && len(pending) > 0 {
			// An approval.requested pauses a run without a run.paused.
			ids := make([]string, len(pending))
			for i, pa := range pending {
				ids[i] = pa.CallID
			}
			msg = "approval: waiting for approval of " + strings.Join(ids, ", ")
		}
		fmt.Fprintf(p.err, "keel: run %s %s (%s) · %d steps · %s tok · $%.4f\n", runID, o.Status, msg, st.Steps, num(st.Usage.Total()), st.Cost)
		switch pending := st.Pending(); {
		case o.Status == journal.StatusPaused && len(pending) > 0:
			// Resuming a run that waits for a person only waits again:
			// say how to decide (the run goes on after the decision).
			for _, pa := range pending {
				fmt.Fprintf(p.err, "keel: decide with: %s approve %s %s   or   %s deny %s %s --reason TEXT\n",
					p.Keel, runID, ShellWord(pa.CallID), p.Keel, runID, ShellWord(pa.CallID))
			}
		case o.Status == journal.StatusPaused && p.Chat && o.End != nil && o.End.Reason == agent.ReasonInterrupted:
			// The conversation's prompt goes on (converse says so).
		case o.Status == journal.StatusPaused, o.Status == journal.StatusCanceled && !p.Chat:
			fmt.Fprintf(p.err, "keel: resume with: %s runs resume %s\n", p.Keel, runID)
		}
	}
	if !p.json && !p.Chat && !(p.oneTerm && o.End != nil && p.said(o.End.Output)) && o.Status == journal.StatusCompleted && o.End != nil && o.End.Output != "" {
		fmt.Fprint(p.out, o.End.Output)
		if !strings.HasSuffix(o.End.Output, "\n") {
			fmt.Fprintln(p.out)
		}
	}
}

// canceledBy returns "by WHO" when o is a cancel by a person (reason
// user, message "canceled by WHO"): the line says it once.
func canceledBy(o *agent.Outcome) (string, bool) {
	if o.Status != journal.StatusCanceled || o.End == nil || o.End.Reason != agent.ReasonUser {
		return "", false
	}
	by, ok := strings.CutPrefix(o.End.Message, "canceled ")
	return by, ok && strings.HasPrefix(by, "by ")
}

// said reports whether out, a run's output, is the model's answer the
// printer showed whole on stderr.
func (p *Printer) said(out string) bool {
	return strings.TrimSpace(out) != "" && strings.TrimSpace(out) == strings.TrimSpace(p.answer)
}

// Text helpers shared with the event details of package agent.
var (
	num, ms       = agent.Num, agent.MS
	clip, oneLine = agent.Clip, agent.OneLine
	firstLine     = agent.FirstLine
)

// ShellWord quotes s for a shell command line when it holds anything but
// letters, digits and -_.,:@/= (a call id in a hint a person copies).
func ShellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.,:@/=") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func tail(s string, lines int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// Err is the writer of the printer's human lines (escaped, and erasing
// the status block first).
func (p *Printer) Err() io.Writer { return p.err }
