package tui

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/keel-run/keel/server/api"
)

// Evals prints keel eval list (local and --server alike): each
// evaluation with its suite, configuration, start, cases × trials,
// success over the scored trials with its Wilson 95% interval, errored
// trials and the dollars spent; then the results that could not be read.
func Evals(w io.Writer, list *api.EvalList, asJSON bool, now time.Time) error {
	if asJSON {
		return JSONLines(w, list.Evals)
	}
	if len(list.Evals) == 0 {
		fmt.Fprintln(w, "no evaluations (keel eval run SUITE makes one)")
	}
	tw := tabwriter.NewWriter(Esc(w), 0, 4, 2, ' ', 0)
	if len(list.Evals) > 0 {
		fmt.Fprintln(tw, "EVAL\tSUITE\tCONFIG\tSTARTED\tCASES×TRIALS\tSUCCESS (95% CI)\tERRORED\tSPENT")
	}
	for _, e := range list.Evals {
		o := e.Overall
		success := "-"
		if o.Scored > 0 {
			success = fmt.Sprintf("%d/%d %.0f%% (%.0f–%.0f%%)", o.Passed, o.Scored, 100*o.Rate, 100*o.Lo, 100*o.Hi)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d×%d\t%s\t%d\t$%.4f\n", Cell(e.ID), Cell(e.Suite), Cell(OrDash(e.Config)), TableTime(e.Started, now),
			e.Cases, e.TrialsPerCase, success, o.Errored, e.Spent)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, u := range list.Unreadable {
		fmt.Fprintf(Esc(w), "unreadable: %s\n", u)
	}
	return nil
}
