package shell_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/none"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin/shell"
)

// fakeSandbox records the command and answers with a canned result,
// writing out to the command's stdout.
type fakeSandbox struct {
	got *sandbox.Cmd
	res *sandbox.Result
	out string
	err error
}

func (f *fakeSandbox) Exec(ctx context.Context, cmd *sandbox.Cmd) (*sandbox.Result, error) {
	c := *cmd
	f.got = &c
	if cmd.Stdout != nil {
		io.WriteString(cmd.Stdout, f.out)
	}
	return f.res, f.err
}

func (f *fakeSandbox) Close() error { return nil }

func run(t *testing.T, opts *shell.Options, env *tool.Env, args string) (*tool.Result, error) {
	t.Helper()
	r := tool.NewRegistry()
	shell.Register(r, opts)
	valid, bad := r.Validate(model.ToolCall{ID: "c", Name: shell.Name, Arguments: args})
	if bad != nil {
		return bad, nil
	}
	return r.Run(t.Context(), shell.Name, &tool.Request{RunID: "r", CallID: "c", Arguments: valid, Env: env})
}

func newWorkspace(t *testing.T) *tool.Workspace {
	t.Helper()
	ws, err := tool.NewWorkspace(t.TempDir(), "/work", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return ws
}

func TestBashCommand(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	f := &fakeSandbox{res: &sandbox.Result{ExitCode: 0}, out: "hi\n"}
	res, err := run(t, nil, &tool.Env{Sandbox: f, Workspace: ws, CommandTimeout: 42 * time.Second}, `{"command":"echo hi"}`)
	if err != nil {
		t.Fatal(err)
	}
	want := &sandbox.Cmd{Args: []string{"bash", "-c", "echo hi"}, Dir: "/work", Timeout: 42 * time.Second, IdleTimeout: shell.DefaultIdleTimeout}
	f.got.Stdout = nil
	if diff := cmp.Diff(want, f.got); diff != "" {
		t.Errorf("command (-want +got):\n%s", diff)
	}
	if res.Content != "exit code: 0\nhi\n" || res.IsError || *res.ExitCode != 0 || res.OutputBytes != 3 {
		t.Errorf("result = %+v", res)
	}
}

func TestBashTimeouts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name       string
		opts       *shell.Options
		env        time.Duration
		args       string
		want, idle time.Duration
	}{
		{"default", nil, 0, `{"command":"x"}`, shell.DefaultCommandTimeout, shell.DefaultIdleTimeout},
		{"timeout_ms", nil, time.Minute, `{"command":"x","timeout_ms":1500}`, 1500 * time.Millisecond, shell.DefaultIdleTimeout},
		{"timeout_ms as a float", nil, 0, `{"command":"x","timeout_ms":3000.0}`, 3 * time.Second, shell.DefaultIdleTimeout},
		{"idle disabled", &shell.Options{IdleTimeout: -1}, 0, `{"command":"x"}`, shell.DefaultCommandTimeout, 0},
		{"clamped to max", &shell.Options{MaxTimeout: time.Second}, 0, `{"command":"x","timeout_ms":1000}`, time.Second, shell.DefaultIdleTimeout},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeSandbox{res: &sandbox.Result{}}
			if _, err := run(t, tt.opts, &tool.Env{Sandbox: f, CommandTimeout: tt.env}, tt.args); err != nil {
				t.Fatal(err)
			}
			if f.got.Timeout != tt.want || f.got.IdleTimeout != tt.idle {
				t.Errorf("timeout, idle = %v, %v; want %v, %v", f.got.Timeout, f.got.IdleTimeout, tt.want, tt.idle)
			}
		})
	}
}

func TestBashResultHeaders(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		res     sandbox.Result
		out     string
		header  string
		isError bool
	}{
		{sandbox.Result{ExitCode: 2}, "boom\n", "exit code: 2\nboom\n", false},
		{sandbox.Result{ExitCode: 0}, "", "exit code: 0\n(no output)", false},
		{sandbox.Result{ExitCode: 143, Signal: "SIGTERM", TimedOut: true}, "partial\n", "exit code: 143 (timed out after 1m0s; process tree killed)\npartial\n", true},
		{sandbox.Result{ExitCode: 143, Signal: "SIGTERM", Idle: true}, "", "exit code: 143 (killed: no output for 2m0s, likely waiting for input; process tree killed)\n(no output)", true},
		{sandbox.Result{ExitCode: 137, Signal: "SIGKILL", Limit: "memory"}, "", "exit code: 137 (killed: memory limit)\n(no output)", true},
		{sandbox.Result{ExitCode: 0, Limit: "memory"}, "", "exit code: 0 (memory limit reached: a process of the command was killed for lack of memory)\n(no output)", false},
		{sandbox.Result{ExitCode: 1, Limit: "processes"}, "", "exit code: 1 (process limit reached: some forks failed)\n(no output)", false},
		{sandbox.Result{ExitCode: 0, Limit: "processes"}, "", "exit code: 0 (process limit reached: some forks failed)\n(no output)", false},
		{sandbox.Result{ExitCode: 137, Signal: "SIGKILL", Limit: "processes"}, "", "exit code: 137 (ended by signal SIGKILL; process limit reached: some forks failed)\n(no output)", false},
		{sandbox.Result{ExitCode: 143, Signal: "SIGTERM", Limit: "output"}, "", "exit code: 143 (killed: output size limit)\n(no output)", true},
		{sandbox.Result{ExitCode: 137, Signal: "SIGKILL", Limit: "output"}, "", "exit code: 137 (killed: output size limit)\n(no output)", true},
		{sandbox.Result{ExitCode: 0, Limit: "output"}, "", "exit code: 0 (output size limit reached: output beyond it was dropped)\n(no output)", false},
		{sandbox.Result{ExitCode: 153, Signal: "SIGXFSZ", Limit: "file_size"}, "", "exit code: 153 (killed: file size limit)\n(no output)", true},
		{sandbox.Result{ExitCode: 153, Limit: "file_size"}, "", "exit code: 153 (file size limit reached: a process of the command was stopped by it)\n(no output)", false},
		{sandbox.Result{ExitCode: 152, Signal: "SIGXCPU", Limit: "cpu_time"}, "", "exit code: 152 (killed: CPU time limit)\n(no output)", true},
		{sandbox.Result{ExitCode: 137, Signal: "SIGKILL", Limit: "cpu_time"}, "", "exit code: 137 (killed: CPU time limit)\n(no output)", true},
		{sandbox.Result{ExitCode: 152, Limit: "cpu_time"}, "", "exit code: 152 (CPU time limit reached: a process of the command was stopped by it)\n(no output)", false},
		{sandbox.Result{ExitCode: 139, Signal: "SIGSEGV"}, "", "exit code: 139 (ended by signal SIGSEGV)\n(no output)", false},
	} {
		f := &fakeSandbox{res: &tt.res, out: tt.out}
		res, err := run(t, nil, &tool.Env{Sandbox: f}, `{"command":"x"}`)
		if err != nil {
			t.Fatal(err)
		}
		if res.Content != tt.header || res.IsError != tt.isError || *res.ExitCode != tt.res.ExitCode || res.TimedOut != (tt.res.TimedOut || tt.res.Idle) {
			t.Errorf("for %+v: result = %+v, want content %q, is_error %v", tt.res, res, tt.header, tt.isError)
		}
	}
}

func TestBashErrors(t *testing.T) {
	t.Parallel()
	res, err := run(t, nil, &tool.Env{}, `{"command":"ls"}`)
	if err != nil || !res.IsError || !strings.Contains(res.Content, "no sandbox is configured") {
		t.Errorf("no sandbox: %v, %v", res, err)
	}
	for _, args := range []string{`{}`, `{"command":""}`, `{"command":"ls","timeout_ms":0}`, `{"command":"ls","timeout_ms":99999999999}`, `{"command":1}`} {
		res, err := run(t, nil, &tool.Env{Sandbox: &fakeSandbox{res: &sandbox.Result{}}}, args)
		if err != nil || !res.IsError {
			t.Errorf("args %s accepted: %v, %v", args, res, err)
		}
	}
	res, err = run(t, nil, &tool.Env{Sandbox: &fakeSandbox{res: &sandbox.Result{}}}, `{"command":"   "}`)
	if err != nil || !res.IsError || !strings.Contains(res.Content, "command is empty") {
		t.Errorf("blank command: %v, %v", res, err)
	}
	// A sandbox that cannot run anything is a runtime error, not a
	// result the model could fix.
	broken := &fakeSandbox{err: fmt.Errorf("no user namespaces: %w", sandbox.ErrUnavailable)}
	if _, err := run(t, nil, &tool.Env{Sandbox: broken}, `{"command":"ls"}`); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("broken sandbox: err = %v, want ErrUnavailable", err)
	}
}

// TestBashCanceled ends a real command by canceling the call's context.
func TestBashCanceled(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	sb, err := none.New(&sandbox.Spec{Workspace: ws.Root(), MountPath: ws.MountPath()})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	r := tool.NewRegistry()
	shell.Register(r, nil)
	ctx, cancel := context.WithCancelCause(t.Context())
	started := make(chan struct{})
	go func() {
		// Cancel once the command has printed: it is running.
		<-started
		cancel(errors.New("user pressed Esc"))
	}()
	env := &tool.Env{Sandbox: &startSignal{Sandbox: sb, started: started}, Workspace: ws}
	res, err := r.Run(ctx, shell.Name, &tool.Request{RunID: "r", CallID: "c", Arguments: json.RawMessage(`{"command":"echo up; sleep 600.5151"}`), Env: env})
	if err != nil || !res.IsError || !strings.Contains(res.Content, "(canceled: user pressed Esc; process tree killed)\nup\n") {
		t.Errorf("canceled call = %+v, %v", res, err)
	}
	// Already canceled: nothing starts.
	res, err = r.Run(ctx, shell.Name, &tool.Request{RunID: "r", CallID: "c2", Arguments: json.RawMessage(`{"command":"echo never"}`), Env: &tool.Env{Sandbox: sb, Workspace: ws}})
	if err != nil || !res.IsError || res.Content != "canceled: user pressed Esc" {
		t.Errorf("call after cancel = %+v, %v", res, err)
	}
}

// startSignal closes started at the first output of a command.
type startSignal struct {
	sandbox.Sandbox
	started chan struct{}
}

func (s *startSignal) Exec(ctx context.Context, cmd *sandbox.Cmd) (*sandbox.Result, error) {
	c := *cmd
	c.Stdout = &firstWrite{w: cmd.Stdout, first: s.started}
	return s.Sandbox.Exec(ctx, &c)
}

type firstWrite struct {
	w     io.Writer
	first chan struct{}
	done  bool
}

func (f *firstWrite) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if !f.done {
		f.done = true
		close(f.first)
	}
	return n, err
}

func TestBashDescription(t *testing.T) {
	t.Parallel()
	tl, _ := shell.New(&shell.Options{IdleTimeout: 45 * time.Second})
	for _, want := range []string{"fresh shell", "`cd`", "/dev/null", "45s", "600000"} {
		if !strings.Contains(tl.Description, want) {
			t.Errorf("description lacks %q", want)
		}
	}
	if tl.Effect != tool.External || tl.Scope != nil || tl.Idempotent {
		t.Errorf("effect %v, scope nil %v, idempotent %v", tl.Effect, tl.Scope == nil, tl.Idempotent)
	}
}
