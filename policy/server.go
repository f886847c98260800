package policy

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"

	"github.com/cedar-policy/cedar-go"
)

// typeServer is the resource type of calls to MCP servers and connectors.
const typeServer = cedar.EntityType("Keel::Server")

// maxRecordDepth bounds how deep the arguments of a call are turned into
// Cedar values; deeper values are left as their JSON text.
const maxRecordDepth = 16

// jsonRecord turns a JSON object into a Cedar record (context.arguments):
// objects become records, arrays sets, strings, booleans and integers
// themselves; other numbers and nulls become their JSON text.
func jsonRecord(raw json.RawMessage) cedar.Record {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return cedar.NewRecord(nil)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return cedar.NewRecord(nil)
	}
	return recordOf(m, 0)
}

func recordOf(m map[string]any, depth int) cedar.Record {
	rm := make(cedar.RecordMap, len(m))
	for k, v := range m {
		rm[cedar.String(k)] = cedarValue(v, depth+1)
	}
	return cedar.NewRecord(rm)
}

func cedarValue(v any, depth int) cedar.Value {
	if depth > maxRecordDepth {
		b, _ := json.Marshal(v)
		return cedar.String(b)
	}
	switch x := v.(type) {
	case string:
		return cedar.String(x)
	case bool:
		return cedar.Boolean(x)
	case int:
		return cedar.Long(x)
	case int64:
		return cedar.Long(x)
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return cedar.Long(n)
		}
		return cedar.String(x.String())
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return cedar.Long(int64(x))
		}
		b, _ := json.Marshal(x)
		return cedar.String(b)
	case []string:
		vs := make([]cedar.Value, len(x))
		for i, s := range x {
			vs[i] = cedar.String(s)
		}
		return cedar.NewSet(vs...)
	case []any:
		vs := make([]cedar.Value, 0, len(x))
		for _, e := range x {
			vs = append(vs, cedarValue(e, depth+1))
		}
		return cedar.NewSet(vs...)
	case map[string]any:
		return recordOf(x, depth)
	case nil:
		return cedar.String("null")
	}
	b, _ := json.Marshal(v)
	return cedar.String(b)
}

// factsRecord turns a tool's facts about a call into a Cedar record
// (context.facts), in a deterministic key order.
func factsRecord(f map[string]any) cedar.Record {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	rm := make(cedar.RecordMap, len(f))
	for _, k := range keys {
		rm[cedar.String(k)] = cedarValue(f[k], 1)
	}
	return cedar.NewRecord(rm)
}
