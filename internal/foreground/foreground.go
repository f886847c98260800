// Package foreground executes a run in this process, in front of the
// person at the terminal, as keel run, keel chat, keel runs resume,
// keel approve and keel demo do: the run's journal read and folded
// once, its events printed as they are journaled (internal/tui's
// Printer), its approvals asked at the terminal, approved by a stand-in
// or waited for, its child agents executed beside it (agent.LocalTeam),
// and its outcome returned for the command line to turn into an exit
// status. The live parts come assembled (internal/assemble); the
// command line parses the flags that fill [Execution] and [Terminal].
package foreground

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/service"
)

// Terminal is where an execution shows itself and asks its questions.
type Terminal struct {
	// Stdout and Stderr are the command's outputs (Stderr escaped);
	// Term is Stderr unescaped when it is a terminal (the live status
	// block), else nil.
	Stdout, Stderr, Term io.Writer
	// JSON writes the journal's events to Stdout as JSON lines; Quiet
	// prints only the final result.
	JSON, Quiet bool
	// Prompt is the person at the terminal: their lines and their
	// Ctrl-C. Inline reports that they can answer there (stdin is a
	// terminal).
	Prompt *tui.Prompt
	Inline bool
	// UsageSaid, shared by a process's executions, is whether the
	// estimated-usage note was said (tui.EstimatedUsageNote): keel chat
	// says it once, not at each turn. Nil: each execution says it.
	UsageSaid *bool
	// Keel is the command that reaches this journal (keel --db FILE),
	// for the hints printed.
	Keel string
	// Person is who decides at this terminal; Decide records a decision
	// as keel approve and keel deny do (through the service).
	Person string
	Decide tui.Decide
}

// Execution is one execution of a run in this process: its live parts
// and what the command asks of it beyond the run's journal.
type Execution struct {
	Runtime *agent.Runtime
	// Run is the run's live parts; Wire wires the child agents it
	// starts, as the run was.
	Run  *assemble.Run
	Wire agent.WireFunc
	// Handoff, ContextWindow, Limits, Settings and IfLastSeq are passed
	// to agent.ExecParams (a resume's changes, journaled in run.resumed).
	Handoff       bool
	ContextWindow int
	Limits        *agent.Limits
	Settings      *agent.Settings
	IfLastSeq     int64
	// Wait keeps the execution waiting for approvals (asked at the
	// terminal when a person is there); otherwise a question pauses
	// the run.
	Wait bool
	// Chat is a conversation (keel chat): its answers are printed for a
	// person at the terminal.
	Chat bool
	// StandIn, when set, approves what the run asks while nobody is at
	// the terminal, as this name, after showing it (keel demo).
	StandIn string
	// Attached: a resume that attached to the run's wait for a person
	// (service.ResumePlan.Attach). With Wait, the calls are decided
	// first (asked at the terminal, or waited for) and nothing is
	// journaled until they are, as keel --server URL runs resume does;
	// undecided, the run stays paused as it was.
	Attached bool
	*Terminal
}

// Loaded is a run's journal read, verified and folded once: what the
// command needs before it executes the run, then Execute's starting
// point ([agent.ExecParams.From]), which reads only what was appended
// after it.
type Loaded struct {
	State  *agent.State
	Events []journal.Event
}

// LoadIdle is Load for a resume that brings message ("": none): a run
// another process executes is a *BusyError before anything is read or
// set up (whose workspace would be found in use, by this very run).
func LoadIdle(ctx context.Context, store journal.Store, runID, message string) (*Loaded, error) {
	if l, ok := store.(journal.Locker); ok {
		if h, err := l.Holder(ctx, runID); err == nil && h != "" {
			return nil, withMessage(Busy(ctx, store, runID), message)
		}
	}
	return Load(ctx, store, runID)
}

// Load reads, verifies and folds runID's journal (once).
func Load(ctx context.Context, store journal.Store, runID string) (*Loaded, error) {
	st, evs, err := agent.NewRuntime(store, nil).Load(ctx, runID)
	if err != nil {
		return nil, err
	}
	return &Loaded{State: st, Events: evs}, nil
}

// Execute runs (or resumes) runID, as ld holds it (nil: read it), with
// message the person's (journaled before the execution goes on; "":
// none), printing its progress. Execute starts from ld's fold; ld must
// not be used after. Another process executing the run is a *BusyError.
func (x *Execution) Execute(ctx context.Context, runID string, ld *Loaded, message string) (*agent.Outcome, error) {
	rt := x.Runtime
	p := tui.NewPrinter(x.Stderr, x.Stdout, x.JSON, x.Quiet)
	p.OnTerminal(x.Term)
	// A conversation at a terminal prints answers on stderr only (they
	// stream there); with stdin piped, a chat's answers go to stdout as
	// keel run's do.
	p.Chat = x.Chat && x.Inline
	p.Converse = x.Chat
	p.Keel = x.Keel
	// These reads ignore a stop (Ctrl-C) that comes meanwhile, as
	// Execute's own load does: its first step then records it, and the
	// run ends canceled instead of staying as it was.
	rctx := context.WithoutCancel(ctx)
	if ld == nil {
		var err error
		if ld, err = Load(rctx, rt.Store(), runID); err != nil {
			return nil, err
		}
	}
	st, evs := ld.State, ld.Events
	created := st.Created
	// Say so before the header when another process executes the run
	// (Execute refuses it too, should one start meanwhile).
	if l, ok := rt.Store().(journal.Locker); ok {
		if h, err := l.Holder(rctx, runID); err == nil && h != "" {
			return nil, withMessage(Busy(rctx, rt.Store(), runID), message)
		}
	}
	if !p.Chat || message == "" {
		p.Header(runID, st.Created, x.Run)
	}
	if x.JSON {
		for _, e := range evs {
			p.Event(e)
		}
	} else {
		// A resumed run: learn the earlier calls and steps without
		// printing them again, so that lines name their tools and the
		// step counter goes on.
		p.Prime(evs)
	}
	if x.Attached && x.Wait && !x.Handoff && x.IfLastSeq == 0 && message == "" && len(st.Pending()) > 0 {
		decided, err := x.decideFirst(ctx, runID, st, x.Inline && !x.JSON)
		if errors.Is(err, agent.ErrRunBusy) {
			return nil, Busy(rctx, rt.Store(), runID)
		}
		if err != nil {
			return nil, err
		}
		if !decided {
			// Ctrl-C: nothing journaled, the run stays as it was.
			fmt.Fprintf(x.Stderr, "keel: run %s stays paused\n", runID)
			out := &agent.Outcome{Status: st.Status, End: st.Ended, State: st}
			p.Footer(runID, out)
			return out, nil
		}
		// Execute goes on from the journal as the decisions left it.
		if ld, err = Load(rctx, rt.Store(), runID); err != nil {
			return nil, err
		}
		st, evs = ld.State, ld.Events
	}
	params := &agent.ExecParams{Wiring: x.Run.Wiring, OnEvent: p.Event, Handoff: x.Handoff, ContextWindow: x.ContextWindow,
		Wait: x.Wait, IfLastSeq: x.IfLastSeq, Limits: x.Limits, Settings: x.Settings, Message: message}
	if !x.JSON {
		params.OnEvent = tui.EstimatedUsageNote(p.Err(), created.Model, x.UsageSaid, params.OnEvent)
	}
	// Execute goes on from this fold, reading only what was appended
	// since (it verifies that against the newest hash read here).
	params.From = &agent.Checkpoint{State: st, Hash: evs[len(evs)-1].Hash}
	params.Principals = identity.NewDirectory(rt.Store(), nil).Check
	// Approvals asked at this terminal show the call themselves.
	inline := x.Wait && !x.JSON && x.Inline
	// One question at a time at the terminal: the lead's and its
	// children's, which may ask at once.
	var asking sync.Mutex
	ask := func(f func()) {
		asking.Lock()
		defer asking.Unlock()
		p.Pause()
		defer p.Resume()
		f()
	}
	// Children execute in this process, each wired like its parent. A
	// child's question is asked here as the lead's are; a child that
	// pauses for a person (no terminal, or --no-wait) pauses its lead:
	// nothing here would continue it.
	team := &agent.LocalTeam{Runtime: rt, Wire: x.Wire, ReturnPaused: true, Params: func(_ string, cp *agent.ExecParams) {
		cp.Principals = params.Principals
		cp.Wait = params.Wait
		cp.OnWait = func(pending []agent.PendingApproval) {
			ask(func() { x.childWait(ctx, rt.Store(), pending, inline) })
		}
	}}
	defer team.Close()
	params.Team = team
	params.OnWait = func(pending []agent.PendingApproval) {
		ask(func() {
			if inline && x.Prompt.DecideInline(ctx, &tui.Asking{Created: created, By: x.Person, Decide: x.Decide, Keel: x.Keel}, pending) {
				return // decided here: the run goes on
			}
			if x.StandIn != "" && !x.Inline && tui.ApproveAsStandIn(ctx, x.Stderr, created, pending, x.StandIn, x.Decide) {
				return // approved by the stand-in: the run goes on
			}
			if ctx.Err() != nil {
				return // interrupted at the question: the run stops
			}
			tui.Waiting(x.Stderr, pending, "")
		})
	}
	params.Trace = agent.ChainTrace(params.Trace, p.CallContext)
	// The stand-in shows the question as a person would see it: the
	// printer does not announce it first, nor how to decide.
	p.Inline = inline || x.StandIn != "" && x.Wait && !x.Inline && !x.JSON
	x.Prompt.Attach(p)
	defer x.Prompt.Attach(nil)
	if x.Inline && !x.Chat {
		// What the person types while the run prints does not land in
		// its output (a conversation's turn does the same).
		defer x.Prompt.Quiet()()
	}
	stopLive := p.StartLive()
	out, err := rt.Execute(ctx, runID, params)
	stopLive()
	if errors.Is(err, agent.ErrRunBusy) {
		return nil, withMessage(Busy(ctx, rt.Store(), runID), message)
	}
	if err != nil {
		return nil, err
	}
	p.Footer(runID, out)
	if !x.JSON {
		if out.Status == journal.StatusPaused && out.End != nil && out.End.Reason == agent.ReasonChildren {
			x.childrenWaits(rctx, rt.Store(), runID, out.State)
		}
		x.leadHint(created, out.Status)
	}
	p.Unread(runID, out.State, message)
	return out, nil
}

// decideFirst has the calls run st waits for decided before anything is
// journaled: asked at this terminal (inline), else, or when the input
// ends, said and waited for while anyone decides them (keel approve, the
// API). It returns true once no call waits (or a deadline passed: the
// execution applies its default), false when ctx ended first.
func (x *Execution) decideFirst(ctx context.Context, runID string, st *agent.State, inline bool) (bool, error) {
	pending := st.Pending()
	var deadline *time.Time
	for _, p := range pending {
		if e := p.Expires; e != nil && (deadline == nil || e.Before(*deadline)) {
			deadline = e
		}
	}
	if deadline != nil && !time.Now().Before(*deadline) {
		return true, nil
	}
	if inline && x.Prompt.DecideInline(ctx, &tui.Asking{Created: st.Created, By: x.Person, Decide: x.Decide, Keel: x.Keel}, pending) {
		return true, nil
	}
	if ctx.Err() != nil {
		return false, nil
	}
	tui.Waiting(x.Stderr, pending, "")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if deadline != nil {
		t := time.AfterFunc(time.Until(*deadline), cancel)
		defer t.Stop()
	}
	for e, err := range journal.Follow(wctx, x.Runtime.Store(), runID, st.LastSeq+1, 0) {
		if ctx.Err() != nil {
			return false, nil
		}
		if wctx.Err() != nil {
			return true, nil // the deadline passed
		}
		if err != nil {
			return false, err
		}
		if e.Type != journal.ApprovalResolved && e.Type != journal.AuthResolved {
			return false, fmt.Errorf("run %s: %w (it continued meanwhile)", runID, agent.ErrRunBusy)
		}
		if err := st.Apply(&e); err != nil {
			return false, err
		}
		if len(st.Pending()) == 0 {
			return true, nil
		}
	}
	return ctx.Err() == nil, nil
}

// Attach prints run runID, as ld holds it, for a resume that attached to
// the run's wait for a person (service.ResumePlan) with nobody at this
// terminal to ask: keel run's header, with JSON the run's events, and
// the footer saying what the run waits for and how to decide, as keel
// --server URL runs resume prints a team server's run (tui.Follow). It
// executes and journals nothing. Another process executing the run is a
// *BusyError.
func (t *Terminal) Attach(ctx context.Context, store journal.Store, runID string, ld *Loaded) (*agent.Outcome, error) {
	if l, ok := store.(journal.Locker); ok {
		if h, err := l.Holder(ctx, runID); err == nil && h != "" {
			return nil, Busy(ctx, store, runID)
		}
	}
	p := tui.NewPrinter(t.Stderr, t.Stdout, t.JSON, t.Quiet)
	p.Keel = t.Keel
	st := ld.State
	p.Header(runID, st.Created, nil)
	if t.JSON {
		for _, e := range ld.Events {
			p.Event(e)
		}
	} else {
		p.Prime(ld.Events)
	}
	out := &agent.Outcome{Status: st.Status, End: st.Ended, State: st}
	p.Footer(runID, out)
	return out, nil
}

// BusyError reports that another process executes a run: one readable
// sentence instead of the runtime's error chain. It wraps
// agent.ErrRunBusy.
type BusyError struct {
	RunID, Holder string
	// Message: the execution was given a person's message, which was
	// not journaled.
	Message bool
}

func (e *BusyError) Error() string {
	return service.Executing(e.RunID, e.Holder, e.Message).Message
}

func (e *BusyError) Unwrap() error { return agent.ErrRunBusy }

// Busy is the *BusyError of runID, naming the holder of its lease when
// the store knows it.
func Busy(ctx context.Context, store journal.Store, runID string) error {
	who := "another process"
	if l, ok := store.(journal.Locker); ok {
		if h, err := l.Holder(ctx, runID); err == nil && h != "" {
			who = "another process (" + h + ")"
		}
	}
	return &BusyError{RunID: runID, Holder: who}
}

// withMessage marks a BusyError of an execution given a person's
// message: the message was not journaled, and the error says so.
func withMessage(err error, message string) error {
	var b *BusyError
	if message != "" && errors.As(err, &b) {
		b.Message = true
	}
	return err
}
