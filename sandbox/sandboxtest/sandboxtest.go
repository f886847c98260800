// Package sandboxtest checks that a [sandbox.Sandbox] backend keeps the
// sandbox contract (docs/architecture.md, "Contract — sandbox"), in the manner of
// testing/slogtest.
//
// [Run] checks the execution contract every backend keeps, sandbox/none
// included: exit codes and signals, the order of combined output, stdin
// at EOF, the environment allowlist, the working directory, a writable
// workspace, wall-time and idle limits that end whole process trees, no
// process outliving its call, the output limit, cancellation, concurrent
// calls and Close.
//
// [RunEscapes] is the escape suite for isolating backends only: more than
// a hundred attempts to read host files and environment, write outside
// the workspace, abuse symbolic and hard links, probe /proc and /sys,
// trace processes, mount, create namespaces, gain privileges, reach the
// network, write protected paths, make the host's git run a planted
// program, and exhaust processes, memory and disk. Every case must fail,
// and fail the expected way. For git files that cannot be read-only
// before they exist, a backend may let the write happen and move the file
// aside when the command ends; it must then say "quarantined" in the
// command's output, and the case's host-side check (which runs the host's
// git as a person would) decides.
//
// Usage, in a backend's tests:
//
//	func TestConformance(t *testing.T) {
//		sandboxtest.Run(t, func(t *testing.T, spec *sandbox.Spec) sandbox.Sandbox {
//			sb, err := mybackend.New(spec)
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { sb.Close() })
//			return sb
//		})
//	}
//
// Some checks use tools that may be missing inside a sandbox (python3,
// git, curl, wget, nc); such a check is skipped with a loud message naming
// the package to install, never silently. Cases prefer plain bash.
package sandboxtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-run/keel/sandbox"
)

// NewFunc creates the sandbox under test for spec. It should register
// the sandbox's Close with t.Cleanup; the kit closes it too (Close is
// idempotent).
type NewFunc func(t *testing.T, spec *sandbox.Spec) sandbox.Sandbox

// callTimeout bounds any single call the kit makes, so a backend that
// hangs fails the test instead of stalling it.
const callTimeout = 2 * time.Minute

// newSandbox makes a fresh workspace and sandbox; edit may change the
// spec first.
func newSandbox(t *testing.T, newFn NewFunc, edit func(*sandbox.Spec)) (sandbox.Sandbox, *sandbox.Spec) {
	t.Helper()
	spec := &sandbox.Spec{Workspace: t.TempDir(), MountPath: sandbox.DefaultMountPath}
	if edit != nil {
		edit(spec)
	}
	sb := newFn(t, spec)
	if sb == nil {
		t.Fatal("sandboxtest: NewFunc returned nil")
	}
	t.Cleanup(func() { sb.Close() })
	return sb, spec
}

// run executes a bash script and returns the result and combined output.
func run(t *testing.T, sb sandbox.Sandbox, c sandbox.Cmd) (*sandbox.Result, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var out syncBuffer
	if c.Stdout == nil {
		c.Stdout = &out
	}
	res, err := sb.Exec(ctx, &c)
	if err != nil {
		t.Fatalf("Exec(%q) error: %v", c.Args, err)
	}
	if res == nil {
		t.Fatalf("Exec(%q) returned a nil Result and no error", c.Args)
	}
	return res, out.String()
}

func bash(script string) []string { return []string{"bash", "-c", script} }

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// leftovers lists the processes visible in the sandbox whose command line
// contains marker (the kit starts long-lived processes under unique
// names with bash's exec -a).
func leftovers(t *testing.T, sb sandbox.Sandbox, marker string) string {
	t.Helper()
	script := `for p in /proc/[0-9]*; do c=$(tr '\0' ' ' 2>/dev/null <$p/cmdline); case "$c" in *` + marker + `*) echo "${p#/proc/} $c";; esac; done; true`
	_, out := run(t, sb, sandbox.Cmd{Args: bash(script)})
	// The scanning shell itself contains the marker in its own command line.
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l != "" && !strings.Contains(l, "/proc/[0-9]*") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// uniq returns a name unique to this test.
func uniq(t *testing.T, prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), time.Now().UnixNano())
}

// Run checks the execution contract of the backend newFn creates. Each
// check gets a fresh sandbox and workspace.
func Run(t *testing.T, newFn NewFunc) {
	t.Run("ExitCodes", func(t *testing.T) {
		t.Parallel()
		sb, _ := newSandbox(t, newFn, nil)
		for _, tt := range []struct {
			name   string
			args   []string
			code   int
			signal string
		}{
			{"true", []string{"true"}, 0, ""},
			{"exit3", bash("exit 3"), 3, ""},
			{"killed_by_signal", bash("kill -TERM $$"), 143, "SIGTERM"},
			{"not_found", []string{"keel-no-such-command"}, 127, ""},
			{"not_found_in_shell", bash("keel-no-such-command"), 127, ""},
		} {
			res, out := run(t, sb, sandbox.Cmd{Args: tt.args})
			if res.ExitCode != tt.code || res.Signal != tt.signal {
				t.Errorf("%s: ExitCode, Signal = %d, %q, want %d, %q (output %q)", tt.name, res.ExitCode, res.Signal, tt.code, tt.signal, out)
			}
			if res.TimedOut || res.Idle || res.Limit != "" {
				t.Errorf("%s: unexpected flags %+v", tt.name, res)
			}
		}
	})

	t.Run("CombinedOutputOrder", func(t *testing.T) {
		t.Parallel()
		sb, _ := newSandbox(t, newFn, nil)
		_, out := run(t, sb, sandbox.Cmd{Args: bash("echo one; echo two >&2; echo three; echo four >&2")})
		if want := "one\ntwo\nthree\nfour\n"; out != want {
			t.Errorf("combined output = %q, want %q", out, want)
		}
	})

	t.Run("SplitOutput", func(t *testing.T) {
		t.Parallel()
		sb, _ := newSandbox(t, newFn, nil)
		var so, se syncBuffer
		run(t, sb, sandbox.Cmd{Args: bash("echo out; echo err >&2"), Stdout: &so, Stderr: &se})
		if so.String() != "out\n" || se.String() != "err\n" {
			t.Errorf("stdout, stderr = %q, %q, want %q, %q", so.String(), se.String(), "out\n", "err\n")
		}
	})

	t.Run("StdinAtEOF", func(t *testing.T) {
		t.Parallel()
		sb, _ := newSandbox(t, newFn, nil)
		for _, tt := range []struct {
			name, script, want string
			code               int
		}{
			{"cat", "cat; echo rc=$?", "rc=0\n", 0},
			{"read", `read -r -p 'continue? ' a; echo "got:[$a] rc=$?"`, "got:[] rc=1\n", 0},
			{"head", "head -c 10 | wc -c", "0\n", 0},
		} {
			res, out := run(t, sb, sandbox.Cmd{Args: bash(tt.script)})
			if res.ExitCode != tt.code || !strings.HasSuffix(out, tt.want) {
				t.Errorf("%s: exit %d output %q, want exit %d ending %q", tt.name, res.ExitCode, out, tt.code, tt.want)
			}
		}
	})

	t.Run("EnvironmentAllowlist", func(t *testing.T) { testEnv(t, newFn) })
	t.Run("Stdin", func(t *testing.T) { RunStdin(t, newFn) })

	t.Run("WorkingDirectory", func(t *testing.T) {
		t.Parallel()
		sb, spec := newSandbox(t, newFn, nil)
		if err := os.Mkdir(filepath.Join(spec.Workspace, "sub dir"), 0o755); err != nil {
			t.Fatal(err)
		}
		// A backend without a mount namespace runs in the host directory.
		host, err := filepath.EvalSymlinks(spec.Workspace)
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct{ dir, sub string }{{"", ""}, {"sub dir", "/sub dir"}, {spec.MountPath + "/sub dir", "/sub dir"}} {
			_, out := run(t, sb, sandbox.Cmd{Args: []string{"pwd", "-P"}, Dir: tt.dir})
			got := strings.TrimSpace(out)
			if got != spec.MountPath+tt.sub && got != host+tt.sub {
				t.Errorf("pwd in Dir %q = %q, want %q (or the host path %q)", tt.dir, got, spec.MountPath+tt.sub, host+tt.sub)
			}
		}
	})

	t.Run("WorkspaceReadWrite", func(t *testing.T) {
		t.Parallel()
		sb, spec := newSandbox(t, newFn, nil)
		if err := os.WriteFile(filepath.Join(spec.Workspace, "from host.txt"), []byte("host\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		res, out := run(t, sb, sandbox.Cmd{Args: bash(`cat "from host.txt" && printf 'sandbox\n' > "from sandbox ü.txt" && mkdir -p a/b && echo x > a/b/c && mv a/b/c a/c && rm -r a/b`)})
		if res.ExitCode != 0 || out != "host\n" {
			t.Fatalf("exit %d, output %q, want 0, %q", res.ExitCode, out, "host\n")
		}
		b, err := os.ReadFile(filepath.Join(spec.Workspace, "from sandbox ü.txt"))
		if err != nil || string(b) != "sandbox\n" {
			t.Errorf("host sees %q, %v; want %q", b, err, "sandbox\n")
		}
		if _, err := os.Stat(filepath.Join(spec.Workspace, "a", "c")); err != nil {
			t.Errorf("file moved inside the workspace: %v", err)
		}
	})

	t.Run("TimeoutKillsTree", func(t *testing.T) {
		t.Parallel()
		sb, _ := newSandbox(t, newFn, nil)
		m := uniq(t, "keel-tick")
		for _, script := range []string{
			// A background writer survives the wrapper (bug case 3b).
			`(while :; do echo tick; sleep 1; done) & exec -a ` + m + ` sleep 600`,
			// A descendant that ignores SIGTERM (bug case 3c).
			`bash -c 'trap "" TERM; exec -a ` + m + ` sleep 600' & wait`,
		} {
			res, _ := run(t, sb, sandbox.Cmd{Args: bash(script), Timeout: time.Second, Limits: &sandbox.Limits{KillGrace: 500 * time.Millisecond}})
			if !res.TimedOut {
				t.Errorf("%q: TimedOut = false, want true (%+v)", script, res)
			}
			if res.ExitCode == 0 {
				t.Errorf("%q: exit code 0 after a timeout", script)
			}
			if l := leftovers(t, sb, m); l != "" {
				t.Errorf("%q: processes left after the timeout:\n%s", script, l)
			}
		}
	})

	t.Run("BackgroundChildDoesNotHoldCall", func(t *testing.T) {
		t.Parallel()
		sb, _ := newSandbox(t, newFn, nil)
		m := uniq(t, "keel-bg")
		// Bug case 3a: the call ends when the shell exits, not when the
		// pipe closes (an hour from now); the child is then ended.
		res, out := run(t, sb, sandbox.Cmd{Args: bash(`(exec -a ` + m + ` sleep 3600) & echo started; exit 0`)})
		if res.ExitCode != 0 || res.TimedOut || out != "started\n" {
			t.Errorf("got %+v, %q; want exit 0 and %q", res, out, "started\n")
		}
		if l := leftovers(t, sb, m); l != "" {
			t.Errorf("background child outlived its call:\n%s", l)
		}
	})

	t.Run("NoOrphans", func(t *testing.T) {
		t.Parallel()
		sb, _ := newSandbox(t, newFn, nil)
		m := uniq(t, "keel-orphan")
		script := `setsid bash -c 'exec -a ` + m + `-setsid sleep 600' </dev/null >/dev/null 2>&1 &
( ( exec -a ` + m + `-double sleep 600 ) & ) &
nohup bash -c 'exec -a ` + m + `-nohup sleep 600' >/dev/null 2>&1 & disown
echo launched`
		res, out := run(t, sb, sandbox.Cmd{Args: bash(script)})
		if res.ExitCode != 0 || !strings.Contains(out, "launched") {
			t.Fatalf("got %+v, %q", res, out)
		}
		if l := leftovers(t, sb, m); l != "" {
			t.Errorf("processes outlived their call:\n%s", l)
		}
	})

	t.Run("IdleTimeout", func(t *testing.T) {
		t.Parallel()
		sb, _ := newSandbox(t, newFn, nil)
		res, out := run(t, sb, sandbox.Cmd{Args: bash("echo waiting; exec sleep 600"), IdleTimeout: 300 * time.Millisecond})
		if !res.Idle || res.TimedOut || out != "waiting\n" {
			t.Errorf("got %+v, %q; want Idle and the partial output", res, out)
		}
	})

	t.Run("OutputLimit", func(t *testing.T) {
		t.Parallel()
		sb, _ := newSandbox(t, newFn, nil)
		res, out := run(t, sb, sandbox.Cmd{Args: []string{"yes", "flood"}, Limits: &sandbox.Limits{OutputBytes: 10000}})
		if res.Limit != "output" || len(out) > 10000 || len(out) == 0 {
			t.Errorf("Limit %q with %d bytes of output, want \"output\" and 1..10000 bytes", res.Limit, len(out))
		}
	})

	t.Run("LargeOutputStreams", func(t *testing.T) {
		t.Parallel()
		sb, _ := newSandbox(t, newFn, nil)
		var n countWriter
		res, _ := run(t, sb, sandbox.Cmd{Args: bash("head -c 50000000 /dev/zero"), Stdout: &n})
		if res.ExitCode != 0 || n.n != 50000000 {
			t.Errorf("exit %d, %d bytes; want 0, 50000000", res.ExitCode, n.n)
		}
	})

	t.Run("ContextCancel", func(t *testing.T) {
		t.Parallel()
		sb, _ := newSandbox(t, newFn, nil)
		m := uniq(t, "keel-cancel")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		w := &triggerWriter{on: "ready", fire: cancel}
		res, err := sb.Exec(ctx, &sandbox.Cmd{Args: bash(`echo ready; exec -a ` + m + ` sleep 600`), Stdout: w, Limits: &sandbox.Limits{KillGrace: 500 * time.Millisecond}})
		if err != nil {
			t.Fatalf("Exec after cancel: %v", err)
		}
		if res.ExitCode == 0 || res.TimedOut {
			t.Errorf("canceled command: %+v, want a non-zero exit and no timeout", res)
		}
		if l := leftovers(t, sb, m); l != "" {
			t.Errorf("processes outlived the canceled call:\n%s", l)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		sb, _ := newSandbox(t, newFn, nil)
		var wg sync.WaitGroup
		errs := make([]string, 6)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var out syncBuffer
				res, err := sb.Exec(context.Background(), &sandbox.Cmd{Args: bash(fmt.Sprintf("echo call-%d; echo %d > f%d; cat f%d", i, i, i, i)), Stdout: &out})
				want := fmt.Sprintf("call-%d\n%d\n", i, i)
				if err != nil || res.ExitCode != 0 || out.String() != want {
					errs[i] = fmt.Sprintf("call %d: %v %+v %q, want %q", i, err, res, out.String(), want)
				}
			}()
		}
		wg.Wait()
		for _, e := range errs {
			if e != "" {
				t.Error(e)
			}
		}
	})

	t.Run("NonInteractive", func(t *testing.T) { testNonInteractive(t, newFn) })

	t.Run("Close", func(t *testing.T) {
		t.Parallel()
		sb, _ := newSandbox(t, newFn, nil)
		run(t, sb, sandbox.Cmd{Args: []string{"true"}})
		if err := sb.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
		if err := sb.Close(); err != nil {
			t.Errorf("second Close() = %v, want nil", err)
		}
		if res, err := sb.Exec(context.Background(), &sandbox.Cmd{Args: []string{"true"}}); err == nil {
			t.Errorf("Exec after Close = %+v, nil; want an error", res)
		}
	})
}

// testEnv checks that exactly the documented environment reaches a
// command: BaseEnv, then Spec.Env, then Cmd.Env (later entries win), and
// nothing of the host's (a canary set in this process must not appear).
// Backends may add variables whose names start with KEEL_.
func testEnv(t *testing.T, newFn NewFunc) {
	t.Setenv("KEEL_TEST_HOST_SECRET_CANARY", "do-not-leak-3141")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "do-not-leak-2718")
	t.Setenv("PAGER", "less")
	sb, _ := newSandbox(t, newFn, func(s *sandbox.Spec) {
		s.Env = []string{"SPEC_ONLY=spec", "OVERRIDE=spec", "PAGER=spec-pager"}
	})
	_, out := run(t, sb, sandbox.Cmd{Args: []string{"env"}, Env: []string{"OVERRIDE=cmd", "CMD_ONLY=cmd value"}})
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if ok {
			got[k] = v
		}
	}
	want := map[string]string{}
	for _, kv := range sandbox.BaseEnv("") {
		k, v, _ := strings.Cut(kv, "=")
		want[k] = v
	}
	want["SPEC_ONLY"], want["OVERRIDE"], want["PAGER"], want["CMD_ONLY"] = "spec", "cmd", "spec-pager", "cmd value"
	for k, v := range want {
		if k == "HOME" {
			continue
		}
		if got[k] != v {
			t.Errorf("env %s = %q, want %q", k, got[k], v)
		}
	}
	checkPrivateHome(t, sb, got["HOME"])
	var extra []string
	for k := range got {
		if _, ok := want[k]; !ok && k != "HOME" && !strings.HasPrefix(k, "KEEL_") {
			extra = append(extra, k)
		}
	}
	slices.Sort(extra)
	if len(extra) > 0 {
		t.Errorf("variables outside the allowlist reached the command: %v", extra)
	}
	if strings.Contains(out, "do-not-leak") {
		t.Errorf("a host secret reached the command's environment:\n%s", out)
	}
	// Unset withholds variables of the spec (a run's secrets from a
	// stdio MCP server), not the command's own.
	_, out = run(t, sb, sandbox.Cmd{Args: []string{"env"}, Env: []string{"CMD_ONLY=x"}, Unset: []string{"SPEC_ONLY", "OVERRIDE", "CMD_ONLY"}})
	if strings.Contains(out, "SPEC_ONLY=") || strings.Contains(out, "OVERRIDE=") || !strings.Contains(out, "CMD_ONLY=x") || !strings.Contains(out, "PAGER=spec-pager") {
		t.Errorf("env with Unset SPEC_ONLY, OVERRIDE, CMD_ONLY (the command's own):\n%s", out)
	}
}

// checkPrivateHome checks that HOME inside is set, writable, and not the
// host's home directory (same path is fine if its content is private).
func checkPrivateHome(t *testing.T, sb sandbox.Sandbox, home string) {
	t.Helper()
	if home == "" {
		t.Errorf("HOME is empty")
		return
	}
	probe := uniq(t, ".keel-home-probe")
	res, out := run(t, sb, sandbox.Cmd{Args: bash(`touch "$HOME/` + probe + `" && ls -A "$HOME"`)})
	if res.ExitCode != 0 {
		t.Errorf("HOME %s is not writable: %s", home, out)
	}
	hostHome := os.Getenv("HOME")
	if hostHome == "" || filepath.Clean(hostHome) != filepath.Clean(home) {
		return
	}
	if _, err := os.Stat(filepath.Join(hostHome, probe)); err == nil {
		os.Remove(filepath.Join(hostHome, probe))
		t.Errorf("HOME is the host's home directory %s: a file written there appeared on the host", hostHome)
	}
	entries, _ := os.ReadDir(hostHome)
	inside := strings.Fields(out)
	for _, e := range entries {
		if slices.Contains(inside, e.Name()) {
			t.Errorf("the host's home entry %s is visible in the sandbox's HOME", e.Name())
		}
	}
}

// testNonInteractive is bug case 1 (pager): git with a pager configured
// returns its output instead of waiting for a key.
func testNonInteractive(t *testing.T, newFn NewFunc) {
	t.Parallel()
	sb, spec := newSandbox(t, newFn, nil)
	if res, _ := run(t, sb, sandbox.Cmd{Args: bash("command -v git")}); res.ExitCode != 0 {
		t.Skip("SKIPPED: git is not installed in the sandbox; install it (apt-get install git) to check the pager case")
	}
	script := `git init -q r && cd r && git config user.email k@e && git config user.name k &&
for i in $(seq 1 60); do git commit -q --allow-empty -m "c$i"; done`
	if res, out := run(t, sb, sandbox.Cmd{Args: bash(script)}); res.ExitCode != 0 {
		t.Fatalf("setup repository: %+v\n%s", res, out)
	}
	for _, args := range [][]string{
		{"git", "log"},
		{"git", "-c", "core.pager=less", "log", "--oneline"},
		{"git", "-c", "core.pager=less -+F", "-p", "log", "--oneline"},
	} {
		res, out := run(t, sb, sandbox.Cmd{Args: args, Dir: "r", Env: []string{"PAGER=less", "GIT_PAGER=less"}, Timeout: time.Minute, IdleTimeout: 20 * time.Second})
		if res.TimedOut || res.Idle || res.ExitCode != 0 || !strings.Contains(out, "c60") {
			t.Errorf("%q: %+v, output %d bytes; want the log without waiting", args, res, len(out))
		}
	}
	_ = spec
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

// triggerWriter calls fire once the output contains on.
type triggerWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	on   string
	fire func()
	done bool
}

func (w *triggerWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.done && strings.Contains(w.buf.String(), w.on) {
		w.done = true
		w.fire()
	}
	return len(p), nil
}
