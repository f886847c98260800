package cli

import (
	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/tui"
)

// Text helpers shared with the event details of package agent.
var (
	clip, oneLine = agent.Clip, agent.OneLine
	// orDash is a cell's "-" for nothing.
	orDash = tui.OrDash
)
