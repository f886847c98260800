package replay_test

import (
	"context"
	"regexp"
	"sync/atomic"
	"testing"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/replay"
)

// liveTrajectory has three turns: ls, cat, submit.
const liveTrajectory = `{"trajectory_format": "mini-swe-agent-1.1", "messages": [
 {"role": "system", "content": "sys"},
 {"role": "user", "content": "task"},
 {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}],
  "extra": {"response": {"id": "r1", "model": "recorded-model", "usage": {"prompt_tokens": 10, "completion_tokens": 1}}}},
 {"role": "tool", "tool_call_id": "c1", "content": "<returncode>0</returncode><output>README</output>", "extra": {"returncode": 0, "raw_output": "README\n"}},
 {"role": "assistant", "content": "", "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"pytest\"}"}}],
  "extra": {"response": {"id": "r2", "model": "recorded-model", "usage": {"prompt_tokens": 20, "completion_tokens": 1}}}},
 {"role": "tool", "tool_call_id": "c2", "content": "exit code: 0\n1 passed in 0.12s", "extra": {"returncode": 0, "raw_output": "1 passed in 0.12s"}},
 {"role": "assistant", "content": "done", "extra": {"response": {"id": "r3", "model": "recorded-model"}}},
 {"role": "exit", "content": ""}]}`

// fakeLive answers every request with a text naming itself and counts
// the requests.
type fakeLive struct{ n atomic.Int32 }

func (f *fakeLive) Generate(context.Context, *model.Request) (*model.Response, error) {
	f.n.Add(1)
	return &model.Response{Message: model.Message{Role: model.RoleAssistant, Content: "live answer"}, Model: "live-model"}, nil
}

func (f *fakeLive) Name() string { return "openai:live-model" }

func TestThenLive(t *testing.T) {
	t.Parallel()
	tr, err := replay.Parse([]byte(liveTrajectory))
	if err != nil {
		t.Fatal(err)
	}
	vol := []*regexp.Regexp{regexp.MustCompile(`\d+\.\d+s`)}
	call := func(id, cmd string) model.Message {
		return model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: id, Name: "bash", Arguments: `{"command": "` + cmd + `"}`}}}
	}
	result := func(id, content string) model.Message {
		return model.Message{Role: model.RoleTool, ToolCallID: id, Content: content}
	}
	task := model.Message{Role: model.RoleUser, Content: "task"}
	for _, tc := range []struct {
		name      string
		msgs      []model.Message
		summary   bool
		wantModel string // who answers
		diverged  bool
	}{
		{"first turn", []model.Message{task}, false, "recorded-model", false},
		{"same output, Keel's form", []model.Message{task, call("c1", "ls"), result("c1", "exit code: 0\nREADME")}, false, "recorded-model", false},
		{"the recorded observation itself, a duration masked", []model.Message{task, call("c1", "ls"), result("c1", "exit code: 0\nREADME"), call("c2", "pytest"), result("c2", "exit code: 0\n1 passed in 0.31s")}, false, "recorded-model", false},
		{"other output", []model.Message{task, call("c1", "ls"), result("c1", "exit code: 0\nREADME\nsetup.py")}, false, "live-model", true},
		{"other exit code", []model.Message{task, call("c1", "ls"), result("c1", "exit code: 2\nREADME")}, false, "live-model", true},
		{"a call the recording does not have", []model.Message{task, call("x9", "ls"), result("x9", "exit code: 0\nREADME")}, false, "live-model", true},
		{"recording exhausted", []model.Message{task, call("c1", "ls"), result("c1", "exit code: 0\nREADME"), call("c2", "pytest"), result("c2", "exit code: 0\n1 passed in 0.1s"), {Role: model.RoleAssistant, Content: "done"}, {Role: model.RoleUser, Content: "more"}}, false, "live-model", false},
		{"a summary", []model.Message{task}, true, "live-model", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			live := &fakeLive{}
			m := replay.ThenLive(tr, live, &replay.LiveOptions{Volatile: vol})
			req := &model.Request{Messages: tc.msgs, Tools: bashTool()}
			if tc.summary {
				req.Purpose = model.PurposeSummary
			}
			if got := m.Diverged(req) != ""; got != tc.diverged {
				t.Errorf("Diverged = %q, want diverged %v", m.Diverged(req), tc.diverged)
			}
			resp, err := m.Generate(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Model != tc.wantModel {
				t.Errorf("answered by %q, want %q", resp.Model, tc.wantModel)
			}
			price := m.Price(func(model.Usage) float64 { return 1 }, func(model.Usage) float64 { return 2 })
			if got, want := price(model.Usage{}), map[bool]float64{true: 2, false: 1}[tc.wantModel == "live-model"]; got != want {
				t.Errorf("priced at %v, want %v (1: the recorded model's prices, 2: the live one's)", got, want)
			}
			if want := int32(0); tc.wantModel == "live-model" {
				if live.n.Load() != 1 {
					t.Errorf("live model asked %d times, want 1", live.n.Load())
				}
			} else if live.n.Load() != want {
				t.Errorf("live model asked %d times, want 0", live.n.Load())
			}
		})
	}
	if got, want := replay.ThenLive(tr, &fakeLive{}, nil).Name(), "replay: then openai:live-model"; got != want {
		t.Errorf("Name = %q, want %q", got, want)
	}
}

func TestSameResult(t *testing.T) {
	t.Parallel()
	long := ""
	for i := range 2000 {
		long += string(rune('a' + i%26))
	}
	view := long[:600] + "\n[… 800 characters omitted …]\n" + long[len(long)-600:]
	for _, tc := range []struct {
		name    string
		content string
		r       replay.ToolResult
		want    bool
	}{
		{"Keel's own observation", "exit code: 1\nboom", replay.ToolResult{Content: "exit code: 1\nboom", ExitCode: 1}, true},
		{"raw output", "exit code: 0\nok\n", replay.ToolResult{Content: "<returncode>0</returncode>", ExitCode: 0, RawOutput: "ok"}, true},
		{"no output", "exit code: 0\n(no output)", replay.ToolResult{ExitCode: 0}, true},
		{"no exit code recorded", "exit code: 3\nok", replay.ToolResult{ExitCode: -1, RawOutput: "ok"}, true},
		{"exit code differs", "exit code: 3\nok", replay.ToolResult{ExitCode: 0, RawOutput: "ok"}, false},
		{"output differs", "exit code: 0\nok", replay.ToolResult{ExitCode: 0, RawOutput: "ko"}, false},
		{"a long output shown in part", "exit code: 0\n" + view, replay.ToolResult{ExitCode: 0, RawOutput: long}, true},
		{"a long output, another tail", "exit code: 0\n" + view + "x", replay.ToolResult{ExitCode: 0, RawOutput: long}, false},
		{"another tool's output", "file written", replay.ToolResult{ExitCode: -1, RawOutput: "file written"}, true},
		{"another tool's other output", "file not written", replay.ToolResult{ExitCode: -1, RawOutput: "file written"}, false},
	} {
		if got := replay.SameResult(tc.content, tc.r, nil); got != tc.want {
			t.Errorf("%s: SameResult = %v, want %v", tc.name, got, tc.want)
		}
	}
}
