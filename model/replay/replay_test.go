package replay_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/model/replay"
)

// The two recorded real trajectories in testdata/trajectories.
var trajectories = []struct {
	file  string
	turns int
	tools int
}{
	{file: "deepseek_chat_dev.traj.json", turns: 74, tools: 73},
	{file: "deepseek_chat_dev_rerun.traj.json", turns: 93, tools: 92},
}

func load(t *testing.T, file string) *replay.Trajectory {
	t.Helper()
	tr, err := replay.Load(filepath.Join("..", "..", "testdata", "trajectories", file))
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func bashTool() []model.ToolSpec {
	return []model.ToolSpec{{Name: "bash", Parameters: []byte(`{"type":"object","properties":{"command":{"type":"string"}}}`)}}
}

func TestLoadAccessors(t *testing.T) {
	t.Parallel()
	tr := load(t, "deepseek_chat_dev.traj.json")
	if got, want := tr.System(), "You are a helpful assistant that can interact with a computer shell to solve programming tasks."; got != want {
		t.Errorf("System() = %q, want %q", got, want)
	}
	if !strings.HasPrefix(tr.Task(), "<pr_description>\nConsider the following PR description:\n3.0: DateTime fields cannot be used") {
		t.Errorf("Task() = %.80q..., want the first user message", tr.Task())
	}
	if !strings.HasPrefix(tr.Submission(), "diff --git a/src/marshmallow/fields.py b/src/marshmallow/fields.py\n") ||
		!strings.Contains(tr.Submission(), "+            or (self.root and getattr(self.root.opts, self.SCHEMA_OPTS_VAR_NAME, None))") {
		t.Errorf("Submission() = %.120q..., want info.submission", tr.Submission())
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"Model", tr.Model(), "deepseek-chat"},
		{"ExitStatus", tr.ExitStatus(), "Submitted"},
		{"InstanceID", tr.InstanceID(), "marshmallow-code__marshmallow-1359"},
		{"Format", tr.Format(), "mini-swe-agent-1.1"},
		{"Len", tr.Len(), 74},
		{"len(ToolResults)", len(tr.ToolResults()), 73},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}

	first, ok := tr.Turn(0)
	if !ok {
		t.Fatal("Turn(0) missing")
	}
	wantFirst := replay.Turn{
		Index: 0,
		Message: model.Message{
			Role:      model.RoleAssistant,
			Content:   "I'll start by exploring the codebase to understand the structure and locate the relevant files. Let me first check the current directory and see what's available.",
			ToolCalls: []model.ToolCall{{ID: "call_00_uLLOQ9OtkX9YTwhKFBmlBLoe", Name: "bash", Arguments: `{"command": "pwd && ls -la"}`}},
		},
		Usage:      model.Usage{InputTokens: 1893, OutputTokens: 77, CachedInputTokens: 1856},
		ResponseID: "31c7128f-4c49-4f0d-ba0f-2244f59190fd",
		Model:      "deepseek-chat",
		StopReason: "tool_calls",
	}
	if diff := cmp.Diff(wantFirst, first, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Response" }, cmp.Ignore())); diff != "" {
		t.Errorf("Turn(0) (-want +got):\n%s", diff)
	}
	if !strings.Contains(string(first.Response), `"system_fingerprint": "fp_eaab8d114b_prod0820_fp8_kvcache_new_kvcache"`) {
		t.Errorf("Turn(0).Response is not the recorded extra.response: %.200s", first.Response)
	}
	if _, ok := tr.Turn(74); ok {
		t.Error("Turn(74) exists; the trajectory has 74 turns")
	}

	res, ok := tr.ToolResult("call_00_uLLOQ9OtkX9YTwhKFBmlBLoe")
	if !ok {
		t.Fatal("ToolResult(first call) missing")
	}
	if res.ExitCode != 0 || res.Turn != 0 || !strings.HasPrefix(res.RawOutput, "/testbed\ntotal 184\n") ||
		!strings.HasPrefix(res.Content, "<returncode>0</returncode>\n<output>\n/testbed\n") {
		t.Errorf("ToolResult(first call) = %+v", res)
	}
	failed := 0
	for _, r := range tr.ToolResults() {
		if r.ExitCode != 0 {
			failed++
			if !strings.HasPrefix(r.Content, "<returncode>1</returncode>") {
				t.Errorf("result %s: exit code %d but observation %.40q", r.CallID, r.ExitCode, r.Content)
			}
		}
	}
	if failed != 5 {
		t.Errorf("%d recorded results have a non-zero exit code, want 5", failed)
	}
	last, _ := tr.Turn(73)
	if _, ok := tr.ToolResult(last.Message.ToolCalls[0].ID); ok {
		t.Error("the submitting call has a recorded tool result; its output is the submission")
	}
}

// TestReplayWholeTrajectory walks each trajectory the way the runtime
// does: each answer and the recorded result of each call are appended to
// the history of the next request.
func TestReplayWholeTrajectory(t *testing.T) {
	t.Parallel()
	for _, tt := range trajectories {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			tr := load(t, tt.file)
			m := replay.New(tr, nil)
			req := &model.Request{System: tr.System(), Messages: []model.Message{{Role: model.RoleUser, Content: tr.Task()}}, Tools: bashTool()}
			for k := range tt.turns {
				resp, err := m.Generate(t.Context(), req)
				if err != nil {
					t.Fatalf("turn %d: %v", k+1, err)
				}
				want, _ := tr.Turn(k)
				if diff := cmp.Diff(want.Message, resp.Message); diff != "" {
					t.Fatalf("turn %d message (-want +got):\n%s", k+1, diff)
				}
				if resp.Usage != want.Usage || resp.ID != want.ResponseID || resp.Model != "deepseek-chat" || resp.StopReason != "tool_calls" {
					t.Fatalf("turn %d: response %+v does not carry the recorded usage, id, model and finish reason", k+1, resp)
				}
				req.Messages = append(req.Messages, resp.Message)
				for _, c := range resp.Message.ToolCalls {
					r, ok := tr.ToolResult(c.ID)
					if !ok && k != tt.turns-1 {
						t.Fatalf("turn %d: no recorded result for %s", k+1, c.ID)
					}
					req.Messages = append(req.Messages, model.Message{Role: model.RoleTool, ToolCallID: c.ID, Content: r.Content})
				}
			}
			_, err := m.Generate(t.Context(), req)
			var me *model.Error
			if !errors.As(err, &me) || me.Kind != model.KindExhausted {
				t.Fatalf("after the last turn: error %v, want kind exhausted", err)
			}
			want := "model replay: exhausted: trajectory has " + strconv.Itoa(tt.turns) + " assistant turns; request asks for turn " + strconv.Itoa(tt.turns+1)
			if err.Error() != want {
				t.Errorf("exhausted error = %q, want %q", err, want)
			}
		})
	}
}

func TestReplayMismatch(t *testing.T) {
	t.Parallel()
	tr := load(t, "deepseek_chat_dev.traj.json")
	first, _ := tr.Turn(0)
	wrongHistory := []model.Message{
		{Role: model.RoleUser, Content: tr.Task()},
		{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "call_other", Name: "bash", Arguments: "{}"}}},
		{Role: model.RoleTool, ToolCallID: "call_other", Content: "x"},
	}
	for _, tt := range []struct {
		name string
		opts *replay.Options
		req  *model.Request
		want string // "" means success
	}{
		{name: "tool not offered", req: &model.Request{Tools: []model.ToolSpec{{Name: "echo"}, {Name: "read"}}},
			want: `model replay: mismatch: recorded turn 1 calls tool "bash", which the request does not offer (offered: echo, read)`},
		{name: "no tools", req: &model.Request{},
			want: `model replay: mismatch: recorded turn 1 calls tool "bash", which the request does not offer (offered: none)`},
		{name: "tools ignored", opts: &replay.Options{IgnoreTools: true}, req: &model.Request{}},
		{name: "history differs", req: &model.Request{Messages: wrongHistory, Tools: bashTool()},
			want: "model replay: mismatch: request's assistant turn 1 has tool call ids [call_other] but the trajectory recorded [" + first.Message.ToolCalls[0].ID + "]"},
		{name: "history ignored", opts: &replay.Options{IgnoreHistory: true}, req: &model.Request{Messages: wrongHistory, Tools: bashTool()}},
		// The runtime's replacement of an unsafe or repeated id stands for
		// the recorded one at its position, not at another.
		{name: "replacement id", req: &model.Request{Messages: withID(wrongHistory, model.ReplacementCallID(1, 0)), Tools: bashTool()}},
		{name: "replacement id of another position", req: &model.Request{Messages: withID(wrongHistory, model.ReplacementCallID(1, 1)), Tools: bashTool()},
			want: "model replay: mismatch: request's assistant turn 1 has tool call ids [call_keel_1_1] but the trajectory recorded [" + first.Message.ToolCalls[0].ID + "]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := replay.New(tr, tt.opts).Generate(t.Context(), tt.req)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Generate error = %v, want success", err)
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Errorf("Generate error = %v, want %q", err, tt.want)
			case tt.want != "" && model.KindOf(err) != model.KindMismatch:
				t.Errorf("Generate error kind = %s, want mismatch", model.KindOf(err))
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tt := range []struct {
		name, data, want string
	}{
		{"not json", `{"messages": [`, "bad JSON"},
		{"no messages", `{"info": {}}`, "no messages list"},
		{"unknown role", `{"messages": [{"role": "robot", "content": "x"}]}`, `message 0: unknown role "robot"`},
		{"call without id", `{"messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "bash", "arguments": "{}"}}]}]}`, "message 0: tool call 0 has no id"},
		{"tool without call id", `{"messages": [{"role": "tool", "content": "x"}]}`, "message 0: tool message without tool_call_id"},
		{"bad content", `{"messages": [{"role": "user", "content": 7}]}`, "message 0: content is neither a string nor a list of parts"},
		{"bad response", `{"messages": [{"role": "assistant", "content": "", "extra": {"response": [1]}}]}`, "message 0: extra.response"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_")+".json")
			if err := os.WriteFile(path, []byte(tt.data), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := replay.Load(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("Load error = %v, want one naming %s and containing %q", err, path, tt.want)
			}
		})
	}
	if _, err := replay.Load(filepath.Join(dir, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) error = %v, want os.ErrNotExist", err)
	}
}

func TestParseContentParts(t *testing.T) {
	t.Parallel()
	tr, err := replay.Parse([]byte(`{"messages": [
		{"role": "system", "content": [{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}]},
		{"role": "user", "content": "task"},
		{"role": "assistant", "content": null, "tool_calls": [{"id": "a", "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
		 "extra": {"response": {"id": "r1", "model": "m", "choices": [{"finish_reason": "tool_calls"}],
		   "usage": {"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": null, "prompt_cache_hit_tokens": 8}}}},
		{"role": "tool", "tool_call_id": "a", "content": "out"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if tr.System() != "be brief" || tr.Task() != "task" {
		t.Errorf("System, Task = %q, %q", tr.System(), tr.Task())
	}
	turn, _ := tr.Turn(0)
	if want := (model.Usage{InputTokens: 10, OutputTokens: 2, CachedInputTokens: 8}); turn.Usage != want {
		t.Errorf("usage = %+v, want %+v (prompt_cache_hit_tokens when cached_tokens is absent)", turn.Usage, want)
	}
	if r, _ := tr.ToolResult("a"); r.ExitCode != -1 || r.Turn != 0 {
		t.Errorf("ToolResult(a) = %+v, want ExitCode -1 (not recorded), Turn 0", r)
	}
}

func TestReplayConformance(t *testing.T) {
	t.Parallel()
	tr := load(t, "deepseek_chat_dev_rerun.traj.json")
	modeltest.Run(t, func(t *testing.T) model.Model { return replay.New(tr, nil) })
}

func TestReplayErrorConformance(t *testing.T) {
	t.Parallel()
	empty, err := replay.Parse([]byte(`{"messages": []}`))
	if err != nil {
		t.Fatal(err)
	}
	modeltest.RunErrors(t, func(t *testing.T, kind model.ErrorKind) model.Model {
		switch kind {
		case model.KindExhausted:
			return replay.New(empty, nil)
		case model.KindMismatch:
			// The conformance tools are bash and echo; a trajectory
			// calling another tool mismatches.
			other, err := replay.Parse([]byte(`{"messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "a", "function": {"name": "python", "arguments": "{}"}}]}]}`))
			if err != nil {
				t.Fatal(err)
			}
			return replay.New(other, nil)
		}
		return nil
	})
}

func TestName(t *testing.T) {
	t.Parallel()
	tr := load(t, "deepseek_chat_dev.traj.json")
	want := "replay:" + filepath.Join("..", "..", "testdata", "trajectories", "deepseek_chat_dev.traj.json")
	if got := replay.New(tr, nil).Name(); got != want {
		t.Errorf("Name() = %q, want %q", got, want)
	}
}

// withID returns msgs with the id of its one tool call replaced by id.
func withID(msgs []model.Message, id string) []model.Message {
	out := slices.Clone(msgs)
	out[1].ToolCalls = []model.ToolCall{{ID: id, Name: "bash", Arguments: "{}"}}
	out[2].ToolCallID = id
	return out
}

func TestIsReplacementCallID(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		id   string
		i    int
		want bool
	}{
		{model.ReplacementCallID(3, 0), 0, true},
		{model.ReplacementCallID(12, 2), 2, true},
		{model.ReplacementCallID(12, 2), 1, false},
		{"call_keel_0_0", 0, false},
		{"call_keel_01_0", 0, false},
		{"call_keel_x_0", 0, false},
		{"call_keel_1", 0, false},
		{"call_00_abc", 0, false},
	} {
		if got := model.IsReplacementCallID(tt.id, tt.i); got != tt.want {
			t.Errorf("IsReplacementCallID(%q, %d) = %v, want %v", tt.id, tt.i, got, tt.want)
		}
	}
}
