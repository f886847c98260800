package tool

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/keel-run/keel/internal/lazy"
)

// schemaError says in plain words what a schema validator's error (of
// github.com/google/jsonschema-go: "validating root: validating
// /properties/limits: ...: minimum: -5/1 is less than 0.000000") found:
// the argument it concerns, by its path ("limits.max_steps"), and what is
// wrong with it ("must be at least 0 (got -5)"). An error it does not
// recognize is given whole, without the validator's schema trail.
func schemaError(err error) string {
	msg := err.Error()
	field := ""
	for strings.HasPrefix(msg, "validating ") {
		loc, rest, ok := strings.Cut(strings.TrimPrefix(msg, "validating "), ": ")
		if !ok {
			break
		}
		if f, ok := fieldOf(loc); ok {
			field = f
		}
		msg = rest
	}
	what := plain(msg)
	switch {
	case what == "":
		what = msg
	case strings.HasPrefix(what, "missing") || strings.HasPrefix(what, "unknown"):
		if field != "" {
			what += " in " + field
		}
		return what
	}
	if field == "" {
		return what
	}
	return field + " " + what
}

// fieldOf turns a schema location ("/properties/limits/properties/
// max_steps", "/properties/items/items/properties/status") into an
// argument's path ("limits.max_steps", "items[].status"); the root is
// "".
func fieldOf(loc string) (string, bool) {
	if loc == "root" {
		return "", true
	}
	if !strings.HasPrefix(loc, "/") {
		return "", false
	}
	var b strings.Builder
	segs := strings.Split(strings.TrimPrefix(loc, "/"), "/")
	for i := 0; i < len(segs); i++ {
		switch segs[i] {
		case "properties", "additionalProperties":
			if segs[i] == "additionalProperties" {
				b.WriteString("[…]")
				continue
			}
			if i+1 < len(segs) {
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(segs[i+1])
				i++
			}
		case "items", "prefixItems":
			b.WriteString("[]")
		default:
			// anyOf/0, $defs/x, ...: not a step into the arguments.
		}
	}
	return b.String(), true
}

var (
	reBound    = lazy.Regexp(`^(minimum|maximum|exclusiveMinimum|exclusiveMaximum): (\S+) is [a-z ]+ than (?:or equal to )?(\S+)$`)
	reType     = lazy.Regexp(`^type: .* has type "([a-z]+)", want (?:one of )?(.+)$`)
	reEnum     = lazy.Regexp(`^enum: (.*) does not equal any of: \[(.*)\]$`)
	reRequired = lazy.Regexp(`^required: missing properties: \[(.*)\]$`)
	reExtra    = lazy.Regexp(`^unexpected additional properties \[(.*)\]$`)
	reMinLen   = lazy.Regexp(`^minLength: .* contains (\d+) Unicode code points, fewer than (\d+)$`)
	reMaxLen   = lazy.Regexp(`^maxLength: .* contains (\d+) Unicode code points, more than (\d+)$`)
	reItems    = lazy.Regexp(`^(minItems|maxItems): array length (\d+) is (?:less|greater) than (\d+)$`)
)

// plain returns the validator's message msg (without its trail) in plain
// words, or "" when it is not one it knows.
func plain(msg string) string {
	if m := reBound().FindStringSubmatch(msg); m != nil {
		got, bound := number(m[2]), number(m[3])
		words := map[string]string{"minimum": "must be at least", "maximum": "must be at most",
			"exclusiveMinimum": "must be greater than", "exclusiveMaximum": "must be less than"}[m[1]]
		return fmt.Sprintf("%s %s (got %s)", words, bound, got)
	}
	if m := reType().FindStringSubmatch(msg); m != nil {
		want := strings.Trim(m[2], `[]"`)
		var kinds []string
		for _, k := range strings.FieldsFunc(want, func(r rune) bool { return r == ' ' || r == '"' || r == ',' }) {
			kinds = append(kinds, article(k))
		}
		return fmt.Sprintf("must be %s (got %s)", strings.Join(kinds, " or "), article(m[1]))
	}
	if m := reEnum().FindStringSubmatch(msg); m != nil {
		var vals []string
		for _, v := range strings.Fields(m[2]) {
			vals = append(vals, quoted(v))
		}
		return fmt.Sprintf("must be one of: %s (got %s)", strings.Join(vals, ", "), quoted(m[1]))
	}
	if m := reRequired().FindStringSubmatch(msg); m != nil {
		return "missing required argument " + m[1]
	}
	if m := reExtra().FindStringSubmatch(msg); m != nil {
		return "unknown argument " + m[1]
	}
	if m := reMinLen().FindStringSubmatch(msg); m != nil {
		if m[2] == "1" {
			return "must not be empty"
		}
		return fmt.Sprintf("must be at least %s characters long (got %s)", m[2], m[1])
	}
	if m := reMaxLen().FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("must be at most %s characters long (got %s)", m[2], m[1])
	}
	if m := reItems().FindStringSubmatch(msg); m != nil {
		if m[1] == "minItems" {
			return fmt.Sprintf("must have at least %s items (got %s)", m[3], m[2])
		}
		return fmt.Sprintf("must have at most %s items (got %s)", m[3], m[2])
	}
	return ""
}

// number writes a number the validator printed as a fraction ("-5/1")
// or with %f ("0.000000") as a person would.
func number(s string) string {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return s
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// article names a JSON type with its article: "an integer", "a string".
func article(kind string) string {
	switch kind {
	case "integer", "array", "object":
		return "an " + kind
	case "null":
		return "null"
	}
	return "a " + kind
}

// quoted quotes a value the validator printed with %v unless it is a
// number, a boolean or null.
func quoted(v string) string {
	if _, ok := new(big.Rat).SetString(v); ok || v == "true" || v == "false" || v == "<nil>" {
		return v
	}
	return strconv.Quote(v)
}
