package service

import (
	"math"
	"strconv"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/server/api"
)

// Default limits of a run (docs/limits.md says why): high enough that a
// run of hours finishes (real coding runs take 100-190 model calls and
// 1-7 million tokens), low enough that a runaway stops within a working
// day and a bounded bill. Loop detection (agent.DefaultMaxRepeats) stops
// a model repeating itself long before any of them.
const (
	DefaultMaxSteps  = 500
	DefaultMaxTokens = 100_000_000
	DefaultMaxCost   = 50.0
	DefaultTimeout   = 12 * time.Hour
)

// DefaultLimits returns the limits of a run that asks for none.
func DefaultLimits() agent.Limits {
	return agent.Limits{MaxSteps: DefaultMaxSteps, MaxTokens: DefaultMaxTokens, MaxCost: DefaultMaxCost, Timeout: agent.Duration(DefaultTimeout)}
}

// ApplyLimits returns base with the limits l gives, checked, in the one
// meaning every front end shares (docs/limits.md): a field l leaves out
// keeps base's (a new run's base is [DefaultLimits], a resumed run's its
// own), zero means no limit, and a negative value or a malformed timeout
// is refused with an [Error] naming the field. A nil l is base.
func ApplyLimits(base agent.Limits, l *api.Limits) (agent.Limits, error) {
	if l == nil {
		return base, nil
	}
	out := base
	if l.MaxSteps != nil {
		if *l.MaxSteps < 0 {
			return base, badRequest("limits.max_steps %d: want 0 (no limit) or more", *l.MaxSteps)
		}
		out.MaxSteps = *l.MaxSteps
	}
	if l.MaxTokens != nil {
		if *l.MaxTokens < 0 {
			return base, badRequest("limits.max_tokens %d: want 0 (no limit) or more", *l.MaxTokens)
		}
		out.MaxTokens = *l.MaxTokens
	}
	if l.MaxCost != nil {
		if *l.MaxCost < 0 {
			return base, badRequest("limits.max_cost %g: want 0 (no limit) or more", *l.MaxCost)
		}
		out.MaxCost = *l.MaxCost
	}
	for _, f := range []struct {
		name string
		v    *int
		dst  *int
	}{{"max_tool_calls", l.MaxToolCalls, &out.MaxToolCalls}, {"max_children", l.MaxChildren, &out.MaxChildren}, {"max_depth", l.MaxDepth, &out.MaxDepth}} {
		if f.v == nil {
			continue
		}
		if *f.v < 0 {
			return base, badRequest("limits.%s %d: want 0 (no limit) or more", f.name, *f.v)
		}
		*f.dst = *f.v
	}
	if l.Timeout != "" {
		d, err := time.ParseDuration(l.Timeout)
		if err != nil {
			return base, badRequest("limits.timeout %q: want a Go duration such as 30m, or 0s (no limit)", l.Timeout)
		}
		if d < 0 {
			return base, badRequest("limits.timeout %s: want 0 (no limit) or more", d)
		}
		out.Timeout = agent.Duration(d)
	}
	return out, nil
}

// RaisedLimit is the value that raises the limit a run stopped at
// (reason max_steps, max_tokens, max_cost or max_tool_calls) enough to go on, as every
// front end proposes it: twice the larger of the limit and what is used
// (a run can pass a token or cost limit by a whole model call, and a
// value below the usage would stop the resumed run at once). It is ""
// for any other reason.
func RaisedLimit(reason string, st *agent.State) string {
	l := st.Limits
	switch reason {
	case agent.ReasonMaxSteps:
		return strconv.Itoa(2 * max(l.MaxSteps, st.Steps))
	case agent.ReasonMaxToolCalls:
		return strconv.Itoa(2 * max(l.MaxToolCalls, st.Used().ToolCalls))
	case agent.ReasonMaxTokens:
		return strconv.FormatInt(2*max(l.MaxTokens, st.Usage.Total()), 10)
	case agent.ReasonMaxCost:
		c := 2 * max(l.MaxCost, st.Cost)
		return strconv.FormatFloat(math.Ceil(c*100)/100, 'f', -1, 64)
	}
	return ""
}

// Default resource limits of every sandboxed command: generous for
// builds and test suites, small enough that a runaway command cannot
// take the machine down.
const (
	DefaultMemory    = 4 << 30
	DefaultProcesses = 1024
	DefaultFileSize  = 8 << 30
	DefaultOpenFiles = 4096
	DefaultOutput    = 1 << 30
	// MinMemory is the least memory limit a shell starts with.
	MinMemory = 16 << 20
)

// DefaultSandboxLimits returns the resource limits of the commands of a
// run that asks for none.
func DefaultSandboxLimits() sandbox.Limits {
	return sandbox.Limits{Memory: DefaultMemory, Processes: DefaultProcesses, FileSize: DefaultFileSize, OpenFiles: DefaultOpenFiles, OutputBytes: DefaultOutput}
}

// checkSandboxLimits refuses negative resource limits and a memory limit
// too small to start a shell; zero means no limit.
func checkSandboxLimits(l *sandbox.Limits) error {
	switch {
	case l.Memory < 0 || l.FileSize < 0 || l.OutputBytes < 0 || l.Processes < 0 || l.OpenFiles < 0 || l.CPUShare < 0 || l.CPUTime < 0:
		return badRequest("sandbox limits must not be negative (0: no limit)")
	case l.Memory != 0 && l.Memory < MinMemory:
		return badRequest("memory limit %d bytes is too small to start a shell (minimum 16MiB)", l.Memory)
	}
	return nil
}
