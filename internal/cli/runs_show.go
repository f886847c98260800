package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/tool"
)

// outputTail is how many lines of each call's output keel runs show
// prints without --full.
const outputTail = 20

// maxShownArtifact bounds a whole output keel runs show --full reads.
const maxShownArtifact = 64 << 20

// timeline prints the rows of keel runs show, one event at a time, so
// that stored and followed events print alike. The detail of each event
// is its payload's Detail (the one table of event types in package
// agent); the timeline adds what needs the events before it: the step,
// each call's summary at its start, the settings a resume changed, and
// each call's output under its result.
type timeline struct {
	tw        *tabwriter.Writer
	start     time.Time
	created   *agent.RunCreated
	step      int
	estimated int
	calls     map[string]string
	settings  agent.Settings
	opts      *showOptions
}

func (t *timeline) add(e *journal.Event) {
	if t.start.IsZero() {
		t.start = e.Time
	}
	v, err := agent.Decode(e)
	detail := ""
	if p, ok := v.(agent.Payload); ok {
		detail = p.Detail()
	}
	var output []string
	switch x := v.(type) {
	case *agent.RunCreated:
		t.created = x
		if x.Settings != nil {
			t.settings = *x.Settings
		}
	case *agent.RunResumed:
		// The settings a resume changed, compared with the run's
		// settings before it.
		if x.Settings != nil {
			if ch := x.Settings.Changes(t.settings); len(ch) > 0 {
				detail = strings.TrimSpace(detail + " settings " + strings.Join(ch, ", "))
			}
			t.settings = *x.Settings
		}
	case *agent.ModelResponded:
		t.step++
		if x.UsageEstimated {
			t.estimated++
		}
		for _, c := range x.Message.ToolCalls {
			t.calls[c.ID] = callSummary(c.Name, c.Arguments)
		}
	case *agent.ToolStarted:
		detail = t.calls[x.CallID]
	case *agent.ToolFinished:
		output = t.output(&x.Result)
	}
	if err != nil {
		detail = "(" + err.Error() + ")"
	}
	stepCol := ""
	if t.step > 0 {
		stepCol = fmt.Sprint(t.step)
	}
	fmt.Fprintf(t.tw, "%d\t+%s\t%s\t%s\t%s\n", e.Seq, e.Time.Sub(t.start).Round(time.Millisecond), stepCol, e.Type, detail)
	// The output is printed under DETAIL, in the row's last cell, so
	// that it does not widen the columns.
	for _, l := range output {
		fmt.Fprintf(t.tw, "\t\t\t\t│ %s\n", strings.ReplaceAll(l, "\t", "    "))
	}
}

// output returns the lines of a call's output keel runs show prints: the
// last outputTail lines with a note of those left out, or with --full
// every line, read from the stored artifact when the result holds only
// part of the output.
func (t *timeline) output(r *tool.Result) []string {
	text := r.Content
	var note string
	if t.opts.full && r.Artifact != "" {
		b, err := t.readArtifact(r.Artifact)
		if err != nil {
			note = fmt.Sprintf("(the whole output %s is not available: %v; showing what the model saw)", r.Artifact, err)
		} else {
			text = string(b)
		}
	}
	text = strings.TrimRight(text, "\n")
	if text == "" {
		return nil
	}
	lines := strings.Split(text, "\n")
	var out []string
	if !t.opts.full && len(lines) > outputTail {
		more := "--full prints them"
		if r.Artifact != "" {
			more = "--full prints the whole output from " + r.Artifact
		}
		out = append(out, fmt.Sprintf("… %d earlier lines elided (%s)", len(lines)-outputTail, more))
		lines = lines[len(lines)-outputTail:]
	}
	out = append(out, lines...)
	if note != "" {
		out = append(out, note)
	}
	return out
}

func (t *timeline) readArtifact(rel string) ([]byte, error) {
	if t.opts.artifact == nil || t.created == nil {
		return nil, fmt.Errorf("no reader of artifacts")
	}
	return t.opts.artifact(t.created, rel)
}

// stopped reports whether the newest of events (a run's, from 1) that
// says how its execution stands stops it: a completed run whose files
// were rewound since is still stopped.
func stopped(events []journal.Event) bool {
	for i := len(events) - 1; i >= 0; i-- {
		if !journal.KeepsStatus(events[i].Type) {
			return stopsExecution(events[i].Type)
		}
	}
	return false
}

// stopsExecution reports whether an event of type ty ends an execution
// of a run: keel runs show --follow stops after it.
func stopsExecution(ty journal.Type) bool {
	switch ty {
	case journal.RunPaused, journal.RunCompleted, journal.RunFailed, journal.RunCanceled:
		return true
	}
	return false
}

// Follow yields run id's events from seq from on, as they are appended,
// until one that stops an execution or ctx is done.
func (l *local) Follow(ctx context.Context, id string, from int64, _ func(api.Delta)) func(yield func(journal.Event, error) bool) {
	return func(yield func(journal.Event, error) bool) {
		for e, err := range journal.Follow(ctx, l.store, id, from, 0) {
			if !yield(e, err) || err != nil || stopsExecution(e.Type) {
				return
			}
		}
	}
}

// Artifact reads a whole output of the run created by created from its
// state directory (or, in older runs, its workspace).
func (l *local) Artifact(_ context.Context, _ string, created *agent.RunCreated, rel string) ([]byte, error) {
	ws, err := tool.NewWorkspace(created.Workspace, "", nil)
	if err != nil {
		return nil, err
	}
	defer ws.Close()
	if created.StateDir != "" {
		if err := ws.SetState(created.StateDir); err != nil {
			return nil, err
		}
	}
	return tool.ReadArtifact(ws, rel, maxShownArtifact)
}

// Follow yields run id's events from the server's live stream until one
// that stops an execution.
func (r *remote) Follow(ctx context.Context, id string, from int64, live func(api.Delta)) func(yield func(journal.Event, error) bool) {
	return func(yield func(journal.Event, error) bool) {
		for e, err := range r.cl.Events(ctx, id, &client.EventsParams{From: from, UntilStopped: true, OnDelta: live}) {
			if !yield(e, err) || err != nil {
				return
			}
		}
	}
}

// Artifact reads a whole output through the server, which serves only
// the run's artifacts.
func (r *remote) Artifact(ctx context.Context, id string, _ *agent.RunCreated, rel string) ([]byte, error) {
	return r.cl.Artifact(ctx, id, rel)
}
