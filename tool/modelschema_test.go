package tool_test

import (
	"context"
	"testing"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/tool"
)

func TestModelSchema(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, in, want string
	}{
		{"bounds and closed object", `{"type":"object","additionalProperties":false,"properties":{"n":{"type":"integer","minimum":1,"maximum":600000},"s":{"type":"string","minLength":1,"maxLength":8}},"required":["s"]}`,
			`{"properties":{"n":{"type":"integer"},"s":{"type":"string"}},"required":["s"],"type":"object"}`},
		{"property names kept", `{"type":"object","properties":{"minimum":{"type":"integer","minimum":0},"maxLength":{"enum":["a<b","maximum"]}}}`,
			`{"properties":{"maxLength":{"enum":["a<b","maximum"]},"minimum":{"type":"integer"}},"type":"object"}`},
		{"nested items and combinations", `{"type":"object","properties":{"xs":{"type":"array","maxItems":50,"items":{"type":"object","additionalProperties":false,"properties":{"c":{"type":"string","maxLength":300}}}},"u":{"anyOf":[{"type":"string","minLength":2},{"type":"null"}]}}}`,
			`{"properties":{"u":{"anyOf":[{"type":"string"},{"type":"null"}]},"xs":{"items":{"properties":{"c":{"type":"string"}},"type":"object"},"type":"array"}},"type":"object"}`},
		{"open object kept", `{"type":"object","additionalProperties":{"type":"string","maxLength":3}}`,
			`{"additionalProperties":{"type":"string"},"type":"object"}`},
		{"big numbers exact", `{"type":"object","properties":{"n":{"type":"integer","default":12345678901234567890}}}`,
			`{"properties":{"n":{"default":12345678901234567890,"type":"integer"}},"type":"object"}`},
		{"not JSON", `{"type":`, `{"type":`},
	} {
		if got := string(tool.ModelSchema([]byte(tt.in))); got != tt.want {
			t.Errorf("%s: ModelSchema(%s)\n got %s\nwant %s", tt.name, tt.in, got, tt.want)
		}
	}
}

// TestSpecsModelSchema: Keel's own tools are shown without their bounds,
// which Validate still enforces; a server's tool keeps its schema.
func TestSpecsModelSchema(t *testing.T) {
	t.Parallel()
	schema := `{"type":"object","additionalProperties":false,"properties":{"n":{"type":"integer","maximum":5}}}`
	r := tool.NewRegistry()
	h := func(ctx context.Context, req *tool.Request) (*tool.Result, error) { return tool.Text("ok"), nil }
	r.Add(&tool.Tool{Name: "own", InputSchema: []byte(schema)}, h)
	r.Add(&tool.Tool{Name: "srv__t", InputSchema: []byte(schema), Server: "srv"}, h)
	got := map[string]string{}
	for _, s := range r.Specs() {
		got[s.Name] = string(s.Parameters)
	}
	if want := `{"properties":{"n":{"type":"integer"}},"type":"object"}`; got["own"] != want {
		t.Errorf("own tool's schema %s, want %s", got["own"], want)
	}
	if got["srv__t"] != schema {
		t.Errorf("server tool's schema %s, want it unchanged", got["srv__t"])
	}
	if _, res := r.Validate(model.ToolCall{ID: "c", Name: "own", Arguments: `{"n":6}`}); res == nil {
		t.Error("a call over the bound the model was not shown was accepted")
	}
	if _, res := r.Validate(model.ToolCall{ID: "c", Name: "own", Arguments: `{"m":1}`}); res == nil {
		t.Error("an unknown property was accepted")
	}
}
