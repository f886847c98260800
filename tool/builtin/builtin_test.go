package builtin_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin"
)

func TestRegister(t *testing.T) {
	t.Parallel()
	r := tool.NewRegistry()
	builtin.Register(r, nil)
	want := []string{"bash", "edit_file", "fetch_url", "http_request", "python", "read_file", "search_files", "todo", "write_file"}
	if diff := cmp.Diff(want, r.Names()); diff != "" {
		t.Errorf("Names (-want +got):\n%s", diff)
	}
	for _, s := range r.Specs() {
		if len(s.Description) < 100 || !json.Valid(s.Parameters) {
			t.Errorf("%s: description %d chars, schema valid %v", s.Name, len(s.Description), json.Valid(s.Parameters))
		}
	}
	r2 := tool.NewRegistry()
	builtin.Register(r2, &builtin.Options{NoShell: true, NoWeb: true, NoHTTP: true, NoPython: true, NoTodo: true})
	if got := len(r2.Names()); got != 4 {
		t.Errorf("without shell and web: %d tools, want 4", got)
	}
}

// TestToolcallMalformedArgs is TOOLCALL/malformed-args at the registry
// level: c1-c3 are refused before anything runs, each with its own error
// result naming the parser's message and a bounded preview; c4 runs.
func TestToolcallMalformedArgs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("x\n"), 0o644)
	ws, err := tool.NewWorkspace(dir, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	r := tool.NewRegistry()
	builtin.Register(r, nil)
	huge := `{"path":"a.txt","old_string":"` + strings.Repeat("y", 5000)
	calls := []struct {
		call model.ToolCall
		want string // "" means valid
	}{
		{model.ToolCall{ID: "c1", Name: "edit_file", Arguments: `{"path":"a.txt","old_string":"x`}, "the arguments of edit_file are not a valid JSON object: unexpected end of JSON input; received: {\"path\":\"a.txt\",\"old_string\":\"x"},
		{model.ToolCall{ID: "c2", Name: "edit_file", Arguments: `{"path":"a.txt",}`}, "the arguments of edit_file are not a valid JSON object: invalid character '}' looking for beginning of object key string; received: {\"path\":\"a.txt\",}"},
		{model.ToolCall{ID: "c3", Name: "read_file", Arguments: `["a.txt"]`}, "the arguments of read_file must be a JSON object, got an array; received: [\"a.txt\"]"},
		{model.ToolCall{ID: "c5", Name: "edit_file", Arguments: huge}, "more bytes]"},
		{model.ToolCall{ID: "c6", Name: "edit_file", Arguments: `{"path":"a.txt"}`}, "do not match its schema"},
		{model.ToolCall{ID: "c7", Name: "edit", Arguments: `{}`}, `unknown tool "edit"; the available tools are: bash, edit_file, fetch_url, http_request, python, read_file, search_files, todo, write_file`},
		{model.ToolCall{ID: "c4", Name: "read_file", Arguments: `{"path":"a.txt"}`}, ""},
	}
	for _, c := range calls {
		args, res := r.Validate(c.call)
		if c.want == "" {
			if res != nil {
				t.Fatalf("%s: valid call refused: %q", c.call.ID, res.Content)
			}
			out, err := r.Run(t.Context(), c.call.Name, &tool.Request{RunID: "r", CallID: c.call.ID, Arguments: args, Env: &tool.Env{Workspace: ws}})
			if err != nil || out.IsError || out.Content != "     1\tx\n" {
				t.Errorf("%s: Run = %v, %v", c.call.ID, out, err)
			}
			continue
		}
		if res == nil || !res.IsError {
			t.Errorf("%s: malformed call accepted (args %s)", c.call.ID, args)
			continue
		}
		if !strings.Contains(res.Content, c.want) {
			t.Errorf("%s: result = %q, want it to contain %q", c.call.ID, res.Content, c.want)
		}
		if len(res.Content) > tool.MaxPreview+400 {
			t.Errorf("%s: result is %d bytes; the preview must be bounded", c.call.ID, len(res.Content))
		}
		if b, err := json.Marshal(res); err != nil || !json.Valid(b) {
			t.Errorf("%s: result is not valid JSON", c.call.ID)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "x\n" {
		t.Errorf("a malformed call changed a.txt: %q", b)
	}
}

func ExampleRegister() {
	r := tool.NewRegistry()
	builtin.Register(r, nil)
	for _, name := range r.Names() {
		fmt.Println(name, r.Tool(name).Effect)
	}
	// Output:
	// bash external
	// edit_file workspace_write
	// fetch_url external
	// http_request external
	// python external
	// read_file read_only
	// search_files read_only
	// todo read_only
	// write_file workspace_write
}

// Every built-in tool's schema closes every object it describes
// (additionalProperties: false; validation uses it, the model is not
// shown it), and the registry refuses arguments that
// could be read two ways: an unknown key, a duplicate key, or a key that
// differs only in case from a property, so that the gate, the tool and
// the approval a person reads all see the same values.
func TestArgumentsHaveOneReading(t *testing.T) {
	t.Parallel()
	r := tool.NewRegistry()
	builtin.Register(r, nil)
	var closed func(name, at string, s map[string]any)
	closed = func(name, at string, s map[string]any) {
		if s["type"] == "object" && s["additionalProperties"] != false {
			t.Errorf("%s: the object at %s does not set additionalProperties: false", name, at)
		}
		if props, ok := s["properties"].(map[string]any); ok {
			for k, v := range props {
				if sub, ok := v.(map[string]any); ok {
					closed(name, at+"/"+k, sub)
				}
			}
		}
		if items, ok := s["items"].(map[string]any); ok {
			closed(name, at+"/items", items)
		}
	}
	for _, name := range r.Names() {
		var s map[string]any
		if err := json.Unmarshal(r.Tool(name).InputSchema, &s); err != nil {
			t.Fatal(err)
		}
		closed(name, "", s)
	}
	for _, tt := range []struct{ tool, args, want string }{
		{"bash", `{"command":"touch notes.txt","COMMAND":"rm -rf src"}`, "differ only in case"},
		{"bash", `{"COMMAND":"rm -rf src"}`, `differs only in case from the property "command"`},
		{"bash", `{"command":"touch notes.txt","command":"rm -rf src"}`, "appears twice"},
		{"bash", `{"command":"ls","comand":"x"}`, "do not match its schema"},
		{"python", `{"code":"print(1)","Code":"print(2)"}`, "differ only in case"},
		{"read_file", `{"path":"a","PATH":"b"}`, "differ only in case"},
		{"fetch_url", `{"url":"https://a.example/","URL":"https://b.example/"}`, "differ only in case"},
		{"write_file", `{"path":"a","content":"x","ſ":"y"}`, "do not match its schema"},
		{"write_file", `{"paTh":"a","content":"x"}`, `differs only in case from the property "path"`},
		{"todo", `{"items":[{"content":"a","status":"done","STATUS":"pending"}]}`, "differ only in case"},
		{"todo", `{"items":[{"content":"a","status":"done","note":"x"}]}`, "do not match its schema"},
	} {
		_, res := r.Validate(model.ToolCall{ID: "c", Name: tt.tool, Arguments: tt.args})
		if res == nil || !strings.Contains(res.Content, tt.want) {
			t.Errorf("Validate(%s %s) = %+v, want an error containing %q", tt.tool, tt.args, res, tt.want)
		}
	}
	// Two spellings of a property, neither exact for the other.
	if _, res := r.Validate(model.ToolCall{ID: "c", Name: "todo", Arguments: `{"items":[],"ITEMS":[]}`}); res == nil {
		t.Error("todo with items and ITEMS accepted")
	}
	if args, res := r.Validate(model.ToolCall{ID: "c", Name: "bash", Arguments: `{"command": "ls", "timeout_ms": 100}`}); res != nil || string(args) != `{"command":"ls","timeout_ms":100}` {
		t.Errorf("a valid call: %s %+v", args, res)
	}
}

// TestSpecsSize keeps the definitions of the built-in tools, which every
// request carries, within a budget: name, description and schema as the
// model is shown it, 4,057 bytes in all when this budget was set (from
// 12,100, then 8,900, then 6,135, then 4,777, then 4,216). A description that grows past it
// should say something the model cannot learn from the tool's results.
func TestSpecsSize(t *testing.T) {
	t.Parallel()
	r := tool.NewRegistry()
	builtin.Register(r, nil)
	const budget = 4_100
	total := 0
	for _, s := range r.Specs() {
		var schema bytes.Buffer
		if err := json.Compact(&schema, s.Parameters); err != nil {
			t.Fatal(err)
		}
		n := len(s.Name) + len(s.Description) + schema.Len()
		t.Logf("%-15s %5d bytes (description %d, schema %d)", s.Name, n, len(s.Description), schema.Len())
		total += n
	}
	if total > budget {
		t.Errorf("the built-in tools' definitions take %d bytes, over the budget of %d", total, budget)
	}
}
