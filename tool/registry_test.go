package tool_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/tool"
)

// A tool whose schema leaves objects open (an MCP tool, say) still gets
// arguments with one reading: no duplicate keys and no keys that differ
// only in case, from each other or from a declared property, at any
// depth.
func TestValidateOneReading(t *testing.T) {
	t.Parallel()
	r := tool.NewRegistry()
	r.Add(&tool.Tool{Name: "open", InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"opts":{"type":"object"}}}`)},
		func(context.Context, *tool.Request) (*tool.Result, error) { return tool.Text("ok"), nil })
	for _, tt := range []struct{ args, want string }{
		{`{"path":"a","extra":1}`, ""},
		{`{"Path":"a"}`, `differs only in case from the property "path"`},
		{`{"path":"a","path":"b"}`, "appears twice"},
		{`{"opts":{"x":1,"X":2}}`, "differ only in case"},
		{`{"opts":{"x":{"y":1,"y":2}}}`, "appears twice in /opts/x"},
		{`{"opts":[{"k":1,"\u212a":2}]}`, "differ only in case"},
		{`{"a":1,"A":2}`, "differ only in case"},
	} {
		_, res := r.Validate(model.ToolCall{ID: "c", Name: "open", Arguments: tt.args})
		switch {
		case tt.want == "" && res != nil:
			t.Errorf("Validate(%s) = %q, want it accepted", tt.args, res.Content)
		case tt.want != "" && (res == nil || !strings.Contains(res.Content, tt.want)):
			t.Errorf("Validate(%s) = %+v, want an error containing %q", tt.args, res, tt.want)
		}
	}
}

// A call whose arguments break the schema is told which argument and
// what is wrong in plain words, not the validator's trail and numbers
// ("validating /properties/...: minimum: -5/1 is less than 0.000000").
func TestSchemaErrorsInPlainWords(t *testing.T) {
	t.Parallel()
	r := tool.NewRegistry()
	r.Add(&tool.Tool{Name: "spawn", InputSchema: json.RawMessage(`{"type":"object","additionalProperties":false,"required":["task"],"properties":{
		"task":{"type":"string","minLength":1},
		"mode":{"type":"string","enum":["one","any","all"]},
		"tools":{"type":"array","items":{"type":"string"},"maxItems":2},
		"limits":{"type":"object","additionalProperties":false,"properties":{
			"max_steps":{"type":"integer","minimum":0},
			"max_cost":{"type":"number","minimum":0,"maximum":10}}}}}`)},
		func(context.Context, *tool.Request) (*tool.Result, error) { return tool.Text("ok"), nil })
	for _, tt := range []struct{ args, want string }{
		{`{"task":"t","limits":{"max_steps":-5}}`, "do not match its schema: limits.max_steps must be at least 0 (got -5)"},
		{`{"task":"t","limits":{"max_cost":10.5}}`, "limits.max_cost must be at most 10 (got 10.5)"},
		{`{"task":"t","limits":{"max_steps":"5"}}`, "limits.max_steps must be an integer (got a string)"},
		{`{"task":"t","limits":{"max_step":5}}`, `unknown argument "max_step" in limits`},
		{`{"task":"t","tsk":1}`, `unknown argument "tsk"`},
		{`{}`, `missing required argument "task"`},
		{`{"task":""}`, "task must not be empty"},
		{`{"task":"t","mode":"some"}`, `mode must be one of: "one", "any", "all" (got "some")`},
		{`{"task":"t","tools":["a",3]}`, "tools[] must be a string (got an integer)"},
		{`{"task":"t","tools":["a","b","c"]}`, "tools must have at most 2 items (got 3)"},
	} {
		_, res := r.Validate(model.ToolCall{ID: "c", Name: "spawn", Arguments: tt.args})
		if res == nil || !strings.Contains(res.Content, tt.want) {
			t.Errorf("Validate(%s) = %+v, want an error containing %q", tt.args, res, tt.want)
			continue
		}
		if strings.Contains(res.Content, "validating") || strings.Contains(res.Content, "0.000000") {
			t.Errorf("Validate(%s) = %q: the validator's own words", tt.args, res.Content)
		}
	}
}

// An unlisted tool is offered to no new run (Names, Specs) and still
// validates and runs for a run whose run.created offered it.
func TestUnlistedTool(t *testing.T) {
	t.Parallel()
	r := tool.NewRegistry()
	h := func(context.Context, *tool.Request) (*tool.Result, error) { return tool.Text("ran"), nil }
	r.Add(&tool.Tool{Name: "new", InputSchema: json.RawMessage(`{"type":"object"}`)}, h)
	r.Add(&tool.Tool{Name: "old", Unlisted: true, InputSchema: json.RawMessage(`{"type":"object"}`)}, h)
	if got := r.Names(); len(got) != 1 || got[0] != "new" {
		t.Errorf("Names = %v, want [new]", got)
	}
	if got := r.Specs(); len(got) != 1 || got[0].Name != "new" {
		t.Errorf("Specs = %v, want new only", got)
	}
	if r.Tool("old") == nil {
		t.Error("Tool(old) = nil")
	}
	if _, res := r.Validate(model.ToolCall{ID: "c", Name: "old", Arguments: `{}`}); res != nil {
		t.Errorf("Validate(old) = %q", res.Content)
	}
	if res, err := r.Run(t.Context(), "old", &tool.Request{}); err != nil || res.Content != "ran" {
		t.Errorf("Run(old) = %+v, %v", res, err)
	}
	if _, res := r.Validate(model.ToolCall{ID: "c", Name: "gone", Arguments: `{}`}); res == nil || strings.Contains(res.Content, "old") {
		t.Errorf("an unknown tool's error names the unlisted one: %+v", res)
	}
}
