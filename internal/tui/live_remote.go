package tui

import (
	"io"
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// RemoteLive prints the deltas of a run followed on a team server
// (client.EventsParams.OnDelta) as keel run prints a local model's
// streamed text, through the same printer (escaped, indented). Deltas
// are not journaled: a stream reopened mid-call starts the call's text
// again at offset 0, so RemoteLive keeps what it printed of the call and
// prints only what comes after; when the call's model.responded arrives,
// the rest of the text that no delta brought (the connection was down)
// is printed before the step line, and nothing twice. Its methods are
// called from the goroutine that follows the run.
type RemoteLive struct {
	p *Printer
	// on: a call is being printed; after and call identify it.
	on    bool
	after int64
	call  int
	text  strings.Builder // the call's text printed so far
	// notes counts the call's tool and retry notes seen; skip, after a
	// reconnection, how many of the replayed ones to pass over.
	notes, skip int
}

// NewRemoteLive returns the printer of p's streamed text.
func NewRemoteLive(p *Printer) *RemoteLive { return &RemoteLive{p: p} }

// Delta prints d for a stream whose newest event is seen.
func (r *RemoteLive) Delta(d api.Delta, seen int64) {
	if d.CallID != "" {
		return // a command's output: the command line shows it when the call ends
	}
	if d.After < seen {
		return // stale: the call's event is in already
	}
	if !r.on || d.After != r.after || d.ModelCall != r.call {
		if d.Offset != 0 {
			return
		}
		r.on, r.after, r.call, r.notes, r.skip = true, d.After, d.ModelCall, 0, 0
		r.text.Reset()
	}
	if have := r.text.Len(); d.Text != "" && d.Offset <= have && have < d.Offset+len(d.Text) {
		s := d.Text[have-d.Offset:]
		r.text.WriteString(s)
		r.p.text(s)
	}
	if d.Tool == "" && d.Retry == "" {
		return
	}
	if r.skip > 0 {
		r.skip--
		return
	}
	r.notes++
	if d.Tool != "" {
		r.p.modelCall(d.Tool)
	}
	if d.Retry != "" {
		r.p.retryNote(d.Retry)
	}
}

// Reconnected is told that the stream was opened again: the call's
// notes come again and are not printed twice.
func (r *RemoteLive) Reconnected() { r.skip = r.notes }

// Event is told each event before the printer prints it: the call's
// model.responded completes the text printed of it.
func (r *RemoteLive) Event(e *journal.Event) {
	if !r.on || e.Seq <= r.after {
		return
	}
	r.on = false
	if e.Type != journal.ModelResponded || r.text.Len() == 0 {
		return
	}
	v, err := agent.Decode(e)
	if err != nil {
		return
	}
	if x, ok := v.(*agent.ModelResponded); ok {
		have := r.text.String()
		if c := x.Message.Content; len(c) > len(have) && strings.HasPrefix(c, have) {
			r.p.text(c[len(have):])
		}
	}
}

// EndText ends a streamed line that is still open, before a line that
// is not the printer's (a row of keel runs show).
func (p *Printer) EndText() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.textOpen {
		io.WriteString(p.raw, "\n")
		p.textOpen = false
	}
	p.streamed = false
}
