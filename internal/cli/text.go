package cli

import (
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

type eventT = journal.Event

// Text helpers shared with the event details of package agent.
var (
	num           = agent.Num
	clip, oneLine = agent.Clip, agent.OneLine
	firstLine     = agent.FirstLine
	callSummary   = agent.CallSummary
)

func indent(s string) string {
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
