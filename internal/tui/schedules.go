package tui

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/server/api"
)

// When is a time as the schedule and trigger commands print it ("-"
// for none).
func When(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04 MST")
}

// spec says when a schedule fires, in one cell.
func spec(s *api.Schedule) string {
	out := s.Cron
	if out == "" {
		out = "every " + s.Every
		if s.Offset != "" {
			out += " +" + s.Offset
		}
	}
	if s.TimeZone != "" {
		out += " " + s.TimeZone
	}
	return out
}

// Counts prints a schedule's records by outcome ("fired 3, missed 1").
func Counts(c map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(c)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, c[k]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// Schedules prints keel schedules list to w.
func Schedules(w io.Writer, list []api.Schedule, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, s := range list {
			if err := enc.Encode(s); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(Esc(w), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCHEDULE\tWHEN\tAGENT\tOVERLAP\tNEXT\tLAST\tRECORDS\tSTATUS")
	for i := range list {
		s := &list[i]
		status := "active"
		if s.Paused {
			status = "paused"
		}
		last := "-"
		if s.Last != nil {
			last = s.Last.Outcome + " " + When(&s.Last.Nominal)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", Cell(s.Name), Cell(spec(s)), Cell(s.Run.Agent), OrDash(s.Overlap), When(s.Next), last, Counts(s.Counts), status)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for i := range list {
		ScheduleWarnings(w, &list[i])
	}
	return nil
}

// ScheduleWarnings prints a schedule's credential warnings to w.
func ScheduleWarnings(w io.Writer, s *api.Schedule) {
	for _, warn := range s.Warnings {
		fmt.Fprintf(Esc(w), "warning: schedule %s: %s\n", s.Name, warn)
	}
}

// Schedule prints a schedule's definition and state to out (keel
// schedules show, before its records).
func Schedule(out io.Writer, s *api.Schedule) {
	w := Esc(out)
	fmt.Fprintf(w, "schedule %s (%s)\n", s.Name, s.ID)
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(w, "  %-16s %s\n", k+":", agent.OneLine(v))
		}
	}
	line("when", spec(s))
	if s.Jitter != "" {
		line("jitter", s.Jitter)
	}
	if s.Start != nil || s.End != nil {
		line("between", When(s.Start)+" and "+When(s.End))
	}
	line("overlap", OrDash(s.Overlap))
	line("catch-up window", s.CatchupWindow)
	if s.PauseAfterFailures > 0 {
		line("pause after", fmt.Sprintf("%d failed fires", s.PauseAfterFailures))
	}
	line("driver", s.Driver)
	who := s.Run.Agent
	if s.Run.OnBehalfOf != "" {
		who += " for " + s.Run.OnBehalfOf
	}
	line("agent", who)
	line("task", s.Run.Task)
	line("model", s.Run.Model)
	line("workspace", s.Run.Workspace)
	line("notify", strings.Join(s.Notify, ", "))
	line("created", When(&s.Created)+" by "+s.CreatedBy)
	switch {
	case s.Paused:
		st := "paused " + When(s.PausedAt) + " by " + s.PausedBy
		if s.PausedReason != "" {
			st += ": " + s.PausedReason
		}
		line("status", st)
	default:
		line("status", "active, next fire "+When(s.Next))
	}
	line("records", Counts(s.Counts))
	if len(s.Open) > 0 {
		line("open runs", strings.Join(s.Open, ", "))
	}
	if s.Buffered > 0 {
		line("buffered", fmt.Sprint(s.Buffered))
	}
	ScheduleWarnings(out, s)
}

// Fires prints a schedule's fire records to w.
func Fires(w io.Writer, fires []api.Fire) error {
	tw := tabwriter.NewWriter(Esc(w), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NOMINAL\tSOURCE\tOUTCOME\tRUN\tLATE\tRUN STATUS\tREASON")
	for i := range fires {
		f := &fires[i]
		src := f.Source
		if f.By != "" {
			src += " by " + f.By
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", When(&f.Nominal), Cell(src), f.Outcome, OrDash(f.RunID), OrDash(f.Late), OrDash(f.RunStatus), Cell(agent.Clip(agent.OneLine(f.Reason), 80)))
	}
	return tw.Flush()
}

// OrDash is s, or "-" for an empty cell.
func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
