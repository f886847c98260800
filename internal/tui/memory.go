package tui

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/visible"
)

// JSONLines writes each of items to w as one line of JSON.
func JSONLines[T any](w io.Writer, items []T) error {
	enc := json.NewEncoder(w)
	for _, it := range items {
		if err := enc.Encode(it); err != nil {
			return err
		}
	}
	return nil
}

// MemoryEntries prints keel memory list to w.
func MemoryEntries(w io.Writer, list []api.MemoryEntry, asJSON bool) error {
	if asJSON {
		return JSONLines(w, list)
	}
	if len(list) == 0 {
		fmt.Fprintln(w, "no memory entries")
		return nil
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSCOPE\tLABELS\tFROM\tOFFERED\tUSED\tSTATE\tTEXT")
	for _, e := range list {
		from := e.Source.Run
		if from == "" {
			from = e.Source.By
		}
		state := "current"
		switch {
		case e.Forgotten != nil:
			state = "forgotten"
		case e.SupersededBy != "":
			state = "superseded by " + e.SupersededBy
		}
		fmt.Fprintf(tw, "%s\t%s\t%s,%s\t%s\t%d\t%d\t%s\t%s\n", e.ID, visible.String(e.Scope), e.Labels.Integrity, e.Labels.Confidentiality,
			visible.String(from), len(e.OfferedRuns), len(e.UsedRuns), state, visible.String(FirstLine(e.Text, 60)))
	}
	return tw.Flush()
}

// FirstLine is the first line of s, at most n characters (… ends a
// longer one).
func FirstLine(s string, n int) string {
	l, _, _ := strings.Cut(s, "\n")
	if r := []rune(l); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return l
}

// MemoryHistory prints to w every version of a memory entry, marking
// id (keel memory show).
func MemoryHistory(w io.Writer, h *api.MemoryHistory, id string) {
	for i, e := range h.Versions {
		if i > 0 {
			fmt.Fprintln(w)
		}
		mark := ""
		if e.ID == id {
			mark = "  <-"
		}
		fmt.Fprintf(w, "%s%s\n", e.ID, mark)
		fmt.Fprintf(w, "  scope:   %s\n  labels:  %s, %s\n  written: %s", visible.String(e.Scope), e.Labels.Integrity, e.Labels.Confidentiality, e.Written.UTC().Format("2006-01-02 15:04:05Z"))
		if e.Source.Run != "" {
			fmt.Fprintf(w, " by run %s (call %s, agent %s", e.Source.Run, visible.String(e.Source.Call), visible.String(e.Source.Agent))
			if e.Source.User != "" {
				fmt.Fprintf(w, " for %s", visible.String(e.Source.User))
			}
			fmt.Fprint(w, ")")
		}
		if e.Source.By != "" {
			fmt.Fprintf(w, " by %s", visible.String(e.Source.By))
		}
		fmt.Fprintf(w, " (memory stream event %d)\n", e.Seq)
		if e.Supersedes != "" {
			fmt.Fprintf(w, "  supersedes: %s\n", e.Supersedes)
		}
		if e.SupersededBy != "" {
			fmt.Fprintf(w, "  superseded by: %s\n", e.SupersededBy)
		}
		if f := e.Forgotten; f != nil {
			fmt.Fprintf(w, "  forgotten: %s by %s: %s\n", f.Time.UTC().Format("2006-01-02 15:04:05Z"), visible.String(f.By), visible.String(f.Reason))
		}
		if len(e.OfferedRuns)+len(e.UsedRuns) > 0 {
			fmt.Fprintf(w, "  offered to %d runs %s\n  used by %d runs %s\n", len(e.OfferedRuns), strings.Join(e.OfferedRuns, " "), len(e.UsedRuns), strings.Join(e.UsedRuns, " "))
		} else {
			fmt.Fprintln(w, "  offered to no run")
		}
		for _, l := range strings.Split(e.Text, "\n") {
			fmt.Fprintf(w, "  | %s\n", visible.String(l))
		}
	}
}
