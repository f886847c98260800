package tui

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/server/api"
)

// Triggers prints keel triggers list to w.
func Triggers(w io.Writer, list []api.Trigger, asJSON bool) error {
	if asJSON {
		return JSONLines(w, list)
	}
	tw := tabwriter.NewWriter(Esc(w), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TRIGGER\tON\tAGENT\tDELIVERIES\tSTATUS")
	for i := range list {
		t := &list[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", Cell(t.Name), Cell(triggerOn(t)), Cell(t.Run.Agent), Counts(t.Counts), pausedOr(t.Paused))
	}
	return tw.Flush()
}

// Trigger prints keel triggers show to out: the trigger t and its
// deliveries ds.
func Trigger(out io.Writer, t *api.Trigger, ds []api.Delivery) error {
	w := Esc(out)
	fmt.Fprintf(w, "trigger %s (%s)\n", t.Name, t.ID)
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(w, "  %-12s %s\n", k+":", agent.OneLine(v))
		}
	}
	line("on", triggerOn(t))
	line("agent", t.Run.Agent)
	line("task", t.Run.Task)
	line("secret", t.SecretHash)
	line("notify", strings.Join(t.Notify, ", "))
	line("created", When(&t.Created)+" by "+t.CreatedBy)
	line("status", pausedOr(t.Paused))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RECEIVED\tMESSAGE\tOUTCOME\tRUN\tSIZE\tFROM\tNOTE")
	for i := range ds {
		d := &ds[i]
		note := d.Reason
		if d.Cause != "" {
			note = d.Cause
		}
		if d.RunError != "" {
			note = "run not created: " + d.RunError
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", When(&d.Received), Cell(agent.Clip(d.MessageID, 40)), d.Outcome, OrDash(d.RunID), d.Size, OrDash(d.Remote), Cell(agent.Clip(agent.OneLine(note), 80)))
	}
	return tw.Flush()
}

// triggerOn says what fires a trigger, in one cell.
func triggerOn(t *api.Trigger) string {
	if t.On != nil {
		return "run of " + t.On.Agent + " " + strings.Join(t.On.Events, "/")
	}
	return "POST " + t.URL
}

func pausedOr(paused bool) string {
	if paused {
		return "paused"
	}
	return "active"
}
