package tui

import (
	"fmt"
	"io"
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// EstimatedUsageNote returns onEvent, which also prints one line on w at
// the first model.responded of the execution whose usage Keel estimated
// because the provider reported none (agent.ModelResponded.UsageEstimated):
// the step lines' tokens and cost, and the token and cost limits, then
// rest on estimates. said, shared by the executions of one process (nil:
// this execution's own), is whether the note was said: keel chat says it
// once, not at each turn (docs/interactive.md).
//
// modelSpec is the run's model: a scripted model (the demo) has no
// provider to report usage, and the note says so.
func EstimatedUsageNote(w io.Writer, modelSpec string, said *bool, onEvent func(journal.Event)) func(journal.Event) {
	if said == nil {
		said = new(bool)
	}
	return func(e journal.Event) {
		if onEvent != nil {
			onEvent(e)
		}
		if *said || e.Type != journal.ModelResponded {
			return
		}
		if v, err := agent.Decode(&e); err == nil {
			if r, ok := v.(*agent.ModelResponded); ok && r.UsageEstimated {
				*said = true
				if strings.HasPrefix(modelSpec, "scripted:") {
					fmt.Fprintln(w, "keel: a scripted model has no token usage; the tokens shown are Keel's estimates of what a real model would read and write")
				} else {
					fmt.Fprintln(w, "keel: the provider reported no token usage; tokens and cost are Keel's estimates (counted in --max-tokens and --max-cost)")
				}
			}
		}
	}
}
