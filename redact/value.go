package redact

import (
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Bounds below which a known secret value, or an encoded form of it, is
// neither looked for nor hidden: too short to tell from ordinary text,
// hiding it would garble the text without hiding anything. A value is
// matched in any letter case only from MinFormLen bytes on.
const (
	MinLen     = 4
	MinFormLen = 8
)

// Form is one spelling of a secret value, as a careless or hostile echo
// is likely to write it.
type Form struct {
	// Name says the encoding: "as is", "reversed", "url-escaped", "hex",
	// "base64", "base64 unpadded", "base64url", "base64url unpadded".
	Name string
	// Text is the value so encoded.
	Text string
	// Fold: the form is also matched in any letter case (its letters
	// carry no information of the encoding: as is, reversed, hex).
	Fold bool
}

// Forms returns the spellings of value an echo is likely to use: the value
// itself, reversed, URL query-escaped, hex, and base64 in the standard and
// URL alphabets, padded and not; longest first, without duplicates. A
// value shorter than [MinLen] has none; of a shorter one than
// [MinFormLen] only the value itself is kept, matched in its case. It is a guard, not a proof: a
// resource can always encode a value some other way.
func Forms(value string) []Form {
	if len(value) < MinLen {
		return nil
	}
	if len(value) < MinFormLen {
		return []Form{{"as is", value, false}}
	}
	b := []byte(value)
	rev := []rune(value)
	slices.Reverse(rev)
	all := []Form{
		{"as is", value, true},
		{"reversed", string(rev), true},
		{"url-escaped", url.QueryEscape(value), false},
		{"hex", hex.EncodeToString(b), true},
		{"base64", base64.StdEncoding.EncodeToString(b), false},
		{"base64 unpadded", base64.RawStdEncoding.EncodeToString(b), false},
		{"base64url", base64.URLEncoding.EncodeToString(b), false},
		{"base64url unpadded", base64.RawURLEncoding.EncodeToString(b), false},
	}
	// Longest first, so a padded form is found whole; the first name of
	// equal texts is kept (a value that escapes to itself is "as is").
	slices.SortStableFunc(all, func(x, y Form) int { return len(y.Text) - len(x.Text) })
	var out []Form
	for _, f := range all {
		if len(f.Text) < MinFormLen || slices.ContainsFunc(out, func(o Form) bool { return o.Text == f.Text }) {
			continue
		}
		out = append(out, f)
	}
	return out
}

// Match is a known secret value found in a text.
type Match struct {
	// Value is the index of the value in the arguments of [Find].
	Value int
	// Form is the name of the spelling it was found in ([Form.Name]).
	Form string
}

// Find reports which of values s holds, in any of their [Forms]: one
// match per value found (its longest form found), in the order of values.
func Find(s string, values ...string) []Match {
	var out []Match
	for i, v := range values {
		for _, f := range Forms(v) {
			if strings.Contains(s, f.Text) || f.Fold && foldRegexp(f.Text).MatchString(s) {
				out = append(out, Match{Value: i, Form: f.Name})
				break
			}
		}
	}
	return out
}

// Value returns s with every form of value ([Forms]) replaced by
// [Mask]: the text a resource that was given a credential sent back,
// before the model or the journal sees it.
func Value(s, value string) string {
	if s == "" {
		return s
	}
	for _, f := range Forms(value) {
		s = strings.ReplaceAll(s, f.Text, Mask)
		if f.Fold {
			s = foldRegexp(f.Text).ReplaceAllLiteralString(s, Mask)
		}
	}
	return s
}

// Values returns a function that hides each of values as [Value] does,
// then likely secrets as [Text] does: for text that may hold anything
// and, among it, values known to be secret (credentials injected into a
// run).
func Values(values ...string) func(string) string {
	values = slices.DeleteFunc(slices.Clone(values), func(v string) bool { return len(v) < MinLen })
	// Longest first: a value that holds another is hidden whole.
	slices.SortStableFunc(values, func(x, y string) int { return len(y) - len(x) })
	if len(values) == 0 {
		return Text
	}
	return func(s string) string {
		for _, v := range values {
			s = Value(s, v)
		}
		return Text(s)
	}
}

func foldRegexp(s string) *regexp.Regexp { return regexp.MustCompile("(?i)" + regexp.QuoteMeta(s)) }
