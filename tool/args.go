package tool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/google/jsonschema-go/jsonschema"
)

// checkKeys refuses an arguments object that can be read two ways: an
// object (at any depth) with a duplicate key, with two keys that differ
// only in case, or with a key that differs only in case from a property
// its schema declares. Go's encoding/json matches struct fields without
// regard to case and keeps the last of duplicate keys, while a display
// that reads the exact key (or a decoder that keeps the first) would see
// another value: {"command": "touch a", "COMMAND": "rm -rf src"} must
// not show one command to a person and run the other. s is the schema of
// the value (nil: unknown).
func checkKeys(raw []byte, s *jsonschema.Schema) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return checkValue(dec, s, "")
}

func checkValue(dec *json.Decoder, s *jsonschema.Schema, at string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		folded := map[string]string{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			k, _ := kt.(string)
			where := at + "/" + Preview(k, 60)
			if seen[k] {
				return fmt.Errorf("the key %q appears twice in %s", Preview(k, 60), orRoot(at))
			}
			seen[k] = true
			fk := foldKey(k)
			if other, ok := folded[fk]; ok {
				return fmt.Errorf("the keys %q and %q in %s differ only in case", Preview(other, 60), Preview(k, 60), orRoot(at))
			}
			folded[fk] = k
			var sub *jsonschema.Schema
			if s != nil {
				if p, ok := s.Properties[k]; ok {
					sub = p
				} else {
					names := make([]string, 0, len(s.Properties))
					for name := range s.Properties {
						names = append(names, name)
					}
					slices.Sort(names)
					for _, name := range names {
						if strings.EqualFold(name, k) {
							return fmt.Errorf("the key %q in %s differs only in case from the property %q; use %q", Preview(k, 60), orRoot(at), name, name)
						}
					}
					sub = s.AdditionalProperties
				}
			}
			if err := checkValue(dec, sub, where); err != nil {
				return err
			}
		}
		_, err := dec.Token() // '}'
		return err
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			var sub *jsonschema.Schema
			if s != nil {
				switch {
				case i < len(s.PrefixItems):
					sub = s.PrefixItems[i]
				default:
					sub = s.Items
				}
			}
			if err := checkValue(dec, sub, fmt.Sprintf("%s/%d", at, i)); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ']'
		return err
	}
	return nil
}

func orRoot(at string) string {
	if at == "" {
		return "the arguments"
	}
	return at
}

// foldKey maps s to a canonical form under Unicode simple case folding
// (each rune to the smallest rune of its folding orbit), so that
// strings.EqualFold(a, b) exactly when foldKey(a) == foldKey(b).
func foldKey(s string) string {
	var b strings.Builder
	for _, r := range s {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < m {
				m = f
			}
		}
		b.WriteRune(m)
	}
	return b.String()
}
