package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/internal/view"
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
// agent), or what showRows says; the rows (package internal/view) add
// what needs the events before it: the step and each call's summary.
type timeline struct {
	tw        *tabwriter.Writer
	rows      *view.Reader
	step      int
	created   *agent.RunCreated
	estimated int
	settings  agent.Settings
	opts      *showOptions
}

func newTimeline(w io.Writer, o *showOptions) *timeline {
	return &timeline{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0), rows: view.NewReader(true), settings: agent.DefaultSettings(), opts: o}
}

// showRows says what keel runs show adds to, or puts in place of, each
// event type's Detail, one entry per type (view.Check); nil: the Detail
// alone. It returns the detail and the lines printed under it.
var showRows = map[journal.Type]func(*timeline, *view.Row, string) (string, []string){
	journal.RunCreated: func(t *timeline, r *view.Row, d string) (string, []string) {
		x := r.Payload.(*agent.RunCreated)
		t.created = x
		if x.Settings != nil {
			t.settings = *x.Settings
		}
		return d, nil
	},
	journal.RunResumed: func(t *timeline, r *view.Row, d string) (string, []string) {
		// The settings a resume changed, compared with the run's
		// settings before it.
		if x := r.Payload.(*agent.RunResumed); x.Settings != nil {
			if ch := x.Settings.Changes(t.settings); len(ch) > 0 {
				d = strings.TrimSpace(d + " settings " + strings.Join(ch, ", "))
			}
			t.settings = *x.Settings
		}
		return d, nil
	},
	journal.SetupFinished: nil,
	journal.ModelResponded: func(t *timeline, r *view.Row, d string) (string, []string) {
		if r.Payload.(*agent.ModelResponded).UsageEstimated {
			t.estimated++
		}
		return d, nil
	},
	journal.ModelFailed:       nil,
	journal.GateDecided:       nil,
	journal.ApprovalRequested: nil,
	journal.ApprovalResolved:  nil,
	journal.AuthRequired:      nil,
	journal.AuthResolved:      nil,
	journal.InputRequested:    nil,
	journal.InputAnswered:     nil,
	journal.ToolStarted:       func(_ *timeline, r *view.Row, _ string) (string, []string) { return r.Call, nil },
	journal.ToolFinished: func(t *timeline, r *view.Row, d string) (string, []string) {
		return d, t.output(&r.Payload.(*agent.ToolFinished).Result)
	},
	journal.RunCompleted:        nil,
	journal.RunFailed:           nil,
	journal.RunCanceled:         nil,
	journal.RunPaused:           nil,
	journal.UserMessage:         nil,
	journal.ContextCompacted:    nil,
	journal.SandboxEgress:       nil,
	journal.SandboxQuarantine:   nil,
	journal.WorkspaceCheckpoint: nil,
	journal.WorkspaceRestored:   nil,
	journal.ChildSpawned:        nil,
	journal.ChildDelivered:      nil,
}

func (t *timeline) add(e *journal.Event) {
	r := t.rows.Read(e)
	t.step = r.Step
	var detail string
	var output []string
	switch {
	case r.Err != nil:
		detail = "(" + r.Err.Error() + ")"
	case r.Payload != nil:
		detail = r.Payload.Detail()
		if f := showRows[e.Type]; f != nil {
			detail, output = f(t, r, detail)
		}
	}
	stepCol := ""
	if r.Step > 0 {
		stepCol = fmt.Sprint(r.Step)
	}
	fmt.Fprintf(t.tw, "%d\t+%s\t%s\t%s\t%s\n", e.Seq, r.Offset.Round(time.Millisecond), stepCol, e.Type, detail)
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
