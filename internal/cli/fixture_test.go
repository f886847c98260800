package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
)

// fcall is one tool call of a fixture trajectory.
type fcall struct {
	tool string
	args map[string]any
}

func sh(cmd string) fcall { return fcall{"bash", map[string]any{"command": cmd}} }

// writeTrajectory writes a mini-swe-agent trajectory whose k-th assistant
// turn makes the calls of turns[k] (an empty turn is a final answer with
// no call), and returns its path. Recorded tool outputs are placeholders:
// the replay model ignores them.
func writeTrajectory(t testing.TB, task string, turns ...[]fcall) string {
	t.Helper()
	msgs := []map[string]any{
		{"role": "system", "content": "You run commands for the test."},
		{"role": "user", "content": task},
	}
	for i, turn := range turns {
		if len(turn) == 0 {
			msgs = append(msgs, map[string]any{"role": "assistant", "content": "done"})
			continue
		}
		var tcs []map[string]any
		for j, c := range turn {
			args, _ := json.Marshal(c.args)
			tcs = append(tcs, map[string]any{"id": fmt.Sprintf("call_%d_%d", i, j), "type": "function",
				"function": map[string]any{"name": c.tool, "arguments": string(args)}})
		}
		msgs = append(msgs, map[string]any{"role": "assistant", "content": fmt.Sprintf("step %d", i+1), "tool_calls": tcs})
		for j := range turn {
			msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": fmt.Sprintf("call_%d_%d", i, j), "content": "recorded"})
		}
	}
	b, err := json.Marshal(map[string]any{"trajectory_format": "mini-swe-agent-1.1", "instance_id": "fixture", "messages": msgs,
		"info": map[string]any{"exit_status": "Submitted", "submission": ""}})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "fixture.traj.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// child starts this test binary as the keel command with args and extra
// environment, in the background.
func child(t testing.TB, env []string, args ...string) *exec.Cmd {
	t.Helper()
	b, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "KEEL_TEST_MAIN="+string(b)), env...)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("keel %v stderr:\n%s", args, stderr.String())
		}
	})
	return cmd
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader in
// different goroutines (a child's stderr, read when a test fails).
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// killedBySignal reports whether a finished child died of SIGKILL.
func killedBySignal(err error) bool {
	ee, ok := err.(*exec.ExitError)
	if !ok {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// openDB opens a journal file for the test's own checks.
func openDB(t *testing.T, db string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// onlyRun returns the id of the only run in db.
func onlyRun(t *testing.T, db string) string {
	t.Helper()
	s := openDB(t, db)
	runs, err := s.Runs(t.Context(), &journal.ListParams{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range runs {
		if r.RunID[0] != '_' {
			ids = append(ids, r.RunID)
		}
	}
	if len(ids) != 1 {
		t.Fatalf("runs in %s: %v", db, ids)
	}
	return ids[0]
}

// waitForType follows the only run of db until an event of type typ
// appears, and returns the run id and that event.
func waitForType(t *testing.T, db string, typ journal.Type) (string, journal.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for {
		if _, err := os.Stat(db); err == nil {
			s, err := sqlite.Open(db, nil)
			if err == nil {
				runs, _ := s.Runs(ctx, &journal.ListParams{})
				for _, r := range runs {
					if r.RunID[0] == '_' {
						continue
					}
					for e, err := range journal.Follow(ctx, s, r.RunID, 1, 5*time.Millisecond) {
						if err != nil {
							s.Close()
							t.Fatal(err)
						}
						if e.Type == typ {
							s.Close()
							return r.RunID, e
						}
						if st := journal.StatusOf(e.Type); st.Terminal() {
							s.Close()
							t.Fatalf("run ended (%s) before a %s event", e.Type, typ)
						}
					}
				}
				s.Close()
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("no %s event appeared", typ)
		}
		runtimeGosched()
	}
}

// loadRun reads, verifies and folds a run.
func loadRun(t *testing.T, db, id string) (*agent.State, []journal.Event) {
	t.Helper()
	s := openDB(t, db)
	st, evs, err := agent.NewRuntime(s, nil).Load(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return st, evs
}

// eachAtOnce is how many subtests runEach runs at a time. Its subtests
// spend most of their time waiting (for the sandbox, git, the servers
// they start, and on a loaded machine for a processor), so a few more
// than the processors keeps both busy.
const eachAtOnce = 4

// runEach runs fn(t, i) for i in [0, n) as subtests named name(i),
// eachAtOnce at a time, and returns when all have ended. Unlike
// t.Parallel, it is not bounded by -parallel (the processors: two on a
// small CI machine), and the subtests run while their parent waits, so
// it can read what they did. The subtests share the process: fn must
// not change the environment or the working directory (set them in the
// parent), and must give each subtest its own journal and workspace.
func runEach(t *testing.T, n int, name func(int) string, fn func(*testing.T, int)) {
	t.Helper()
	slots := make(chan struct{}, eachAtOnce)
	var wg sync.WaitGroup
	for i := range n {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			t.Run(name(i), func(t *testing.T) { fn(t, i) })
		}()
	}
	wg.Wait()
}
