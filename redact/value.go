package redact

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
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
	// "base64", "base64 unpadded", "base64url", "base64url unpadded",
	// "spaced", "rot13", "base32", "base32 unpadded".
	Name string
	// Text is the value so encoded.
	Text string
	// Fold: the form is also matched in any letter case (its letters
	// carry no information of the encoding: as is, reversed, hex).
	Fold bool
}

// Forms returns the spellings of value an echo is likely to use: the value
// itself, reversed, URL query-escaped, hex, base64 in the standard and
// URL alphabets, padded and not, spaced out (one space between its
// characters), rot13, and base32 padded and not; longest first, without duplicates. A
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
		{"spaced", spaced(value), true},
		{"rot13", rot13(value), true},
		{"base32", base32.StdEncoding.EncodeToString(b), true},
		{"base32 unpadded", base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b), true},
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

// rot13 is value with its ASCII letters rotated by 13 (tr 'A-Za-z'
// 'N-ZA-Mn-za-m').
func rot13(value string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case 'a' <= r && r <= 'z':
			return 'a' + (r-'a'+13)%26
		case 'A' <= r && r <= 'Z':
			return 'A' + (r-'A'+13)%26
		}
		return r
	}, value)
}

// spaced is value with one space between its characters ("S u p e r"),
// the way a program prints a value it was told not to print whole.
func spaced(value string) string {
	r := []rune(value)
	parts := make([]string, len(r))
	for i, c := range r {
		parts[i] = string(c)
	}
	return strings.Join(parts, " ")
}

// Match is a known secret value found in a text.
type Match struct {
	// Value is the index of the value in the arguments of [Find] or
	// [NewSecrets].
	Value int
	// Form is the name of the spelling it was found in ([Form.Name]).
	Form string
}

// Secrets is a set of values known to be secret, with their [Forms]
// computed once, for scanning or hiding in many texts. Its methods are
// safe for concurrent use; the zero value holds no value.
type Secrets struct {
	values []secret
	// parts indexes the values' pieces for Scan (scan.go).
	partsOnce sync.Once
	parts     map[string]int
}

type secret struct {
	index int
	forms []Form
	lower []string // the folded forms, lowered ("" for the others)
}

// NewSecrets returns the set of values (the order gives [Match.Value]);
// values shorter than [MinLen] are left out.
func NewSecrets(values ...string) *Secrets {
	s := &Secrets{}
	for i, v := range values {
		fs := Forms(v)
		if len(fs) == 0 {
			continue
		}
		sec := secret{index: i, forms: fs, lower: make([]string, len(fs))}
		for k, f := range fs {
			if f.Fold {
				sec.lower[k] = strings.ToLower(f.Text)
			}
		}
		s.values = append(s.values, sec)
	}
	// Longest value first, so that Hide hides a value that holds another
	// whole.
	slices.SortStableFunc(s.values, func(x, y secret) int { return len(y.forms[0].Text) - len(x.forms[0].Text) })
	return s
}

// Find reports which of the values text holds, in any of their forms:
// one match per value found (its longest form found), in the order the
// values were given.
func (s *Secrets) Find(text string) []Match {
	var lower string
	var out []Match
	for _, v := range s.values {
		for k, f := range v.forms {
			found := strings.Contains(text, f.Text)
			if !found && f.Fold {
				if lower == "" {
					lower = strings.ToLower(text)
				}
				found = strings.Contains(lower, v.lower[k])
			}
			if found {
				out = append(out, Match{Value: v.index, Form: f.Name})
				break
			}
		}
	}
	slices.SortFunc(out, func(x, y Match) int { return x.Value - y.Value })
	return out
}

// Hide returns text with every form of every value replaced by [Mask],
// every line that holds a value once its blanks are taken out
// ([Secrets.ScanSpaced]: od -c, xxd) replaced whole,
// every run of base64, hex or base32 whose decoded bytes hold a value,
// and every piece of at least [MinPartLen] bytes of a value of at least
// twice that (as is), the way a value split over several lines or calls
// arrives: each run of such pieces is one [Mask].
func (s *Secrets) Hide(text string) string {
	text = s.hideInside(text)
	for _, v := range s.values {
		for _, f := range v.forms {
			text = strings.ReplaceAll(text, f.Text, Mask)
			if f.Fold && strings.Contains(strings.ToLower(text), strings.ToLower(f.Text)) {
				text = foldRegexp(f.Text).ReplaceAllLiteralString(text, Mask)
			}
		}
	}
	// Last: a line spelling a value spaced out holds none of the
	// forms above once they are masked.
	return s.hideSpaced(s.hidePieces(text))
}

// hideInside replaces each run of base64, hex or base32 whose decoded
// bytes hold a value (at any offset: "base64 inside") by [Mask].
func (s *Secrets) hideInside(text string) string {
	var repl []string
	for _, run := range insideRuns(text) {
		if len(s.Find(run.decoded)) > 0 {
			repl = append(repl, run.text, Mask)
		}
	}
	if len(repl) == 0 {
		return text
	}
	return strings.NewReplacer(repl...).Replace(text)
}

// hidePieces replaces the pieces of values Scan reports as "split": every
// byte of a piece of at least MinPartLen bytes lies in one of its windows
// of that length, so the windows found in text, merged, are the pieces.
func (s *Secrets) hidePieces(text string) string {
	if len(text) < MinPartLen || len(s.values) == 0 {
		return text
	}
	parts := s.partIndex()
	if len(parts) == 0 {
		return text
	}
	var b strings.Builder
	done := 0 // text[:done] is written or masked
	for i := 0; i+MinPartLen <= len(text); i++ {
		if _, ok := parts[text[i:i+MinPartLen]]; !ok {
			continue
		}
		end := i + MinPartLen
		for end < len(text) {
			if _, ok := parts[text[end-MinPartLen+1:end+1]]; !ok {
				break
			}
			end++
		}
		b.WriteString(text[done:i])
		b.WriteString(Mask)
		done = end
		i = end - 1
	}
	if done == 0 {
		return text
	}
	b.WriteString(text[done:])
	return b.String()
}

// Find reports which of values s holds, in any of their [Forms] (see
// [Secrets.Find]); to scan many texts, make the [Secrets] once.
func Find(s string, values ...string) []Match { return NewSecrets(values...).Find(s) }

// Value returns s with every form of value ([Forms]) replaced by
// [Mask]: the text a resource that was given a credential sent back,
// before the model or the journal sees it.
func Value(s, value string) string { return NewSecrets(value).Hide(s) }

// Values returns a function that hides each of values as [Value] does,
// then likely secrets as [Text] does: for text that may hold anything
// and, among it, values known to be secret (credentials injected into a
// run).
func Values(values ...string) func(string) string {
	set := NewSecrets(values...)
	if len(set.values) == 0 {
		return Text
	}
	return func(s string) string { return Text(set.Hide(s)) }
}

func foldRegexp(s string) *regexp.Regexp { return regexp.MustCompile("(?i)" + regexp.QuoteMeta(s)) }
