package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/keel-run/keel/model"
)

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// Registry holds the tools of a run and validates calls against them.
// Add must not be called concurrently with other methods; after
// registration a Registry is safe for concurrent use.
type Registry struct {
	tools map[string]*entry
}

type entry struct {
	tool     *Tool
	handler  Handler
	schema   *jsonschema.Schema
	resolved *jsonschema.Resolved
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{tools: map[string]*entry{}} }

// Add registers t with handler h. It panics on a programmer error: an
// empty or duplicate name, a nil handler, or an InputSchema that is not a
// valid JSON Schema of "type": "object".
func (r *Registry) Add(t *Tool, h Handler) {
	if t == nil || t.Name == "" || h == nil {
		panic("tool: Add needs a named tool and a handler")
	}
	if err := r.TryAdd(t, h); err != nil {
		panic(err.Error())
	}
}

// TryAdd is [Registry.Add] for tools that come from outside the program
// (an MCP server, an OpenAPI document): it returns an error instead of
// panicking for a duplicate name or an input schema that does not compile
// or is not of "type": "object".
func (r *Registry) TryAdd(t *Tool, h Handler) error {
	if t == nil || t.Name == "" || h == nil {
		return errors.New("tool: Add needs a named tool and a handler")
	}
	if _, dup := r.tools[t.Name]; dup {
		return fmt.Errorf("tool: duplicate tool name %s", t.Name)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(t.InputSchema, &s); err != nil {
		return fmt.Errorf("tool %s: bad input schema: %v", t.Name, err)
	}
	if s.Type != "object" {
		return fmt.Errorf("tool %s: input schema type is %q, want \"object\"", t.Name, s.Type)
	}
	res, err := s.Resolve(nil)
	if err != nil {
		return fmt.Errorf("tool %s: resolve input schema: %v", t.Name, err)
	}
	c := *t
	r.tools[t.Name] = &entry{tool: &c, handler: h, schema: &s, resolved: res}
	return nil
}

// Add registers a tool whose handler takes typed arguments. The input
// schema is inferred from In (see [jsonschema.For]: json tags name the
// properties, `jsonschema:"..."` tags describe them, omitempty makes them
// optional) unless t.InputSchema is already set. Arguments are validated
// against the schema before h runs, then decoded into In.
func Add[In any](r *Registry, t *Tool, h func(ctx context.Context, req *Request, in In) (*Result, error)) {
	c := *t
	if len(c.InputSchema) == 0 {
		s, err := jsonschema.For[In](nil)
		if err != nil {
			panic(fmt.Sprintf("tool %s: infer schema: %v", t.Name, err))
		}
		b, err := json.Marshal(s)
		if err != nil {
			panic(fmt.Sprintf("tool %s: marshal schema: %v", t.Name, err))
		}
		c.InputSchema = b
	}
	r.Add(&c, func(ctx context.Context, req *Request) (*Result, error) {
		var in In
		dec := json.NewDecoder(bytes.NewReader(req.Arguments))
		if err := dec.Decode(&in); err != nil {
			return Errorf("invalid arguments for %s: %v", t.Name, err), nil
		}
		return h(ctx, req, in)
	})
}

// Tool returns the registered tool named name, or nil.
func (r *Registry) Tool(name string) *Tool {
	if e := r.tools[name]; e != nil {
		return e.tool
	}
	return nil
}

// Names returns the names of the tools offered to new runs (every
// registered tool but the [Tool.Unlisted] ones), sorted.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.tools))
	for n, e := range r.tools {
		if !e.tool.Unlisted {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// Specs returns the tools as model tool specs, sorted by name so that the
// request prefix is stable (prompt caching) and deterministic. The
// schema of a tool of Keel's own (no Server) is its [ModelSchema]: the
// bounds Validate enforces would otherwise be sent with every request.
// A server's tool keeps its schema as the server gave it (it is pinned).
func (r *Registry) Specs() []model.ToolSpec {
	var out []model.ToolSpec
	for _, n := range r.Names() {
		t := r.tools[n].tool
		params := t.InputSchema
		if t.Server == "" {
			params = ModelSchema(params)
		}
		out = append(out, model.ToolSpec{Name: t.Name, Description: t.Description, Parameters: params})
	}
	return out
}

// MaxPreview bounds how much of a malformed argument string an error result
// quotes back to the model.
const MaxPreview = 800

// Validate checks a model's tool call before anything runs. It returns the
// arguments as a compact JSON object, or a non-nil error [Result] that
// tells the model what is wrong: an unknown tool (listing the valid
// names), arguments that are not a JSON object (with the parser's message
// and a preview of at most [MaxPreview] bytes), an object that can be
// read two ways (a duplicate key, or keys that differ only in case from
// each other or from a schema property, at any depth: every reader of the
// arguments, the gate, the tool and what people are shown, must see the
// same values), or arguments that break the tool's schema.
func (r *Registry) Validate(call model.ToolCall) (json.RawMessage, *Result) {
	e := r.tools[call.Name]
	if e == nil {
		return nil, Errorf("unknown tool %q; the available tools are: %s", call.Name, strings.Join(r.Names(), ", "))
	}
	raw := strings.TrimSpace(call.Arguments)
	if raw == "" {
		raw = "{}"
	}
	var v any
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return nil, Errorf("the arguments of %s are not a valid JSON object: %v; received: %s", call.Name, err, Preview(call.Arguments, MaxPreview))
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, Errorf("the arguments of %s must be a JSON object, got %s; received: %s", call.Name, jsonKind(v), Preview(call.Arguments, MaxPreview))
	}
	if err := checkKeys([]byte(raw), e.schema); err != nil {
		return nil, Errorf("the arguments of %s are ambiguous: %v", call.Name, err)
	}
	if err := e.resolved.Validate(v); err != nil {
		return nil, Errorf("the arguments of %s do not match its schema: %s", call.Name, schemaError(err))
	}
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(raw)); err != nil {
		return nil, Errorf("the arguments of %s are not valid JSON: %v", call.Name, err)
	}
	return b.Bytes(), nil
}

// Run runs an already validated call. It returns an error result for an
// unknown tool rather than panicking.
func (r *Registry) Run(ctx context.Context, name string, req *Request) (*Result, error) {
	e := r.tools[name]
	if e == nil {
		return Errorf("unknown tool %q; the available tools are: %s", name, strings.Join(r.Names(), ", ")), nil
	}
	return e.handler(ctx, req)
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "an array"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "a non-object value"
}

// Preview returns s cut to at most n bytes on a rune boundary, with
// invalid UTF-8 replaced, and a marker saying how much was cut.
func Preview(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… [%d more bytes]", s[:cut], len(s)-cut)
}
