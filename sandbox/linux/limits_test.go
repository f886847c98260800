//go:build linux

package linux_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/linux"
	"github.com/keel-run/keel/sandbox/linux/limitexec"
)

// A command's resource limits hold from its first instruction, not from
// a prlimit after it started (under load, bash opened 64 files before
// an open-file limit of 32 arrived): the command here is cat itself,
// reading its own limits as it starts. Soft limits the init can take on
// for the instant of the fork come from the fork, with the hard ones
// after; the others come from the trampoline, soft and hard, before the
// command runs.
func TestLimitsHoldFromTheFirstInstruction(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts *linux.Options
		lim  sandbox.Limits
		// want maps a row of /proc/self/limits to its soft and, if
		// not empty, hard limit.
		want map[string][2]string
	}{
		{"open files at the fork", nil, sandbox.Limits{OpenFiles: 4096, FileSize: 1 << 20},
			map[string][2]string{"Max open files": {"4096"}, "Max file size": {"1048576"}}},
		{"small open files by the trampoline", nil, sandbox.Limits{OpenFiles: 32, FileSize: 1 << 20, CPUTime: time.Minute},
			map[string][2]string{"Max open files": {"32", "32"}, "Max file size": {"1048576", "1048576"}, "Max cpu time": {"60", "61"}}},
		{"memory and processes without cgroups", &linux.Options{NoCgroups: true}, sandbox.Limits{Memory: 64 << 20, Processes: 64, OpenFiles: 4096},
			map[string][2]string{"Max data size": {"67108864", "67108864"}, "Max processes": {"96", "96"}, "Max open files": {"4096", "4096"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sb := newSB(t, &sandbox.Spec{}, tt.opts)
			var out bytes.Buffer
			lim := tt.lim
			res, err := sb.Exec(context.Background(), &sandbox.Cmd{Args: []string{"cat", "/proc/self/limits"}, Stdout: &out, Limits: &lim, Timeout: time.Minute})
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("Exec: %v %+v %s", err, res, out.String())
			}
			rows := map[string][]string{}
			for line := range strings.Lines(out.String()) {
				if len(line) > 26 {
					rows[strings.TrimSpace(line[:26])] = strings.Fields(line[26:])
				}
			}
			for row, want := range tt.want {
				got := rows[row]
				if len(got) < 2 || got[0] != want[0] || (want[1] != "" && got[1] != want[1]) {
					t.Errorf("%s = %q at the command's start, want soft %s hard %q\n%s", row, got, want[0], want[1], out.String())
				}
			}
		})
	}
}

// The trampoline's variable is Keel's alone: a command's own value of it
// neither weakens its limits nor reaches it.
func TestLimitsVariableIsNotTheCommands(t *testing.T) {
	sb := newSB(t, &sandbox.Spec{}, nil)
	for _, n := range []int{32, 4096} {
		res, out := sh(t, sb, `ulimit -Sn; env | grep -c KEEL_SANDBOX || true`, func(c *sandbox.Cmd) {
			c.Env = []string{limitexec.Env + "=", limitexec.Env + "=7:100000:100000"}
			c.Limits = &sandbox.Limits{OpenFiles: n}
		})
		if want := fmt.Sprintf("%d\n0\n", n); res.ExitCode != 0 || out != want {
			t.Errorf("got %+v %q, want %q: the limit and no %s", res, out, want, limitexec.Env)
		}
	}
}
