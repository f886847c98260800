// Package python provides Keel's "python" tool: code runs in a persistent
// Python interpreter, one per run, inside the run's sandbox, so variables,
// imports and definitions survive from one call to the next (E2B's and
// Jupyter's kernel model, without Jupyter).
//
// Arguments: {"code": string (required), "timeout_ms": integer
// (optional)}. Each result reports, in this order: a status line (ok,
// SyntaxError, the exception type of a runtime error, or a timeout, with
// the duration), stdout, stderr and the traceback. The four result
// classes are distinct: "ok", "syntax_error" (the code did not run),
// "error" (it raised) and "timeout" (it was interrupted at its limit).
// Outputs go through [tool.Output]: bounded for the model, whole in a
// workspace artifact. The value of a final expression is printed, as in
// a notebook.
//
// The interpreter runs as one long-lived sandbox command (via
// [sandbox.Cmd].Stdin and a negative Timeout) with a small driver,
// kernel.py, that reads requests on stdin and writes framed output; file
// descriptors 1 and 2 of the interpreter are pipes it forwards, so output
// of subprocesses is captured too. A cell's time limit interrupts it with
// SIGALRM; a cell that ignores it is ended by killing the kernel. The
// sandbox's per-command limits apply to the kernel as one command: its
// memory, and its output and CPU time over its whole life; a kernel that
// hits one is reported dead and restarted by the next call. A sandbox
// checks what a command left in the workspace for the host (sandbox/linux's
// git guard) when the command ends, which for the kernel would be the end
// of the run: so the tool asks the sandbox to check after every cell
// (when it offers CheckWorkspace) and reports what it found in the
// cell's stderr; when the sandbox refuses further commands, the kernel
// is stopped.
//
// When Keel restarts (a crash, kill -9, or a resume in a new process), or
// the interpreter dies, the next call starts a fresh interpreter and its
// result begins with a note saying that the earlier variables are lost.
// Keel knows a kernel existed from a small state file in the protected
// .keel/kernels directory of the workspace.
package python

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/tool"
)

// Name is the tool's name.
const Name = "python"

// Defaults of [Options].
const (
	// DefaultPython is the interpreter: Debian's python3, which sees the
	// distribution's python3-* packages.
	DefaultPython = "/usr/bin/python3"
	// DefaultTimeout is a cell's time limit when the call gives none.
	DefaultTimeout = 60 * time.Second
	// DefaultMaxTimeout is the largest timeout_ms a call may ask for.
	DefaultMaxTimeout = 10 * time.Minute
	// DefaultStartTimeout bounds the interpreter's start.
	DefaultStartTimeout = 30 * time.Second
	// defaultKillGrace is [Options].KillGrace's default.
	defaultKillGrace = 5 * time.Second
)

// StateDir is the directory where the tool records that a run's kernel
// was started: in the workspace's state directory
// ([tool.Workspace.SetState]), or, without one, in the workspace (inside
// the protected .keel).
const StateDir = ".keel/kernels"

// stateKernels is StateDir's counterpart in a state directory.
const stateKernels = "kernels"

// stateRoot returns where ws keeps kernel records and their directory.
func stateRoot(ws *tool.Workspace) (*os.Root, string) {
	if r := ws.State(); r != nil {
		return r, stateKernels
	}
	return ws.FS(), StateDir
}

// Options configures the python tool. The zero value is valid.
type Options struct {
	// Python is the interpreter's path inside the sandbox; "" means
	// [DefaultPython].
	Python string
	// Timeout is a cell's default time limit; 0 means [DefaultTimeout].
	Timeout time.Duration
	// MaxTimeout bounds timeout_ms; 0 means [DefaultMaxTimeout].
	MaxTimeout time.Duration
	// StartTimeout bounds the interpreter's start; 0 means
	// [DefaultStartTimeout].
	StartTimeout time.Duration
	// KillGrace is how long a cell may overrun its limit (ignoring the
	// interruption) before the kernel is killed; 0 means 5 seconds.
	KillGrace time.Duration
}

//go:embed python.md
var descriptionTemplate string

var descTmpl = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("python.md").Parse(descriptionTemplate))
})

// Tool is the python tool: its kernels, one per run and sandbox. It is
// safe for concurrent use; calls of one run are executed one at a time.
type Tool struct {
	opts Options

	// instance identifies this Tool (this Keel process) in the state
	// files, to tell a Keel restart from a kernel that died.
	instance string

	mu      sync.Mutex
	kernels map[key]*kernel // live kernels; each removes itself when it ends
}

// key names a kernel: a run in a sandbox.
type key struct {
	run string
	sb  sandbox.Sandbox
}

// New returns the python tool's description, its handler and the [Tool]
// that holds its kernels (for [Tool.Close]). opts may be nil.
func New(opts *Options) (*tool.Tool, tool.Handler, *Tool) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Python == "" {
		o.Python = DefaultPython
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxTimeout <= 0 {
		o.MaxTimeout = DefaultMaxTimeout
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.KillGrace <= 0 {
		o.KillGrace = defaultKillGrace
	}
	var desc strings.Builder
	if err := descTmpl().Execute(&desc, map[string]any{"Timeout": o.Timeout.String(), "MaxTimeoutMS": o.MaxTimeout.Milliseconds()}); err != nil {
		panic("python: description template: " + err.Error())
	}
	schema := fmt.Sprintf(`{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "code": {"type": "string", "minLength": 1},
    "timeout_ms": {"type": "integer", "minimum": 1, "maximum": %d}
  },
  "required": ["code"]
}`, o.MaxTimeout.Milliseconds())
	t := &tool.Tool{
		Name:        Name,
		Description: strings.TrimSpace(desc.String()),
		InputSchema: json.RawMessage(schema),
		Effect:      tool.External,
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	p := &Tool{opts: o, instance: hex.EncodeToString(nonce[:]), kernels: map[key]*kernel{}}
	return t, p.handle, p
}

// Register adds the python tool to r and returns the [Tool] holding its
// kernels. opts may be nil. It panics if r already has a tool named
// "python".
func Register(r *tool.Registry, opts *Options) *Tool {
	t, h, p := New(opts)
	r.Add(t, h)
	return p
}

// Close ends every kernel the tool started. Kernels also end with their
// sandbox. It is idempotent.
func (p *Tool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, kn := range p.kernels {
		kn.close()
		delete(p.kernels, k)
	}
}

// input is the tool's arguments object.
type input struct {
	Code      string  `json:"code"`
	TimeoutMS float64 `json:"timeout_ms,omitempty"`
}

func (p *Tool) handle(ctx context.Context, req *tool.Request) (*tool.Result, error) {
	var in input
	if err := json.Unmarshal(req.Arguments, &in); err != nil {
		return tool.Errorf("invalid arguments for python: %v", err), nil
	}
	env := req.Env
	if env == nil || env.Sandbox == nil {
		return tool.Errorf("no sandbox is configured for this run, so Python cannot run"), nil
	}
	timeout := p.opts.Timeout
	if in.TimeoutMS > 0 {
		timeout = min(time.Duration(in.TimeoutMS*float64(time.Millisecond)), p.opts.MaxTimeout)
	}
	k, note, err := p.kernel(req)
	if err != nil {
		return tool.Errorf("%v", err), nil
	}
	maxChars := env.MaxResultChars
	if maxChars <= 0 {
		maxChars = tool.DefaultMaxResultChars
	}
	budget := max(maxChars-len(note)-400, 1200)
	stdout := tool.NewOutput(env.Workspace, req.RunID, req.CallID, budget*2/3)
	stderr := tool.NewOutput(env.Workspace, req.RunID, req.CallID+".stderr", budget/3)
	if live := tool.LiveOf(ctx); live != nil {
		stdout.Tee(live)
		stderr.Tee(live)
	}
	start := time.Now()
	f, err := k.run(ctx, in.Code, timeout, p.opts.KillGrace, stdout, stderr)
	// The kernel is one long-lived sandbox command, which the sandbox
	// checks only when it ends: check what this cell left now.
	var unsafe error
	if c, ok := env.Sandbox.(workspaceChecker); ok {
		if unsafe = c.CheckWorkspace(stderr); unsafe != nil {
			p.forget(req, k)
			k.close()
		}
	}
	stdout.Close()
	stderr.Close()
	r := &tool.Result{Artifact: stdout.Artifact(), OutputBytes: stdout.Bytes() + stderr.Bytes()}
	if r.Artifact == "" {
		r.Artifact = stderr.Artifact()
	}
	var status string
	switch {
	case err == nil:
		status = statusLine(&f)
		r.IsError = f.Status != "ok"
		r.TimedOut = f.Status == "timeout"
	case err == errHardTimeout:
		p.forget(req, k)
		status = fmt.Sprintf("timeout after %s: the code ignored the interruption, so the kernel was stopped; its variables are lost and the next call starts a fresh interpreter", timeout)
		r.IsError, r.TimedOut = true, true
	case err == errKernelDied:
		p.forget(req, k)
		status = "the Python kernel died while running this code (" + k.deathNote() + "); its variables are lost and the next call starts a fresh interpreter"
		r.IsError = true
	default: // the run was stopped
		p.forget(req, k)
		status = fmt.Sprintf("interrupted: the run was stopped (%v); the kernel was stopped and its variables are lost", err)
		r.IsError = true
	}
	if unsafe != nil {
		status += "\n" + unsafe.Error() + "; the kernel was stopped"
		r.IsError = true
	}
	var b strings.Builder
	if note != "" {
		b.WriteString(note)
		b.WriteString("\n")
	}
	b.WriteString(status)
	if err == nil {
		fmt.Fprintf(&b, " (%.3fs)", f.Duration)
	} else {
		fmt.Fprintf(&b, " (%.3fs)", time.Since(start).Seconds())
	}
	section(&b, "stdout", stdout.View())
	section(&b, "stderr", stderr.View())
	if err == nil && f.Traceback != "" {
		section(&b, "traceback", boundTraceback(f.Traceback, 4000))
	}
	if err == nil && f.Status == "ok" && stdout.Bytes() == 0 && stderr.Bytes() == 0 {
		b.WriteString("\n(no output)")
	}
	r.Content = b.String()
	return r, nil
}

// workspaceChecker is implemented by sandboxes that check the workspace
// for files the host must not trust after every command
// (sandbox/linux's git guard, Sandbox.CheckWorkspace there): it runs the
// check now, writes what it did to w, and returns an error when the
// sandbox refuses more commands.
type workspaceChecker interface {
	CheckWorkspace(w io.Writer) error
}

// statusLine names a cell's outcome class.
func statusLine(f *frame) string {
	switch f.Status {
	case "ok":
		return "ok"
	case "syntax_error":
		return fmt.Sprintf("syntax_error: %s: %s — the code did not run", f.Ename, f.Evalue)
	case "timeout":
		return "timeout: " + f.Evalue + "; the kernel and its variables are kept"
	default:
		return fmt.Sprintf("error: %s: %s", f.Ename, firstLine(f.Evalue))
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// section appends a titled block when text is not empty.
func section(b *strings.Builder, title, text string) {
	if text == "" {
		return
	}
	fmt.Fprintf(b, "\n--- %s ---\n%s", title, strings.TrimRight(text, "\n"))
}

// boundTraceback keeps the head and tail of a long traceback.
func boundTraceback(s string, n int) string {
	s = tool.Sanitize(s)
	if len(s) <= n {
		return s
	}
	head, tail := n/3, n*2/3
	for head > 0 && s[head]&0xC0 == 0x80 {
		head--
	}
	start := len(s) - tail
	for start < len(s) && s[start]&0xC0 == 0x80 {
		start++
	}
	return s[:head] + fmt.Sprintf("\n[… %d bytes of traceback elided …]\n", start-head) + s[start:]
}

// kernel returns the run's live kernel, starting one if needed, and a
// note for the model when this start replaces an earlier kernel.
func (p *Tool) kernel(req *tool.Request) (*kernel, string, error) {
	env := req.Env
	k := key{run: req.RunID, sb: env.Sandbox}
	p.mu.Lock()
	defer p.mu.Unlock()
	if kn := p.kernels[k]; kn != nil {
		if kn.alive() {
			return kn, "", nil
		}
		delete(p.kernels, k)
	}
	dir := ""
	if env.Workspace != nil {
		dir = env.Workspace.MountPath()
	}
	note := ""
	prev := readState(env.Workspace, req.RunID)
	switch {
	case prev.Starts > 0 && prev.Instance == p.instance:
		note = "[note: the Python kernel was restarted because the previous one ended; variables, imports and definitions from earlier calls are lost. Re-run what you need.]"
	case prev.Starts > 0:
		note = "[note: the Python kernel was restarted because Keel restarted since the last call; variables, imports and definitions from earlier calls are lost. Re-run what you need.]"
	}
	kn, err := startKernel(env.Sandbox, p.opts.Python, dir, p.opts.StartTimeout)
	if err != nil {
		return nil, "", err
	}
	p.kernels[k] = kn
	go func() {
		<-kn.exited
		p.forgetKey(k, kn)
	}()
	writeState(env.Workspace, req.RunID, state{Starts: prev.Starts + 1, Instance: p.instance})
	return kn, note, nil
}

// forget drops a kernel that was stopped, so the next call starts anew.
func (p *Tool) forget(req *tool.Request, kn *kernel) {
	p.forgetKey(key{run: req.RunID, sb: req.Env.Sandbox}, kn)
}

func (p *Tool) forgetKey(k key, kn *kernel) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.kernels[k] == kn {
		delete(p.kernels, k)
	}
}

// state is the content of a run's kernel state file.
type state struct {
	// Starts counts the kernels started for the run.
	Starts int `json:"starts"`
	// Instance is the [Tool] that started the newest one.
	Instance string `json:"instance"`
}

func stateFile(dir, runID string) string {
	return path.Join(dir, tool.SafeName(runID, "run")+".json")
}

// readState returns the run's kernel state (zero when the state file is
// absent or unreadable).
func readState(ws *tool.Workspace, runID string) state {
	var s state
	if ws == nil {
		return s
	}
	root, dir := stateRoot(ws)
	b, err := tool.ReadRegular(root, stateFile(dir, runID), 4096)
	if err != nil || json.Unmarshal(b, &s) != nil {
		return state{}
	}
	return s
}

// writeState records the run's kernel state. A failure only loses the
// restart note of a later call.
func writeState(ws *tool.Workspace, runID string, s state) {
	if ws == nil {
		return
	}
	root, dir := stateRoot(ws)
	if err := root.MkdirAll(dir, 0o755); err != nil {
		return
	}
	b, _ := json.Marshal(s)
	_ = root.WriteFile(stateFile(dir, runID), b, 0o644)
}
