// Package shell provides Keel's "bash" tool: one command per call through
// the run's [sandbox.Sandbox], with bounded, sanitised output.
//
// Arguments: {"command": string (required), "timeout_ms": integer
// (optional, 1 to [Options].MaxTimeout in milliseconds)}. The name and its
// "command" argument are what most models are trained on. Each call is a fresh `bash -c` in the workspace mount path,
// with stdin at EOF, a wall-time limit (the run's command timeout or
// "timeout_ms") and an idle watchdog that ends commands that print nothing
// for a while (a command waiting for input it can never get). Output goes
// through [tool.Output]: the model sees a bounded view and the whole output
// is kept as a workspace artifact.
package shell

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/tool"
)

// Name is the tool's name.
const Name = "bash"

// Defaults of [Options].
const (
	// DefaultCommandTimeout is the wall-time limit when neither the call's
	// timeout_ms nor [tool.Env].CommandTimeout sets one.
	DefaultCommandTimeout = 60 * time.Second
	// DefaultIdleTimeout is how long a command may print nothing before it
	// is ended. Commands get no terminal and stdin at EOF, so a prompt
	// fails at once; the watchdog is the last resort for a program that
	// still blocks, and must not end a legitimately quiet build.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxTimeout is the largest timeout_ms a call may ask for.
	DefaultMaxTimeout = 10 * time.Minute
)

// Options configures the bash tool. The zero value is valid.
type Options struct {
	// IdleTimeout ends a command that writes no output for this long;
	// 0 means [DefaultIdleTimeout], a negative value disables the
	// watchdog.
	IdleTimeout time.Duration
	// MaxTimeout is the largest wall time a call may ask for with
	// timeout_ms; 0 means [DefaultMaxTimeout].
	MaxTimeout time.Duration
}

// input is the bash tool's arguments object. TimeoutMS is a float so that
// 3000.0, which the schema's "integer" accepts, decodes.
type input struct {
	Command   string  `json:"command"`
	TimeoutMS float64 `json:"timeout_ms,omitempty"`
}

//go:embed bash.md
var descriptionTemplate string

var descTmpl = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("bash.md").Parse(descriptionTemplate))
})

// Register adds the bash tool to r. opts may be nil. It panics if r
// already has a tool named "bash".
func Register(r *tool.Registry, opts *Options) {
	t, h := New(opts)
	r.Add(t, h)
}

// New returns the bash tool and its handler without registering them,
// for callers that wrap the handler (decorators). opts may be nil.
func New(opts *Options) (*tool.Tool, tool.Handler) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxTimeout <= 0 {
		o.MaxTimeout = DefaultMaxTimeout
	}
	var desc bytes.Buffer
	idle := "a long time"
	if o.IdleTimeout > 0 {
		idle = o.IdleTimeout.String()
	}
	if err := descTmpl().Execute(&desc, map[string]any{
		"DefaultTimeout": DefaultCommandTimeout.String(),
		"MaxTimeoutMS":   o.MaxTimeout.Milliseconds(),
		"Idle":           idle,
	}); err != nil {
		panic("shell: description template: " + err.Error())
	}
	schema := fmt.Sprintf(`{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "command": {"type": "string", "minLength": 1},
    "timeout_ms": {"type": "integer", "minimum": 1, "maximum": %d}
  },
  "required": ["command"]
}`, o.MaxTimeout.Milliseconds())
	t := &tool.Tool{
		Name:        Name,
		Description: strings.TrimSpace(desc.String()),
		InputSchema: json.RawMessage(schema),
		Effect:      tool.External,
		Scope:       nil, // the whole workspace
	}
	b := &bash{opts: o}
	return t, b.handle
}

type bash struct{ opts Options }

// headerReserve is the room kept in the result for the "exit code" line.
const headerReserve = 120

func (b *bash) handle(ctx context.Context, req *tool.Request) (*tool.Result, error) {
	var in input
	if err := json.Unmarshal(req.Arguments, &in); err != nil {
		return tool.Errorf("invalid arguments for bash: %v", err), nil
	}
	env := req.Env
	if env == nil || env.Sandbox == nil {
		return tool.Errorf("no sandbox is configured for this run, so commands cannot run; use the file tools instead"), nil
	}
	if strings.TrimSpace(in.Command) == "" {
		return tool.Errorf("command is empty"), nil
	}
	timeout := env.CommandTimeout
	if timeout <= 0 {
		timeout = DefaultCommandTimeout
	}
	if in.TimeoutMS > 0 {
		timeout = min(time.Duration(in.TimeoutMS*float64(time.Millisecond)), b.opts.MaxTimeout)
	}
	idle := b.opts.IdleTimeout
	if idle < 0 {
		idle = 0
	}
	maxChars := env.MaxResultChars
	if maxChars <= 0 {
		maxChars = tool.DefaultMaxResultChars
	}
	out := tool.NewOutput(env.Workspace, req.RunID, req.CallID, maxChars-headerReserve)
	if live := tool.LiveOf(ctx); live != nil {
		out.Tee(live)
	}
	cmd := &sandbox.Cmd{
		Args:        []string{"bash", "-c", in.Command},
		Stdout:      out, // Stderr nil: one pipe, interleaved in order
		Timeout:     timeout,
		IdleTimeout: idle,
	}
	if env.Workspace != nil {
		cmd.Dir = env.Workspace.MountPath()
	}
	if tp := tool.TraceParent(ctx); tp != "" {
		// User code and the services it calls join the run's trace.
		cmd.Env = append(cmd.Env, "TRACEPARENT="+tp)
	}
	res, err := env.Sandbox.Exec(ctx, cmd)
	out.Close()
	if err != nil {
		if ctx.Err() != nil {
			return tool.Errorf("canceled: %v", context.Cause(ctx)), nil
		}
		return nil, fmt.Errorf("shell: bash: %w", err)
	}
	code := res.ExitCode
	r := &tool.Result{
		ExitCode:    &code,
		TimedOut:    res.TimedOut || res.Idle,
		Artifact:    out.Artifact(),
		OutputBytes: out.Bytes(),
	}
	note := ""
	switch {
	case ctx.Err() != nil:
		note = fmt.Sprintf(" (canceled: %v; process tree killed)", context.Cause(ctx))
		r.IsError = true
	case res.TimedOut:
		note = fmt.Sprintf(" (timed out after %s; process tree killed)", timeout)
		r.IsError = true
	case res.Idle:
		note = fmt.Sprintf(" (killed: no output for %s, likely waiting for input; process tree killed)", idle)
		r.IsError = true
	case res.Limit != "":
		var killed bool
		note, killed = limitNote(res)
		note = " (" + note + ")"
		r.IsError = killed
	case res.Signal != "":
		note = " (ended by signal " + res.Signal + ")"
	}
	view := out.View()
	if view == "" {
		view = "(no output)"
	}
	r.Content = fmt.Sprintf("exit code: %d%s\n%s", code, note, view)
	return r, nil
}

// limitNote words a [sandbox.Result].Limit for the model and reports
// whether the limit ended the command. A backend reports a limit the
// command reached, which does not always end it: at the process limit
// only the forks beyond it fail; at the memory limit the kernel kills
// one process, maybe not the command's own; a file size or CPU time
// limit stops the process that crossed it, maybe a child whose failure
// the command survives; the output limit kills the whole tree. So
// "killed: ..." is said only when the command's own process ended by the
// signal that limit sends, else "... reached: <what happened>", after
// the signal that did end it, if any.
func limitNote(res *sandbox.Result) (string, bool) {
	name, killedBy, reached := limitText(res.Limit)
	for _, sig := range killedBy {
		if res.Signal == sig {
			return "killed: " + name, true
		}
	}
	if res.Limit == "file_size" && res.ExitCode == 128+25 || res.Limit == "cpu_time" && res.ExitCode == 128+24 {
		reached = "a process of the command was stopped by it"
	}
	note := name + " reached: " + reached
	if res.Signal != "" {
		note = "ended by signal " + res.Signal + "; " + note
	}
	return note, false
}

// limitText names a limit, the signals with which it kills the process
// that crosses it, and what reaching it without ending the command
// means.
func limitText(limit string) (name string, killedBy []string, reached string) {
	switch limit {
	case "memory":
		return "memory limit", []string{"SIGKILL"}, "a process of the command was killed for lack of memory"
	case "processes":
		return "process limit", nil, "some forks failed"
	case "output":
		return "output size limit", []string{"SIGKILL", "SIGTERM"}, "output beyond it was dropped"
	case "file_size":
		return "file size limit", []string{"SIGXFSZ"}, "a write past it failed"
	case "cpu_time":
		return "CPU time limit", []string{"SIGXCPU", "SIGKILL"}, "a process of the command was stopped by it"
	}
	return limit + " limit", []string{"SIGKILL", "SIGTERM"}, "the command went on"
}
