package python_test

import (
	"context"
	"encoding/json"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/linux"
	"github.com/keel-run/keel/sandbox/none"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin/python"
)

func TestMain(m *testing.M) {
	linux.Init()
	os.Exit(m.Run())
}

// fixture is one run's environment: a workspace, a sandbox and the tool.
type fixture struct {
	t    *testing.T
	env  *tool.Env
	reg  *tool.Registry
	py   *python.Tool
	opts *python.Options
	n    int
}

// backends are the sandboxes the kernel is tested in.
func backends(t *testing.T) map[string]func(spec *sandbox.Spec) (sandbox.Sandbox, error) {
	b := map[string]func(spec *sandbox.Spec) (sandbox.Sandbox, error){
		"none": func(spec *sandbox.Spec) (sandbox.Sandbox, error) { return none.New(spec) },
	}
	if runtime.GOOS == "linux" {
		b["linux"] = func(spec *sandbox.Spec) (sandbox.Sandbox, error) { return linux.New(spec, nil) }
	}
	return b
}

func newFixture(t *testing.T, newSB func(*sandbox.Spec) (sandbox.Sandbox, error), opts *python.Options) *fixture {
	t.Helper()
	if _, err := os.Stat(python.DefaultPython); err != nil {
		t.Skipf("no %s: %v", python.DefaultPython, err)
	}
	dir := t.TempDir()
	ws, err := tool.NewWorkspace(dir, "/workspace", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	sb, err := newSB(&sandbox.Spec{Workspace: dir, MountPath: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	f := &fixture{t: t, env: &tool.Env{Sandbox: sb, Workspace: ws}, opts: opts}
	f.restart()
	return f
}

// restart replaces the tool, as a new Keel process would (the sandbox
// and workspace stay).
func (f *fixture) restart() {
	if f.py != nil {
		f.py.Close()
	}
	f.reg = tool.NewRegistry()
	f.py = python.Register(f.reg, f.opts)
	f.t.Cleanup(f.py.Close)
}

func (f *fixture) run(code string, timeoutMS int) *tool.Result {
	f.t.Helper()
	f.n++
	args := map[string]any{"code": code}
	if timeoutMS > 0 {
		args["timeout_ms"] = timeoutMS
	}
	b, _ := json.Marshal(args)
	valid, res := f.reg.Validate(toolCall(string(b)))
	if res != nil {
		f.t.Fatalf("invalid call: %s", res.Content)
	}
	r, err := f.reg.Run(context.Background(), python.Name, &tool.Request{RunID: "run1", CallID: "c" + string(rune('a'+f.n)), Arguments: valid, Env: f.env})
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

func head(r *tool.Result) string {
	l, _, _ := strings.Cut(r.Content, "\n")
	return l
}

func TestKernel(t *testing.T) {
	for name, newSB := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, newSB, &python.Options{KillGrace: 300 * time.Millisecond})

			// State survives between calls; a final expression is shown.
			if r := f.run("x = 41\nimport math", 0); r.IsError || !strings.HasPrefix(r.Content, "ok") {
				t.Fatalf("first call: %q", r.Content)
			}
			r := f.run("x + 1", 0)
			if r.IsError || !strings.Contains(r.Content, "--- stdout ---\n42") {
				t.Errorf("state: %q", r.Content)
			}

			// The result classes are distinct.
			for _, tt := range []struct {
				name, code string
				timeout    int
				status     string
				contains   []string
				timedOut   bool
			}{
				{"syntax", "def f(:\n  pass", 0, "syntax_error: SyntaxError", []string{"the code did not run", "--- traceback ---"}, false},
				{"exception", "print('before')\nimport sys\nprint('warn', file=sys.stderr)\n{}['k']", 0, "error: KeyError", []string{"--- stdout ---\nbefore", "--- stderr ---\nwarn", "<cell", "KeyError: 'k'"}, false},
				{"timeout", "import time\ny = 7\ntime.sleep(30)", 300, "timeout:", []string{"kept"}, true},
				{"subprocess", "import subprocess\nsubprocess.run(['echo', 'from a child'])", 0, "ok", []string{"from a child"}, false},
			} {
				r := f.run(tt.code, tt.timeout)
				if !strings.HasPrefix(head(r), tt.status) {
					t.Errorf("%s: status %q, want prefix %q", tt.name, head(r), tt.status)
				}
				if r.IsError != (tt.status != "ok") || r.TimedOut != tt.timedOut {
					t.Errorf("%s: IsError %v TimedOut %v", tt.name, r.IsError, r.TimedOut)
				}
				for _, c := range tt.contains {
					if !strings.Contains(r.Content, c) {
						t.Errorf("%s: result lacks %q:\n%s", tt.name, c, r.Content)
					}
				}
			}
			// A timeout keeps the kernel and its variables.
			if r := f.run("print(x, y)", 0); !strings.Contains(r.Content, "41 7") {
				t.Errorf("after timeout: %q", r.Content)
			}

			// A cell that ignores its interruption gets the kernel killed;
			// the next call says the variables are lost.
			r = f.run("import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\ntime.sleep(30)", 200)
			if !r.TimedOut || !strings.Contains(r.Content, "variables are lost") {
				t.Errorf("hard timeout: %q", r.Content)
			}
			r = f.run("x", 0)
			if !strings.Contains(r.Content, "kernel was restarted") || !strings.Contains(r.Content, "NameError") {
				t.Errorf("after hard timeout: %q", r.Content)
			}

			// A kernel that dies is reported, and restarted.
			f.run("z = 1", 0)
			r = f.run("import os\nos._exit(3)", 0)
			if !r.IsError || !strings.Contains(r.Content, "died") || !strings.Contains(r.Content, "code 3") {
				t.Errorf("death: %q", r.Content)
			}
			if r := f.run("z", 0); !strings.Contains(r.Content, "restarted") || !strings.Contains(r.Content, "NameError") {
				t.Errorf("after death: %q", r.Content)
			}

			// A new Keel process (kill -9 and resume) finds the run's
			// earlier kernel recorded and says its variables are lost.
			f.run("w = 5", 0)
			f.restart()
			if r := f.run("w", 0); !strings.Contains(r.Content, "Keel restarted") || !strings.Contains(r.Content, "NameError") {
				t.Errorf("after restart: %q", r.Content)
			}
		})
	}
}

// Long output is bounded for the model and saved whole.
func TestKernelLongOutput(t *testing.T) {
	f := newFixture(t, backends(t)["none"], nil)
	r := f.run("for i in range(200000): print('line', i)", 0)
	if r.IsError || r.Artifact == "" {
		t.Fatalf("result: error %v artifact %q", r.IsError, r.Artifact)
	}
	if n := len([]rune(r.Content)); n > tool.DefaultMaxResultChars {
		t.Errorf("content has %d characters, bound %d", n, tool.DefaultMaxResultChars)
	}
	b, err := f.env.Workspace.FS().ReadFile(r.Artifact)
	if err != nil || !strings.HasSuffix(string(b), "line 199999\n") || r.OutputBytes != int64(len(b)) {
		t.Errorf("artifact: %d bytes, %v; OutputBytes %d", len(b), err, r.OutputBytes)
	}
}

func toolCall(args string) model.ToolCall {
	return model.ToolCall{ID: "x", Name: python.Name, Arguments: args}
}

// TestKernelCellChecked: what a cell plants for the host's git is
// quarantined when the cell ends, although the kernel keeps running
// (the sandbox checks other commands when they end).
func TestKernelCellChecked(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the git guard is sandbox/linux's")
	}
	f := newFixture(t, func(spec *sandbox.Spec) (sandbox.Sandbox, error) {
		return linux.New(spec, &linux.Options{GuardInterval: -1}) // only the cell's own check
	}, nil)
	r := f.run("import os\nos.makedirs('sub/.git', exist_ok=True)\nopen('sub/.git/config', 'w').write('[core]\\n\\tfsmonitor = evil\\n')\nx = 1", 0)
	if r.IsError || !strings.Contains(r.Content, "keel: quarantined sub/.git/config") {
		t.Errorf("result of the planting cell:\n%s", r.Content)
	}
	if _, err := os.Lstat(f.env.Workspace.HostPath("sub/.git/config")); err == nil {
		t.Error("the planted config is still in the workspace after the cell")
	}
	if r := f.run("x", 0); r.IsError || !strings.Contains(r.Content, "--- stdout ---\n1") {
		t.Errorf("the kernel did not survive the check: %q", r.Content)
	}
}

// A cell that closes or replaces the kernel's output (os.close(1),
// sys.stdout.close(), os.close(2), sys.stdout = open(os.devnull)) does not
// break later cells: the kernel reconnects it,
// keeps its variables and says so in the cell's stderr.
func TestKernelOutputClosed(t *testing.T) {
	for _, tt := range []struct{ name, code, note string }{
		{"close fd 1", "import os\nos.close(1)", "closed or replaced the kernel's stdout"},
		{"close sys.stdout", "import sys\nsys.stdout.close()", "closed or replaced the kernel's stdout"},
		{"close fd 2", "import os\nos.close(2)", "closed or replaced the kernel's stderr"},
		{"replace fd 1 with a file", "import os\nfd = os.open('f.txt', os.O_WRONLY|os.O_CREAT)\nos.dup2(fd, 1)", "closed or replaced the kernel's stdout"},
		{"replace sys.stdout", "import sys\nsys.stdout = open('/dev/null', 'w')\nprint('hidden')", "closed or replaced the kernel's stdout"},
		{"replace sys.stderr", "import sys, io\nsys.stderr = io.StringIO()", "closed or replaced the kernel's stderr"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, backends(t)["none"], nil)
			f.run("x = 7", 0)
			if r := f.run(tt.code, 0); !strings.Contains(r.Content, tt.note) {
				t.Errorf("closing cell: %q", r.Content)
			}
			r := f.run("import sys\nprint('back', x)\nprint('err', file=sys.stderr)", 0)
			if r.IsError || !strings.Contains(r.Content, "--- stdout ---\nback 7") || !strings.Contains(r.Content, "--- stderr ---\nerr") || strings.Contains(r.Content, "restarted") {
				t.Errorf("next cell: %q", r.Content)
			}
		})
	}
}
