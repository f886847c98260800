//go:build linux

package limitexec_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/keel-run/keel/sandbox/linux/limitexec"
)

func TestEncodeDecode(t *testing.T) {
	lims := []limitexec.Limit{{Resource: 7, Cur: 64, Max: 64}, {Resource: 9, Cur: 1<<64 - 1, Max: 0}, {Resource: 2, Cur: 1 << 30, Max: 1 << 31}}
	s := limitexec.Encode(lims)
	if s != "7:64:64,9:18446744073709551615:0,2:1073741824:2147483648" {
		t.Errorf("Encode = %q", s)
	}
	got, ok := limitexec.Decode(s)
	if !ok || !cmp.Equal(got, lims) {
		t.Errorf("Decode(Encode) = %v %v, want %v", got, ok, lims)
	}
	if got, ok := limitexec.Decode(""); !ok || len(got) != 0 {
		t.Errorf(`Decode("") = %v %v, want no limits`, got, ok)
	}
	for _, bad := range []string{"7", "7:1", "7:1:", "7:1:2,", "7:1:2;8:1:2", "a:1:2", "7:-1:2", "65:1:2", "7:18446744073709551616:1", " 7:1:2", "7:1:2,,8:1:2"} {
		if got, ok := limitexec.Decode(bad); ok {
			t.Errorf("Decode(%q) = %v, want refused", bad, got)
		}
	}
}

// trampoline runs this test binary as the trampoline for argv with the
// limits env and returns its exit code, stdout and stderr.
func trampoline(t *testing.T, env string, path string, argv ...string) (code int, stdout, stderr string, pid int) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Args = limitexec.Args(path, argv)
	cmd.Env = append(os.Environ(), limitexec.Env+"="+env)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String(), cmd.Process.Pid
}

// The trampoline applies every limit, soft and hard, and executes the
// command in its own place with its environment minus the variable;
// what it cannot do, it refuses without running the command.
func TestTrampoline(t *testing.T) {
	sh := "/bin/sh"
	if _, err := os.Stat(sh); err != nil {
		t.Skip("no /bin/sh")
	}
	script := `ulimit -Sn; ulimit -Hn; ulimit -d; ulimit -f; echo ${KEEL_SANDBOX_RLIMITS-unset}`
	dir := t.TempDir()
	plain, noShebang := dir+"/plain", dir+"/noshebang"
	if err := os.WriteFile(plain, []byte("#!/bin/sh\necho ran\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(noShebang, []byte("\x7fELF-not-really"), 0o755); err != nil {
		t.Fatal(err)
	}
	nofile, data, fsize := syscall.RLIMIT_NOFILE, syscall.RLIMIT_DATA, syscall.RLIMIT_FSIZE
	env := limitexec.Encode([]limitexec.Limit{{Resource: nofile, Cur: 64, Max: 64}, {Resource: data, Cur: 1 << 30, Max: 1 << 30}, {Resource: fsize, Cur: 1 << 20, Max: 1 << 20}})
	for _, tt := range []struct {
		name, env, path string
		argv            []string
		code            int
		out, errOut     string
	}{
		{"applies the limits", env, sh, []string{"sh", "-c", script}, 0, "64\n64\n1048576\n2048\nunset\n", ""},
		{"no limits", "", sh, []string{"sh", "-c", "echo ok"}, 0, "ok\n", ""},
		{"malformed limits", "7:64", sh, []string{"sh", "-c", "echo ran"}, 126, "", "keel: malformed KEEL_SANDBOX_RLIMITS\n"},
		{"a limit it cannot apply", "64:1:1", sh, []string{"sh", "-c", "echo ran"}, 126, "", "keel: cannot apply its resource limits: invalid argument\n"},
		{"no such command", "", "/nonexistent/cmd", []string{"cmd"}, 127, "", "keel: cmd: command not found\n"},
		{"not executable", "", plain, []string{"plain"}, 126, "", "keel: plain: permission denied\n"},
		{"not a program", "", noShebang, []string{"noshebang"}, 126, "", "keel: noshebang: exec format error\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut, _ := trampoline(t, tt.env, tt.path, tt.argv...)
			if code != tt.code || out != tt.out || errOut != tt.errOut {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q, %q", code, out, errOut, tt.code, tt.out, tt.errOut)
			}
		})
	}
}

// The command runs in the trampoline's own process: the pid the spawner
// knows and waits for is the command's.
func TestTrampolineKeepsItsProcess(t *testing.T) {
	_, out, _, pid := trampoline(t, "7:64:64", "/bin/sh", "sh", "-c", "echo $$")
	if out != strconv.Itoa(pid)+"\n" {
		t.Errorf("the command's pid %q, the trampoline's %d", out, pid)
	}
}
