package codeact_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/codeact"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		name string
		text string
		want []model.ToolCall
	}{
		{"bash and python in order", "Let me look.\n```bash\nls -la\n```\nThen:\n```python\nx = 1\nprint(x)\n```\n",
			[]model.ToolCall{{Name: "bash", Arguments: `{"command":"ls -la"}`}, {Name: "python", Arguments: `{"code":"x = 1\nprint(x)"}`}}},
		{"aliases and info strings", "```sh title=x\necho a\n```\n```py\n1\n```\n~~~shell\necho b\n~~~\n",
			[]model.ToolCall{{Name: "bash", Arguments: `{"command":"echo a"}`}, {Name: "python", Arguments: `{"code":"1"}`}, {Name: "bash", Arguments: `{"command":"echo b"}`}}},
		{"other languages are not actions", "```diff\n-a\n+b\n```\n```\nplain\n```\n", nil},
		{"no blocks", "I am done.", nil},
		{"unterminated block", "```bash\nrm -rf build\n", nil},
		{"longer fence holds a shorter one", "````bash\ncat <<'EOF'\n```\nEOF\n````\n",
			[]model.ToolCall{{Name: "bash", Arguments: `{"command":"cat \u003c\u003c'EOF'\n` + "```" + `\nEOF"}`}}},
		{"empty block", "```bash\n\n```\n", nil},
		{"indented four spaces is code, not a fence", "    ```bash\n    ls\n    ```\n", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := codeact.Parse(tt.text, codeact.DefaultActions)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

// fake records the request and answers with reply.
type fake struct {
	req   *model.Request
	reply string
	stop  string // "" means "stop"
}

func (f *fake) Generate(_ context.Context, req *model.Request) (*model.Response, error) {
	f.req = req
	stop := f.stop
	if stop == "" {
		stop = "stop"
	}
	return &model.Response{Message: model.Message{Role: model.RoleAssistant, Content: f.reply}, StopReason: stop}, nil
}

func TestModel(t *testing.T) {
	f := &fake{reply: "Running it.\n```bash\nmake test\n```"}
	m := codeact.New(f, nil)
	req := &model.Request{
		System: "sys",
		Tools:  []model.ToolSpec{{Name: "bash"}, {Name: "read_file"}},
		Messages: []model.Message{
			{Role: model.RoleUser, Content: "task"},
			{Role: model.RoleAssistant, Content: "```bash\nls\n```\n```bash\npwd\n```", ToolCalls: []model.ToolCall{{ID: "a", Name: "bash"}, {ID: "b", Name: "bash"}}},
			{Role: model.RoleTool, ToolCallID: "a", Content: "exit code: 0\nfile"},
			{Role: model.RoleTool, ToolCallID: "b", Content: "exit code: 1\nno", IsError: true},
			{Role: model.RoleUser, Content: "keep going"},
		},
	}
	resp, err := m.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if f.req.Tools != nil {
		t.Errorf("tools sent to a model without function calling: %v", f.req.Tools)
	}
	if !strings.Contains(f.req.System, "```bash block") || strings.Contains(f.req.System, "```python block") {
		t.Errorf("system prompt should describe bash only (python is not offered):\n%s", f.req.System)
	}
	want := []model.Message{
		{Role: model.RoleUser, Content: "task"},
		{Role: model.RoleAssistant, Content: "```bash\nls\n```\n```bash\npwd\n```"},
		{Role: model.RoleUser, Content: "Result of action 1 (bash):\nexit code: 0\nfile\n\nResult of action 2 (bash, failed):\nexit code: 1\nno\n\nkeep going"},
	}
	if diff := cmp.Diff(want, f.req.Messages); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]model.ToolCall{{Name: "bash", Arguments: `{"command":"make test"}`}}, resp.Message.ToolCalls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if resp.StopReason != "tool_calls" {
		t.Errorf("stop reason %q", resp.StopReason)
	}
	// A python block is not an action when python is not offered.
	f.reply = "```python\n1\n```"
	if resp, _ := m.Generate(context.Background(), req); len(resp.Message.ToolCalls) != 0 {
		t.Errorf("python block parsed without a python tool: %v", resp.Message.ToolCalls)
	}
}

func TestFormatError(t *testing.T) {
	msg := codeact.FormatError(nil, "DONE_MARK")
	for _, want := range []string{"no action", "```bash", "```python", "echo DONE_MARK", "```bash block (not ```python)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("FormatError lacks %q:\n%s", want, msg)
		}
	}
}

// The instructions state the completion marker from the first request,
// and that only a bash block finishes the run.
func TestInstructionsFinish(t *testing.T) {
	bash, python := codeact.DefaultActions[0], codeact.DefaultActions[1]
	for _, tt := range []struct {
		name    string
		actions []codeact.Action
		marker  string
		want    []string
		not     []string
	}{
		{"bash and python", []codeact.Action{bash, python}, "DONE_MARK",
			[]string{"# How to finish", "first line of output is DONE_MARK", "```bash\necho DONE_MARK\n```", "a ```python block that prints the marker does not"}, nil},
		{"bash only", []codeact.Action{bash}, "DONE_MARK", []string{"echo DONE_MARK"}, []string{"python"}},
		{"python only: no way to finish by marker", []codeact.Action{python}, "DONE_MARK", []string{"```python block"}, []string{"DONE_MARK", "How to finish"}},
		{"no marker", []codeact.Action{bash, python}, "", []string{"```bash block"}, []string{"How to finish"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := &fake{reply: "```bash\nls\n```"}
			m := codeact.New(f, &codeact.Options{CompletionMarker: tt.marker})
			var tools []model.ToolSpec
			for _, a := range tt.actions {
				tools = append(tools, model.ToolSpec{Name: a.Tool})
			}
			if _, err := m.Generate(context.Background(), &model.Request{System: "sys", Tools: tools, Messages: []model.Message{{Role: model.RoleUser, Content: "task"}}}); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(f.req.System, w) {
					t.Errorf("system prompt lacks %q:\n%s", w, f.req.System)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(f.req.System, w) {
					t.Errorf("system prompt has %q:\n%s", w, f.req.System)
				}
			}
		})
	}
}

// A reply cut at the output-token limit keeps its stop reason, so that
// the runtime runs none of its blocks; a complete one becomes tool_calls.
func TestCutReplyStaysCut(t *testing.T) {
	for _, tt := range []struct{ stop, want string }{{"length", "length"}, {"stop", "tool_calls"}} {
		f := &fake{reply: "```bash\necho pwned > p.txt\n```\nand now ```bash\nrm", stop: tt.stop}
		resp, err := codeact.New(f, nil).Generate(context.Background(), &model.Request{Tools: []model.ToolSpec{{Name: "bash"}}, Messages: []model.Message{{Role: model.RoleUser, Content: "task"}}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.StopReason != tt.want || len(resp.Message.ToolCalls) != 1 {
			t.Errorf("stop %s: got %q with %d calls, want %q", tt.stop, resp.StopReason, len(resp.Message.ToolCalls), tt.want)
		}
	}
}

// Blocks after the bash block that prints the completion marker do not
// run: they would change the workspace after the submission.
func TestBlocksAfterTheMarkerDoNotRun(t *testing.T) {
	const marker = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
	reply := "```bash\nls\n```\n```bash\necho " + marker + " && git diff\n```\n```bash\necho AFTER > after.txt\n```\n"
	for _, tt := range []struct {
		marker string
		want   int
	}{{marker, 2}, {"", 3}} {
		f := &fake{reply: reply, stop: "stop"}
		resp, err := codeact.New(f, &codeact.Options{CompletionMarker: tt.marker}).Generate(context.Background(), &model.Request{Tools: []model.ToolSpec{{Name: "bash"}}, Messages: []model.Message{{Role: model.RoleUser, Content: "task"}}})
		if err != nil {
			t.Fatal(err)
		}
		if got := len(resp.Message.ToolCalls); got != tt.want {
			t.Errorf("marker %q: %d calls, want %d", tt.marker, got, tt.want)
		}
	}
}
