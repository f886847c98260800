//go:build linux

package linux_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin/shell"
)

// TestLimitWording runs commands into each limit through the bash tool
// over this backend and checks the header the model reads: "killed: ..."
// only when the limit ended the command, "... reached: ..." when the
// command went on (the reported fault: a command that exits 0 after a
// failed fork was shown as "exit code: 0 (killed: process limit)").
func TestLimitWording(t *testing.T) {
	t.Parallel()
	forks := `python3 - <<'PY'
import os, signal
pids = []
try:
    for i in range(64):
        pid = os.fork()
        if pid == 0:
            signal.pause()
            os._exit(0)
        pids.append(pid)
except OSError as e:
    print("fork failed:", e.strerror)
for p in pids:
    os.kill(p, signal.SIGKILL)
    os.waitpid(p, 0)
PY`
	for _, tt := range []struct {
		name    string
		limits  sandbox.Limits
		command string
		header  string
		isError bool
	}{
		{"fork fails, command exits 0", sandbox.Limits{Processes: 16}, forks,
			"exit code: 0 (process limit reached: some forks failed)", false},
		{"a child runs out of memory, the pipeline exits 0", sandbox.Limits{Memory: 64 << 20},
			`head -c 400000000 /dev/zero | tail -n1 | wc -c`,
			"exit code: 0 (memory limit reached: a process of the command was killed for lack of memory)", false},
		{"the command runs out of memory", sandbox.Limits{Memory: 64 << 20},
			`exec python3 -c 'x = bytearray(400 << 20); print(len(x))'`,
			"exit code: 137 (killed: memory limit)", true},
		{"output", sandbox.Limits{OutputBytes: 1000}, `yes`, "killed: output size limit", true},
		{"file size, the command itself", sandbox.Limits{FileSize: 1 << 20}, `exec yes > big.txt`,
			"exit code: 153 (killed: file size limit)", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sb := newSB(t, &sandbox.Spec{Limits: tt.limits}, nil)
			_, h := shell.New(nil)
			args, _ := json.Marshal(map[string]any{"command": tt.command, "timeout_ms": 60000})
			res, err := h(t.Context(), &tool.Request{RunID: "r", CallID: "c", Arguments: args, Env: &tool.Env{Sandbox: sb}})
			if err != nil {
				t.Fatal(err)
			}
			header, _, _ := strings.Cut(res.Content, "\n")
			if !strings.Contains(header, tt.header) || res.IsError != tt.isError {
				t.Errorf("header %q, is_error %v; want %q, %v\n%s", header, res.IsError, tt.header, tt.isError, res.Content)
			}
		})
	}
}
