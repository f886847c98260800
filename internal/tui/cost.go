package tui

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/visible"
)

// Cost prints keel cost: one row per group and the total, with notes on
// unpriced calls and on runs counted in several label rows.
func Cost(w io.Writer, rep *api.CostReport) {
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tRUNS\tCALLS\tINPUT\tCACHED\tOUTPUT\tCOST USD\tSOURCE\n", strings.ToUpper(rep.By))
	row := func(r *api.CostRow) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%.4f\t%s\n", visible.String(r.Key), r.Runs, r.Calls, r.InputTokens, r.CachedInputTokens, r.OutputTokens, r.CostUSD, r.Source)
	}
	for i := range rep.Rows {
		row(&rep.Rows[i])
	}
	row(&rep.Total)
	tw.Flush()
	if rep.Total.OfflineCalls > 0 {
		fmt.Fprintf(w, "%d model calls replayed a recording or were the scripted demo model's: nothing was spent, their cost is not counted (their tokens are)\n", rep.Total.OfflineCalls)
	}
	if rep.Total.UnpricedCalls > 0 {
		fmt.Fprintf(w, "%d model calls have no price (cost 0): add [prices.\"MODEL\"] to config.toml; the journal keeps their tokens\n", rep.Total.UnpricedCalls)
	}
	if rep.By == "label" {
		fmt.Fprintln(w, "a run with several labels counts in each of their rows, once in the total")
	}
}
