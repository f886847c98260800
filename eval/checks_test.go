package eval

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"
)

// hostShell runs a check's script with bash in the workspace, as the
// sandbox would (the sandbox is not what these tests are about).
func hostShell(ws string) Shell {
	return func(ctx context.Context, script string, timeout time.Duration) (int, string, error) {
		cmd := exec.CommandContext(ctx, "bash", "-c", script)
		cmd.Dir = ws
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), out.String(), nil
		}
		return 0, out.String(), err
	}
}

// harborCase is a Harbor task whose verifier fails before it writes its
// reward (set -e), as many do.
func harborCase(t *testing.T) *Case {
	t.Helper()
	s, err := Load(fstest.MapFS{
		"s/task/task.toml":      {Data: []byte("[verifier]\ntimeout_sec = 60.0\n")},
		"s/task/instruction.md": {Data: []byte("Write hello.txt containing hello.\n")},
		"s/task/tests/test.sh":  {Data: []byte("#!/bin/bash\nset -e\ngrep -q hello /app/hello.txt\necho 1 > /logs/verifier/reward.txt\n")},
		"s/task/environment/x":  {Data: []byte("x\n")},
	}, "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	return s.Cases[0]
}

// The agent's workspace is the agent's: what it left in .keel-eval/
// neither decides a check's verdict nor leads the files Keel writes
// there out of the workspace.
func TestChecksIgnoreWhatTheAgentLeftInKeelEval(t *testing.T) {
	c := harborCase(t)

	t.Run("a reward written in advance", func(t *testing.T) {
		ws := t.TempDir()
		if err := os.MkdirAll(filepath.Join(ws, ".keel-eval/logs/verifier"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, ".keel-eval/logs/verifier/reward.txt"), []byte("1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		res, err := RunChecks(t.Context(), c, ws, hostShell(ws))
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 1 || res[0].Passed {
			t.Errorf("checks = %+v: the agent's own reward.txt passed a task it did not do", res)
		}
	})

	t.Run("a link out of the workspace", func(t *testing.T) {
		for _, link := range []string{".keel-eval", ".keel-eval/test.sh"} {
			ws, outside := t.TempDir(), t.TempDir()
			target := outside
			if link == ".keel-eval/test.sh" {
				if err := os.Mkdir(filepath.Join(ws, ".keel-eval"), 0o755); err != nil {
					t.Fatal(err)
				}
				target = filepath.Join(outside, "victim")
				if err := os.WriteFile(target, []byte("the person's file\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink(target, filepath.Join(ws, link)); err != nil {
				t.Fatal(err)
			}
			if _, err := RunChecks(t.Context(), c, ws, hostShell(ws)); err != nil {
				t.Logf("%s: %v", link, err)
			}
			entries, _ := os.ReadDir(outside)
			for _, e := range entries {
				b, _ := os.ReadFile(filepath.Join(outside, e.Name()))
				if e.Name() != "victim" || string(b) != "the person's file\n" {
					t.Errorf("%s: Keel wrote %s outside the workspace: %q", link, e.Name(), b)
				}
			}
		}
	})
}
