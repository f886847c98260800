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
