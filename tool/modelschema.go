package tool

import (
	"bytes"
	"encoding/json"
)

// boundKeywords are the JSON Schema keywords [Registry.Specs] leaves out
// of the schemas of Keel's own tools: bounds that Validate enforces and
// names in its error, which the model needs only when it breaks one.
var boundKeywords = map[string]bool{
	"minLength": true, "maxLength": true,
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true,
	"minItems": true, "maxItems": true, "minProperties": true, "maxProperties": true,
}

// ModelSchema returns schema as a model is shown it: its structure
// (types, properties, required, enums, items, descriptions) without the
// bounds of boundKeywords and without "additionalProperties": false.
// Validation still uses the whole schema. A schema that does not decode
// is returned as it is.
func ModelSchema(schema json.RawMessage) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(schema))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return schema
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(stripBounds(v)); err != nil {
		return schema
	}
	return bytes.TrimRight(b.Bytes(), "\n")
}

// stripBounds removes the bounds from the schema s and from the schemas
// it holds (properties, items, definitions, combinations), never from a
// property's name or a value such as an enum's.
func stripBounds(s any) any {
	m, ok := s.(map[string]any)
	if !ok {
		return s
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		switch {
		case boundKeywords[k]:
			continue
		case k == "additionalProperties":
			if v == false {
				continue
			}
			out[k] = stripBounds(v)
		case k == "properties" || k == "$defs" || k == "definitions" || k == "patternProperties":
			if sub, ok := v.(map[string]any); ok {
				o := make(map[string]any, len(sub))
				for n, ps := range sub {
					o[n] = stripBounds(ps)
				}
				out[k] = o
			} else {
				out[k] = v
			}
		case k == "items" || k == "not" || k == "contains" || k == "propertyNames" || k == "additionalItems":
			out[k] = stripBounds(v)
		case k == "anyOf" || k == "oneOf" || k == "allOf" || k == "prefixItems":
			if list, ok := v.([]any); ok {
				o := make([]any, len(list))
				for i, x := range list {
					o[i] = stripBounds(x)
				}
				out[k] = o
			} else {
				out[k] = v
			}
		default:
			out[k] = v
		}
	}
	return out
}
