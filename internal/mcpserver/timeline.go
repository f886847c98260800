package mcpserver

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/view"
	"github.com/keel-run/keel/journal"
)

// outputTail is how many lines of each call's output run_timeline shows.
const outputTail = 20

// timeline is run_timeline's text of a run's events, in the columns of
// keel runs show (sequence, time since the start, step, type, detail),
// from the rows of package view: each event's detail is its payload's
// one-line Detail (the one table of event types in package agent), a
// call's start its summary, and a call's result is followed by the last
// lines of its output.
func timeline(evs []journal.Event) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	rows := view.NewReader(true)
	for i := range evs {
		e := &evs[i]
		r := rows.Read(e)
		var detail string
		var output []string
		switch {
		case r.Err != nil:
			detail = "(" + r.Err.Error() + ")"
		case e.Type == journal.ToolStarted:
			detail = r.Call
		case r.Payload != nil:
			detail = r.Payload.Detail()
			if x, ok := r.Payload.(*agent.ToolFinished); ok {
				output = lastLines(x.Content, outputTail)
			}
		}
		step := ""
		if r.Step > 0 {
			step = fmt.Sprint(r.Step)
		}
		fmt.Fprintf(tw, "%d\t+%s\t%s\t%s\t%s\n", e.Seq, r.Offset.Round(time.Millisecond), step, e.Type, detail)
		for _, l := range output {
			fmt.Fprintf(tw, "\t\t\t\t│ %s\n", strings.ReplaceAll(l, "\t", "    "))
		}
	}
	tw.Flush()
	return b.String()
}

// lastLines returns the last n lines of text, with a note of those left
// out.
func lastLines(text string, n int) []string {
	text = strings.TrimRight(text, "\n")
	if text == "" {
		return nil
	}
	lines := strings.Split(text, "\n")
	if len(lines) <= n {
		return lines
	}
	return append([]string{fmt.Sprintf("… %d earlier lines left out", len(lines)-n)}, lines[len(lines)-n:]...)
}
