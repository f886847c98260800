package tui

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/keel-run/keel/agent"
)

// Setting is one row of keel config show: a setting of keel run, its
// value (secrets already hidden) and where it came from.
type Setting struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Source string `json:"source"`
	// Untrusted: the source is a project file keel run refuses until it
	// is trusted.
	Untrusted bool `json:"untrusted,omitempty"`
}

// Settings prints keel config show's rows: JSON lines, or a table.
func Settings(w io.Writer, rows []Setting, asJSON bool) error {
	if asJSON {
		return JSONLines(w, rows)
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SETTING\tVALUE\tFROM")
	for _, r := range rows {
		v := r.Value
		if v == "" {
			v = "-"
		}
		src := r.Source
		if r.Untrusted {
			src += " (NOT TRUSTED: keel run refuses this file)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Name, agent.Clip(agent.OneLine(v), 80), src)
	}
	return tw.Flush()
}
