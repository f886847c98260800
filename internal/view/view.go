// Package view is the one model of a run's events as people see them.
// A [Reader] turns each event, in order, into a [Row]: the decoded
// payload, and what the events before it say about it (the step, the
// tool call it is about and that call's one-line summary, the time since
// the run began, the run's tokens and cost so far). Every view of a run
// renders rows: the terminal's live lines (keel run) and timeline (keel
// runs show), the web UI's timeline and conversation, the server's run
// summaries (the API's and the web UI's list of runs).
//
// How a view shows each event type is a table keyed by the type, one
// entry per type of package agent's table of event types ([agent.Types]),
// also for a type the view shows nothing of. [Check] reports the types a
// table lacks, and each view's test requires none: a new event type (one
// entry in agent's table) fails the test of every view until the view
// says how it shows it. Telemetry's span derivation keeps its own fold,
// keyed the same way and checked the same way.
package view

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// Row is one event of a run as the views see it. A Row is valid until
// the next call of [Reader.Read]; its Payload is the reader's, not to be
// modified.
type Row struct {
	Event *journal.Event
	// Payload is the decoded payload (*agent.RunCreated for run.created,
	// ...); nil when Err is set or the type is one this version does not
	// know (a newer journal).
	Payload agent.Payload
	// Err is set when the payload does not decode.
	Err error
	// Offset is the time since the run's first event.
	Offset time.Duration
	// Step is the number of model responses so far, this event's
	// included.
	Step int
	// CallID is the tool call the event is about, if any; Call that
	// call's one-line summary as the model asked for it (the tool and its
	// command, path or arguments), "" when the reader does not know it.
	CallID, Call string
	// Tokens and Cost are the run's so far, this event's included: model
	// calls and the summary calls of context compaction, as the run's
	// fold counts them.
	Tokens int64
	Cost   float64
}

// Reader reads a run's events, in order, into rows. It is not safe for
// concurrent use. The zero value keeps no call summaries (a few bytes
// per run); [NewReader] with calls keeps them.
type Reader struct {
	start  time.Time
	step   int
	tokens int64
	cost   float64
	calls  map[string]string
	row    Row
}

// NewReader returns a reader; calls says whether it keeps the summary of
// every tool call the model asked for (Row.Call).
func NewReader(calls bool) *Reader {
	r := &Reader{}
	if calls {
		r.calls = map[string]string{}
	}
	return r
}

// Call returns the summary of call id, or "".
func (r *Reader) Call(id string) string { return r.calls[id] }

// Read returns the row of e, the run's next event.
func (r *Reader) Read(e *journal.Event) *Row {
	if r.start.IsZero() {
		r.start = e.Time
	}
	r.row = Row{Event: e, Offset: e.Time.Sub(r.start)}
	row := &r.row
	v, err := agent.Decode(e)
	if err != nil {
		row.Err = err
	} else if p, ok := v.(agent.Payload); ok {
		row.Payload = p
		if f := rows[e.Type]; f != nil {
			f(r, row)
		}
	}
	row.Step, row.Tokens, row.Cost = r.step, r.tokens, r.cost
	if row.CallID != "" {
		row.Call = r.calls[row.CallID]
	}
	return row
}

// rows is what each event type adds to the reader and its row.
var rows = map[journal.Type]func(*Reader, *Row){
	journal.RunCreated:    nil,
	journal.RunResumed:    nil,
	journal.SetupFinished: nil,
	journal.ModelResponded: func(r *Reader, row *Row) {
		x := row.Payload.(*agent.ModelResponded)
		r.step++
		r.tokens += x.Usage.Total()
		r.cost += x.Cost
		if r.calls != nil {
			for _, c := range x.Message.ToolCalls {
				r.calls[c.ID] = agent.CallSummary(c.Name, c.Arguments)
			}
		}
	},
	journal.ModelFailed:       nil,
	journal.GateDecided:       func(_ *Reader, row *Row) { row.CallID = row.Payload.(*agent.GateDecided).CallID },
	journal.ApprovalRequested: func(_ *Reader, row *Row) { row.CallID = row.Payload.(*agent.ApprovalRequested).CallID },
	journal.ApprovalResolved:  func(_ *Reader, row *Row) { row.CallID = row.Payload.(*agent.ApprovalResolved).CallID },
	journal.AuthRequired:      func(_ *Reader, row *Row) { row.CallID = row.Payload.(*agent.AuthRequired).CallID },
	journal.AuthResolved:      func(_ *Reader, row *Row) { row.CallID = row.Payload.(*agent.AuthResolved).CallID },
	journal.InputRequested:    func(_ *Reader, row *Row) { row.CallID = row.Payload.(*agent.InputRequested).CallID },
	journal.InputAnswered:     nil,
	journal.ToolStarted:       func(_ *Reader, row *Row) { row.CallID = row.Payload.(*agent.ToolStarted).CallID },
	journal.ToolFinished:      func(_ *Reader, row *Row) { row.CallID = row.Payload.(*agent.ToolFinished).CallID },
	journal.RunCompleted:      nil,
	journal.RunFailed:         nil,
	journal.RunCanceled:       nil,
	journal.RunPaused:         nil,
	journal.UserMessage:       nil,
	journal.ContextCompacted: func(r *Reader, row *Row) {
		// Summary calls are paid too (their failed attempts included).
		x := row.Payload.(*agent.ContextCompacted)
		r.tokens += x.Usage.Total()
		r.cost += x.Cost
	},
	journal.SandboxEgress:       nil,
	journal.SandboxQuarantine:   nil,
	journal.WorkspaceCheckpoint: nil,
	journal.WorkspaceRestored:   nil,
	journal.WorkspaceRestoring:  nil,
	journal.ChildSpawned:        nil,
	journal.ChildDelivered:      nil,
}

// Check returns an error naming the event types of agent's table
// ([agent.Types]) that table has no entry for, and its entries for types
// agent does not know; nil when it has one entry for each type. Each
// view's test calls it on the view's table.
func Check[F any](table map[journal.Type]F) error {
	types := agent.Types()
	var missing, extra []string
	for _, t := range types {
		if _, ok := table[t]; !ok {
			missing = append(missing, string(t))
		}
	}
	for t := range table {
		if !slices.Contains(types, t) {
			extra = append(extra, string(t))
		}
	}
	slices.Sort(extra)
	var parts []string
	if len(missing) > 0 {
		parts = append(parts, "no entry for "+strings.Join(missing, ", ")+" (say how the view shows them, or that it shows nothing)")
	}
	if len(extra) > 0 {
		parts = append(parts, "entries for types agent does not know: "+strings.Join(extra, ", "))
	}
	if len(parts) == 0 {
		return nil
	}
	return fmt.Errorf("view: %s", strings.Join(parts, "; "))
}
