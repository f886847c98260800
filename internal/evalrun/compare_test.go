package evalrun

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/replay"
	"github.com/keel-run/keel/tool"
)

// A replayed run's results compared with the recording's: same, other
// exit code, other output, not finished, and a call the recording has no
// result for.
func TestCompare(t *testing.T) {
	rc := func(n int) *int { return &n }
	toolMsg := func(id string, code int, out string) map[string]any {
		return map[string]any{"role": "tool", "tool_call_id": id, "content": "<returncode>" + string(rune('0'+code)) + "</returncode>",
			"extra": map[string]any{"returncode": code, "raw_output": out}}
	}
	msgs := []map[string]any{
		{"role": "system", "content": "s"}, {"role": "user", "content": "task"},
		{"role": "assistant", "content": "step", "tool_calls": []map[string]any{
			{"id": "same", "type": "function", "function": map[string]any{"name": "bash", "arguments": `{"command":"echo a"}`}},
			{"id": "code", "type": "function", "function": map[string]any{"name": "bash", "arguments": `{"command":"false"}`}},
			{"id": "out", "type": "function", "function": map[string]any{"name": "bash", "arguments": `{"command":"date"}`}},
			{"id": "open", "type": "function", "function": map[string]any{"name": "bash", "arguments": `{"command":"sleep 9"}`}},
		}},
		toolMsg("same", 0, "a\n"), toolMsg("code", 0, ""), toolMsg("out", 0, "Mon\n"), toolMsg("open", 0, ""),
	}
	b, _ := json.Marshal(map[string]any{"trajectory_format": "mini-swe-agent-1.1", "instance_id": "x", "messages": msgs,
		"info": map[string]any{"exit_status": "Submitted", "submission": "patch\n"}})
	path := filepath.Join(t.TempDir(), "x.traj.json")
	os.WriteFile(path, b, 0o644)
	tr, err := replay.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	call := func(id string, code *int, out string) *agent.Call {
		c := &agent.Call{ToolCall: model.ToolCall{ID: id, Name: "bash", Arguments: `{"command":"x"}`}}
		if code != nil {
			c.Finished = &agent.ToolFinished{CallID: id, Result: toolResult(*code, out)}
		}
		return c
	}
	st := &agent.State{Created: &agent.RunCreated{}, Ended: &agent.RunEnded{Output: "patch"}, Turns: []*agent.Turn{{Calls: []*agent.Call{
		call("same", rc(0), "a\n"), call("code", rc(1), ""), call("out", rc(0), "Tue\n"), call("open", nil, ""), call("submit", rc(0), ""),
	}}}}
	c := Compare(st, tr)
	if c.Total != 4 || c.Unrecorded != 1 || c.SameCode != 2 || c.SameOutput != 2 || c.Both != 1 || len(c.Differing) != 2 {
		t.Errorf("comparison %+v", c)
	}
	var w bytes.Buffer
	c.Report(&w, true)
	for _, want := range []string{
		"code bash",
		"exit: recorded 0, got 1",
		`output: recorded 4 bytes "Mon\n"`,
		"4 recorded tool calls compared: 2 same exit code, 2 same output, 1 same both (1 calls without a recorded result",
		"final output equals the recorded submission: true",
	} {
		if !strings.Contains(w.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, w.String())
		}
	}
	w.Reset()
	c.Report(&w, false)
	if strings.Contains(w.String(), "exit: recorded") {
		t.Errorf("report without verbose shows calls:\n%s", w.String())
	}
}

// toolResult is a shell result as the shell tool gives it.
func toolResult(code int, out string) tool.Result {
	content := "exit code: " + string(rune('0'+code)) + "\n" + out
	return tool.Result{Content: content, ExitCode: &code, OutputBytes: int64(len(out))}
}
