//go:build unix

package none_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/none"
	"github.com/keel-run/keel/sandbox/sandboxtest"
	"github.com/keel-run/keel/tool/builtin/shell/shelltest"
)

func newSandbox(t *testing.T, spec *sandbox.Spec) sandbox.Sandbox {
	t.Helper()
	sb, err := none.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	return sb
}

// TestShellCases runs the shared shell cases (bug cases 1-5 and their
// relatives) through the bash tool on this backend.
func TestShellCases(t *testing.T) {
	shelltest.Run(t, newSandbox)
}

func exec(t *testing.T, sb sandbox.Sandbox, cmd *sandbox.Cmd) (*sandbox.Result, string) {
	t.Helper()
	var out bytes.Buffer
	if cmd.Stdout == nil {
		cmd.Stdout = &out
	}
	res, err := sb.Exec(t.Context(), cmd)
	if err != nil {
		t.Fatalf("Exec(%q) error: %v", cmd.Args, err)
	}
	return res, out.String()
}

func TestExec(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	sb := newSandbox(t, &sandbox.Spec{Workspace: dir, MountPath: "/work", Env: []string{"FOO=spec", "BAR=spec"}})
	ignore := cmpopts.IgnoreFields(sandbox.Result{}, "Duration")
	for _, tt := range []struct {
		name string
		cmd  sandbox.Cmd
		want sandbox.Result
		out  string
	}{
		{"exit code", sandbox.Cmd{Args: []string{"sh", "-c", "exit 7"}}, sandbox.Result{ExitCode: 7}, ""},
		{"cwd is the workspace", sandbox.Cmd{Args: []string{"pwd"}}, sandbox.Result{}, dir + "\n"},
		{"dir under the mount path", sandbox.Cmd{Args: []string{"pwd"}, Dir: "/work/sub"}, sandbox.Result{}, filepath.Join(dir, "sub") + "\n"},
		{"relative dir", sandbox.Cmd{Args: []string{"pwd"}, Dir: "sub"}, sandbox.Result{}, filepath.Join(dir, "sub") + "\n"},
		{"env layering", sandbox.Cmd{Args: []string{"sh", "-c", `echo "$FOO $BAR $PAGER"`}, Env: []string{"BAR=cmd", "PAGER=mine"}}, sandbox.Result{}, "spec cmd mine\n"},
		{"env unset", sandbox.Cmd{Args: []string{"sh", "-c", `echo "${FOO-none} $BAR"`}, Env: []string{"BAR=cmd"}, Unset: []string{"FOO", "BAR"}}, sandbox.Result{}, "none cmd\n"},
		{"stdin is /dev/null", sandbox.Cmd{Args: []string{"readlink", "/proc/self/fd/0"}}, sandbox.Result{}, "/dev/null\n"},
		{"own session", sandbox.Cmd{Args: []string{"sh", "-c", `ps -o sid= -p $$ | tr -d ' '; echo $$`}}, sandbox.Result{}, ""},
		{"not found", sandbox.Cmd{Args: []string{"no-such-program-xyz"}}, sandbox.Result{ExitCode: 127}, "keel: no-such-program-xyz: command not found\n"},
		{"not executable", sandbox.Cmd{Args: []string{"/etc/passwd"}}, sandbox.Result{ExitCode: 127}, "keel: /etc/passwd: command not found\n"},
		{"signal", sandbox.Cmd{Args: []string{"sh", "-c", "kill -TERM $$"}}, sandbox.Result{ExitCode: 143, Signal: "SIGTERM"}, ""},
		{"output limit", sandbox.Cmd{Args: []string{"yes"}, Limits: &sandbox.Limits{OutputBytes: 1000}}, sandbox.Result{ExitCode: 143, Signal: "SIGTERM", Limit: "output"}, strings.Repeat("y\n", 500)},
		{"file size limit", sandbox.Cmd{Args: []string{"sh", "-c", "sleep 0.1; head -c 100000 /dev/zero > big"}, Limits: &sandbox.Limits{FileSize: 1000}}, sandbox.Result{ExitCode: 153, Limit: "file_size"}, "File size limit exceeded\n"},
		{"cpu time limit", sandbox.Cmd{Args: []string{"sh", "-c", "while :; do :; done"}, Limits: &sandbox.Limits{CPUTime: time.Second}}, sandbox.Result{ExitCode: 152, Signal: "SIGXCPU", Limit: "cpu_time"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := tt.cmd
			res, out := exec(t, sb, &cmd)
			if tt.name == "own session" {
				f := strings.Fields(out)
				if len(f) != 2 || f[0] != f[1] {
					t.Errorf("session id and pid = %q, want equal (a session leader)", out)
				}
				return
			}
			if diff := cmp.Diff(&tt.want, res, ignore); diff != "" {
				t.Errorf("Exec(%q) result (-want +got):\n%s", tt.cmd.Args, diff)
			}
			if out != tt.out {
				t.Errorf("Exec(%q) output = %q, want %q", tt.cmd.Args, out, tt.out)
			}
		})
	}
}

// TestExecEnvExact checks that the environment is the base, the spec's and
// the command's entries, plus the marker, and nothing else.
func TestExecEnvExact(t *testing.T) {
	t.Setenv("KEEL_HOST_ONLY", "leak")
	sb, err := none.New(&sandbox.Spec{Workspace: t.TempDir(), Env: []string{"A=1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	_, out := exec(t, sb, &sandbox.Cmd{Args: []string{"env", "-0"}, Env: []string{"B=2", "A=3"}})
	var got []string
	for kv := range strings.SplitSeq(strings.TrimSuffix(out, "\x00"), "\x00") {
		if !strings.HasPrefix(kv, none.MarkerVar+"=") {
			got = append(got, kv)
		}
	}
	want := append(sandbox.BaseEnv(sb.Home()), "A=3", "B=2")
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("environment (-want +got):\n%s", diff)
	}
	if !strings.Contains(out, none.MarkerVar+"=") {
		t.Errorf("environment lacks %s", none.MarkerVar)
	}
}

func TestExecSeparateStderr(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, &sandbox.Spec{Workspace: t.TempDir()})
	var out, errb bytes.Buffer
	res, err := sb.Exec(t.Context(), &sandbox.Cmd{Args: []string{"sh", "-c", "echo o; echo e >&2"}, Stdout: &out, Stderr: &errb})
	if err != nil || res.ExitCode != 0 || out.String() != "o\n" || errb.String() != "e\n" {
		t.Errorf("Exec = %v, %v; stdout %q stderr %q", res, err, out.String(), errb.String())
	}
}

func TestExecWallTimeFromSpec(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, &sandbox.Spec{Workspace: t.TempDir(), Limits: sandbox.Limits{WallTime: time.Second, KillGrace: 100 * time.Millisecond}})
	res, out := exec(t, sb, &sandbox.Cmd{Args: []string{"sh", "-c", "echo partial; exec sleep 60"}})
	if !res.TimedOut || res.Signal != "SIGTERM" || out != "partial\n" {
		t.Errorf("Exec = %+v, %q; want timed out by SIGTERM with the partial output", res, out)
	}
}

// TestExecContextCancel ends a command when its context ends, with its
// tree.
func TestExecContextCancel(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, &sandbox.Spec{Workspace: t.TempDir()})
	ctx, cancel := context.WithCancel(t.Context())
	started := make(chan struct{})
	w := &notifyWriter{first: started}
	done := make(chan *sandbox.Result)
	go func() {
		res, _ := sb.Exec(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "echo up; sleep 600.4711 & wait"}, Stdout: w})
		done <- res
	}()
	<-started
	cancel()
	res := <-done
	if res == nil || res.Signal != "SIGTERM" || res.TimedOut {
		t.Errorf("Exec after cancel = %+v, want ended by SIGTERM, not a timeout", res)
	}
	if left := shelltest.Leftovers("600.4711"); len(left) > 0 {
		t.Errorf("left running: %v", left)
	}
}

type notifyWriter struct {
	once  sync.Once
	first chan struct{}
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.first) })
	return len(p), nil
}

// TestClose ends running commands and refuses new ones.
func TestClose(t *testing.T) {
	t.Parallel()
	sb, err := none.New(&sandbox.Spec{Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	done := make(chan *sandbox.Result)
	go func() {
		res, _ := sb.Exec(t.Context(), &sandbox.Cmd{Args: []string{"sh", "-c", "echo up; exec sleep 600.4712"}, Stdout: &notifyWriter{first: started}})
		done <- res
	}()
	<-started
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res == nil || res.Signal != "SIGKILL" {
		t.Errorf("running Exec after Close = %+v, want SIGKILL", res)
	}
	if _, err := os.Stat(sb.Home()); !os.IsNotExist(err) {
		t.Errorf("HOME %s still exists: %v", sb.Home(), err)
	}
	if _, err := sb.Exec(t.Context(), &sandbox.Cmd{Args: []string{"true"}}); !errors.Is(err, none.ErrClosed) {
		t.Errorf("Exec after Close = %v, want ErrClosed", err)
	}
	if err := sb.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o644)
	for _, spec := range []*sandbox.Spec{nil, {}, {Workspace: file}, {Workspace: "/no/such/dir"}, {Workspace: t.TempDir(), MountPath: "rel"}} {
		if sb, err := none.New(spec); err == nil {
			sb.Close()
			t.Errorf("New(%+v) succeeded, want an error", spec)
		}
	}
	sb := newSandbox(t, &sandbox.Spec{Workspace: t.TempDir()})
	if _, err := sb.Exec(t.Context(), &sandbox.Cmd{Args: []string{"true"}, Dir: "/no/such/dir"}); err == nil {
		t.Errorf("Exec in a missing directory succeeded")
	}
	if _, err := sb.Exec(t.Context(), &sandbox.Cmd{}); err == nil {
		t.Errorf("Exec of an empty command succeeded")
	}
}

// The stdin contract of every backend (sandboxtest.RunStdin).
func TestStdin(t *testing.T) {
	sandboxtest.RunStdin(t, newSandbox)
}
