// Package shelltest is a test kit of shell behaviours every sandbox
// backend must show through Keel's bash tool: a command that waits on a
// pager or an open stdin (SHELL-HANG), processes left behind at a timeout
// (PROCESS-TREE), output that floods the context (OUTPUT-FLOOD), bytes
// that would break a JSON request (OUTPUT-BYTES) and their relatives,
// each run as a model would run it, through [tool.Registry.Validate] and
// the registered bash tool.
//
// A backend's test calls [Run] with a factory:
//
//	func TestShellCases(t *testing.T) {
//		shelltest.Run(t, func(t *testing.T, spec *sandbox.Spec) sandbox.Sandbox {
//			sb, err := linux.New(spec, nil)
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { sb.Close() })
//			return sb
//		})
//	}
//
// Run must not be called from a parallel test: a few cases set Keel's own
// environment (t.Setenv) to check that none of it reaches the command.
// The other cases run in parallel. Cases look for leftover processes by a
// numeric token in their command line, from the host's /proc (pgrep -f),
// so the host must see the sandbox's processes (true for PID namespaces).
package shelltest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin/shell"
)

// NewSandbox returns the sandbox under test for spec. It should register
// the sandbox's Close with t.Cleanup and fail t if it cannot create one.
type NewSandbox func(t *testing.T, spec *sandbox.Spec) sandbox.Sandbox

// Case is one shell behaviour.
type Case struct {
	// Name is the bug-case kind and a short variant, e.g.
	// "PROCESS-TREE/timeout-orphans/b-background-writer".
	Name string
	// Setup prepares the workspace directory dir on the host; optional.
	Setup func(t *testing.T, dir string)
	// HostEnv is set in Keel's own environment (t.Setenv) during the
	// case; a sandbox must not pass any of it on. Such cases run serially.
	HostEnv []string
	// SpecEnv is [sandbox.Spec].Env: what an operator configured.
	SpecEnv []string
	// Command is the bash command; every "{{T}}" becomes a numeric token
	// unique to the case, used to look for leftover processes.
	Command string
	// TimeoutMS is the call's timeout_ms; 0 leaves it out.
	TimeoutMS int
	// IdleTimeout is the bash tool's [shell.Options].IdleTimeout; 0 means
	// the tool's default.
	IdleTimeout time.Duration
	// MaxElapsed bounds how long the call may take. It is not a speed
	// goal: it is set well below the time the fault would take (the
	// timeout a hung call would reach, or a sleep a call would wait on),
	// so exceeding it means the fault is back. 0 means no bound.
	MaxElapsed time.Duration
	// NoLeftovers requires that, once the call has returned, no process
	// whose command line contains the token exists (pgrep -f TOKEN).
	NoLeftovers bool
	// Check inspects the outcome; optional.
	Check func(t *testing.T, o *Outcome)
}

// Outcome is what a case's Check sees.
type Outcome struct {
	// Result is the bash tool's result.
	Result *tool.Result
	// Elapsed is the call's wall time.
	Elapsed time.Duration
	// Dir is the workspace's host directory.
	Dir string
	// Token is the case's token.
	Token string
	// Call runs another command in the same sandbox and workspace.
	Call func(command string) *tool.Result
}

// Output returns the output part of the result (after the "exit code"
// line).
func (o *Outcome) Output() string {
	_, rest, _ := strings.Cut(o.Result.Content, "\n")
	return rest
}

// Header returns the result's first line.
func (o *Outcome) Header() string {
	h, _, _ := strings.Cut(o.Result.Content, "\n")
	return h
}

// Run runs every case of [Cases] against the sandboxes newSandbox makes.
func Run(t *testing.T, newSandbox NewSandbox) {
	for _, c := range Cases() {
		RunCase(t, c, newSandbox)
	}
}

// RunCase runs one case as a subtest: it makes a workspace and a sandbox,
// registers the bash tool, validates and runs the call, checks the
// invariants every result must hold (valid JSON, valid UTF-8 without raw
// control characters, within the result bound, an "exit code" header),
// then the case's own expectations.
func RunCase(t *testing.T, c Case, newSandbox NewSandbox) {
	t.Run(c.Name, func(t *testing.T) {
		if len(c.HostEnv) == 0 {
			t.Parallel()
		}
		for _, kv := range c.HostEnv {
			k, v, _ := strings.Cut(kv, "=")
			t.Setenv(k, v)
		}
		dir := t.TempDir()
		if c.Setup != nil {
			c.Setup(t, dir)
		}
		spec := &sandbox.Spec{Workspace: dir, MountPath: sandbox.DefaultMountPath, Env: c.SpecEnv}
		sb := newSandbox(t, spec)
		ws, err := tool.NewWorkspace(dir, spec.MountPath, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ws.Close() })
		reg := tool.NewRegistry()
		shell.Register(reg, &shell.Options{IdleTimeout: c.IdleTimeout})
		env := &tool.Env{Sandbox: sb, Workspace: ws}
		token := strconv.Itoa(100000 + rand.IntN(900000))
		n := 0
		call := func(command string, timeoutMS int) (*tool.Result, time.Duration) {
			t.Helper()
			n++
			args := map[string]any{"command": command}
			if timeoutMS > 0 {
				args["timeout_ms"] = timeoutMS
			}
			raw, _ := json.Marshal(args)
			valid, bad := reg.Validate(model.ToolCall{ID: "c", Name: shell.Name, Arguments: string(raw)})
			if bad != nil {
				t.Fatalf("Validate(%s) = %q", raw, bad.Content)
			}
			start := time.Now()
			res, err := reg.Run(t.Context(), shell.Name, &tool.Request{RunID: "shelltest", CallID: fmt.Sprintf("%s-%d", token, n), Arguments: valid, Env: env})
			elapsed := time.Since(start)
			if err != nil {
				t.Fatalf("bash %q: runtime error %v", command, err)
			}
			checkInvariants(t, res)
			return res, elapsed
		}
		res, elapsed := call(strings.ReplaceAll(c.Command, "{{T}}", token), c.TimeoutMS)
		t.Logf("bash %q took %v: %.300q", c.Command, elapsed, res.Content)
		if c.MaxElapsed > 0 && elapsed > c.MaxElapsed {
			t.Errorf("the call took %v; the fault this case guards against takes longer than %v", elapsed, c.MaxElapsed)
		}
		if c.NoLeftovers {
			if left := Leftovers(token); len(left) > 0 {
				t.Errorf("processes left running after the call: %s", strings.Join(left, "; "))
			}
		}
		if c.Check != nil {
			c.Check(t, &Outcome{Result: res, Elapsed: elapsed, Dir: dir, Token: token, Call: func(command string) *tool.Result {
				r, _ := call(command, 0)
				return r
			}})
		}
	})
}

// checkInvariants checks what every bash result must satisfy.
func checkInvariants(t *testing.T, r *tool.Result) {
	t.Helper()
	if !utf8.ValidString(r.Content) {
		t.Errorf("content is not valid UTF-8")
	}
	for _, c := range r.Content {
		if (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f {
			t.Errorf("content has raw control character %U", c)
			break
		}
	}
	if n := utf8.RuneCountInString(r.Content); n > tool.DefaultMaxResultChars {
		t.Errorf("content has %d characters, bound is %d", n, tool.DefaultMaxResultChars)
	}
	if !strings.HasPrefix(r.Content, "exit code: ") || r.ExitCode == nil {
		t.Errorf("content does not start with the exit code: %.80q", r.Content)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatalf("json.Marshal(result): %v", err)
	}
	var back tool.Result
	if err := json.Unmarshal(b, &back); err != nil || back.Content != r.Content {
		t.Errorf("the result does not round-trip through JSON: %v", err)
	}
}

// Leftovers returns "pid cmdline" for every live process whose command
// line contains token, as `pgrep -af token` would list them (pgrep itself
// is used when installed; otherwise /proc is read directly).
func Leftovers(token string) []string {
	if p, err := exec.LookPath("pgrep"); err == nil {
		out, err := exec.Command(p, "-af", token).Output()
		if err == nil || len(out) > 0 {
			return strings.Split(strings.TrimSpace(string(out)), "\n")
		}
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 {
			return nil
		}
	}
	var left []string
	entries, _ := os.ReadDir("/proc")
	self := strconv.Itoa(os.Getpid())
	for _, e := range entries {
		if e.Name() == self || e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(token)) {
			left = append(left, e.Name()+" "+string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		}
	}
	return left
}
