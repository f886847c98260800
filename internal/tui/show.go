package tui

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/view"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/service"
	"github.com/keel-run/keel/tool"
)

// outputTail is how many lines of each call's output keel runs show
// prints without --full.
const outputTail = 20

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
	opts      *ShowOptions
	// n counts the events added; copied is how many of the first
	// events a fork copied from its source (run.created included), and
	// copiedStart the time of the first copied event after run.created:
	// the copies keep their source's times, earlier than the fork's
	// run.created, so their TIME counts from the first of them.
	n, copied   int
	copiedStart time.Time
}

func newTimeline(w io.Writer, o *ShowOptions) *timeline {
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
	journal.WorkspaceRestoring:  nil,
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
	off := r.Offset
	if t.n++; t.n > 1 && t.n <= t.copied {
		if t.n == 2 {
			t.copiedStart = e.Time
		}
		off = e.Time.Sub(t.copiedStart)
	}
	fmt.Fprintf(t.tw, "%d\t+%s\t%s\t%s\t%s\n", e.Seq, off.Round(time.Millisecond), stepCol, e.Type, detail)
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
	if t.opts.Full && r.Artifact != "" {
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
	if !t.opts.Full && len(lines) > outputTail {
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
	if t.opts.Artifact == nil || t.created == nil {
		return nil, fmt.Errorf("no reader of artifacts")
	}
	return t.opts.Artifact(t.created, rel)
}

// Stopped reports whether the newest of events (a run's, from 1) that
// says how its execution stands stops it: a completed run whose files
// were rewound since is still stopped.
func Stopped(events []journal.Event) bool {
	for i := len(events) - 1; i >= 0; i-- {
		if !journal.KeepsStatus(events[i].Type) {
			return journal.Stops(events[i].Type)
		}
	}
	return false
}

// ShowOptions says how keel runs show prints a run.
type ShowOptions struct {
	// Full prints each call's whole output (the stored artifact when the
	// result was truncated) instead of its last lines.
	Full bool
	// Follow, if set, is called after the stored events' rows with a
	// function that prints one more row; it follows the live run and
	// returns the events it printed.
	Follow func(row func(e *journal.Event)) ([]journal.Event, error)
	// Artifact reads a truncated result's whole output (--full).
	Artifact func(created *agent.RunCreated, rel string) ([]byte, error)
	// Events, if set, reads another run's events: the children of a run
	// with child agents, for its tree.
	Events func(id string) ([]journal.Event, error)
}

// Show prints a run's timeline (keel runs show) on w from its events
// and the error of verifying them (verr): a header, one row per event,
// the rows o.Follow adds, the plan and compactions, the output, and
// whether the journal verified. ok is false when the journal is corrupt
// or does not fold (it says so on w).
func Show(w io.Writer, runID string, events []journal.Event, verr error, o *ShowOptions) (ok bool, err error) {
	if o == nil {
		o = &ShowOptions{}
	}
	st, ferr := agent.Fold(runID, events)
	w = escWriter{w}
	if st != nil {
		c := st.Created
		fmt.Fprintf(w, "run %s · %s", runID, st.Status)
		if st.Ended != nil {
			fmt.Fprintf(w, " (%s)", st.Ended.Reason)
		}
		fmt.Fprintf(w, "\nmodel %s · workspace %s → %s · sandbox %s\n", c.Model, c.Workspace, c.MountPath, c.Sandbox)
		fmt.Fprintf(w, "task: %s\n", clip(oneLine(c.Task), 200))
		if by := service.StartedBy(c.Labels); by != "" {
			fmt.Fprintf(w, "started by: %s\n", clip(oneLine(by), 200))
		}
		for _, line := range view.SettingsOf(c).Lines() {
			fmt.Fprintln(w, line)
		}
		// The run's working time, as the API's duration_ms counts it
		// (a fork's from its own first event).
		d, _ := service.WorkingTime(events)
		fmt.Fprintf(w, "%d events · %d steps · %s tok (%s in, %s out, %s cached) · $%.4f · %s\n", len(events), st.Steps,
			num(st.Usage.Total()), num(st.Usage.InputTokens), num(st.Usage.OutputTokens), num(st.Usage.CachedInputTokens), st.Cost, d)
		if st.Restoring != nil {
			fmt.Fprintf(w, "unfinished rewind: %s\n", st.Restoring.Unfinished(runID))
		}
		if n := service.ForkStart(c, events); n > 1 {
			src, _, _ := strings.Cut(c.Labels[service.LabelForkOf], "@")
			fmt.Fprintf(w, "events 2 to %d were copied from run %s with their times: their TIME counts from event 2\n", n, src)
		}
		fmt.Fprintln(w)
	}
	tl := newTimeline(w, o)
	if st != nil {
		tl.copied = service.ForkStart(st.Created, events)
	}
	fmt.Fprintln(tl.tw, "SEQ\tTIME\tSTEP\tEVENT\tDETAIL")
	for i := range events {
		tl.add(&events[i])
	}
	if err := tl.tw.Flush(); err != nil {
		return false, err
	}
	if o.Follow != nil {
		more, err := o.Follow(func(e *journal.Event) {
			tl.add(e)
			tl.tw.Flush()
		})
		if err != nil {
			return false, err
		}
		if len(more) > 0 {
			events = append(events, more...)
			st, ferr = agent.Fold(runID, events)
			if st != nil {
				fmt.Fprintf(w, "\nrun %s · %s", runID, st.Status)
				if st.Ended != nil {
					fmt.Fprintf(w, " (%s)", st.Ended.Reason)
				}
				fmt.Fprintf(w, " · %d steps · %s tok · $%.4f\n", st.Steps, num(st.Usage.Total()), st.Cost)
			}
			if verr == nil {
				_, verr = journal.VerifyShown(runID, journal.GenesisHash, 1, events)
			}
		}
	}
	if tl.estimated > 0 {
		fmt.Fprintf(w, "\nusage: the provider reported no token usage for %d of %d steps; their tokens and cost are Keel's estimates\n", tl.estimated, tl.step)
	}
	if st != nil {
		showContext(w, st)
		if len(st.Children) > 0 && o.Events != nil {
			showTree(w, st, o.Events)
		}
	}
	if st != nil && st.Ended != nil && st.Ended.Output != "" {
		fmt.Fprintf(w, "\noutput:\n%s\n", strings.TrimRight(st.Ended.Output, "\n"))
	}
	switch {
	case verr != nil:
		fmt.Fprintf(w, "\njournal: CORRUPT: %v\n", verr)
		return false, nil
	case ferr != nil:
		fmt.Fprintf(w, "\njournal: does not fold: %v\n", ferr)
		return false, nil
	}
	if c, _ := journal.VerifyShown(runID, "", 1, events); c.Withheld > 0 {
		// The server withheld the hashes that commit to memory this
		// token may not see (journal.VerifyShown): its audit verifies
		// them.
		fmt.Fprintf(w, "\njournal: %d events, hash chain verified through event %d; hashes of events %d to %d withheld: they commit to memory hidden from your token (%d events shown with it hidden), and the server's audit verifies them (keel audit verify)\n",
			len(events), c.FirstWithheld-1, c.FirstWithheld, c.Next-1, c.Redacted)
		return true, nil
	}
	fmt.Fprintf(w, "\njournal: %d events, hash chain verified\n", len(events))
	return true, nil
}

// showContext prints a run's plan and compactions after its timeline.
func showContext(w io.Writer, st *agent.State) {
	if cs := st.Compactions(); len(cs) > 0 {
		fmt.Fprintf(w, "\ncontext: %d compactions", len(cs))
		if n := st.ContextWindow(); n > 0 {
			fmt.Fprintf(w, " (window %s tokens)", num(int64(n)))
		}
		fmt.Fprintln(w)
	}
	if p := st.Plan(); p != nil {
		fmt.Fprintf(w, "\nplan:\n%s\n", indent(agent.RenderPlan(p)))
	}
}
