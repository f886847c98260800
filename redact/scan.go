package redact

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"slices"
	"strings"
)

// MinPartLen is the shortest piece of a secret value that [Secrets.Scan]
// reports as a part of it ("split" form), and values shorter than twice
// it are never looked for in pieces: a shorter piece of a random token
// could be ordinary text.
const MinPartLen = 10

// Scan reports which of the values text carries, as [Secrets.Find] does,
// and also: inside percent-encoded text (decoded once), inside runs of
// base64, hex or base32 that decode to text holding a value at any offset
// ("base64 inside", "hex inside", "base32 inside"), and in part (a piece of at least [MinPartLen]
// bytes of a value of at least twice that, as is: "split"), the way an
// agent sends a secret over several calls. One match per value (the first
// way found), in the order the values were given. It is a guard for the
// cheap transformations, not a proof: a program can always encode a value
// some other way (docs/security.md).
func (s *Secrets) Scan(text string) []Match {
	if s == nil || len(s.values) == 0 || text == "" {
		return nil
	}
	found := map[int]string{}
	add := func(ms []Match, form string) {
		for _, m := range ms {
			if _, ok := found[m.Value]; !ok {
				if form != "" {
					m.Form = form
				}
				found[m.Value] = m.Form
			}
		}
	}
	add(s.Find(text), "")
	if len(found) < len(s.values) && strings.Contains(text, "%") {
		if u, err := url.PathUnescape(text); err == nil && u != text {
			add(s.Find(u), "url-escaped")
		} else if u, err := url.QueryUnescape(text); err == nil && u != text {
			add(s.Find(u), "url-escaped")
		}
	}
	if len(found) < len(s.values) {
		for _, run := range insideRuns(text) {
			add(s.Find(run.decoded), run.form)
		}
	}
	if len(found) < len(s.values) && len(text) >= MinPartLen {
		// Any piece of at least MinPartLen bytes holds one of the value's
		// windows of that length whole: look each window of text up.
		parts := s.partIndex()
		for i := 0; i+MinPartLen <= len(text) && len(parts) > 0; i++ {
			if v, ok := parts[text[i:i+MinPartLen]]; ok {
				if _, done := found[v]; !done {
					found[v] = "split"
				}
			}
		}
	}
	if len(found) == 0 {
		return nil
	}
	out := make([]Match, 0, len(found))
	for v, f := range found {
		out = append(out, Match{Value: v, Form: f})
	}
	slices.SortFunc(out, func(x, y Match) int { return x.Value - y.Value })
	return out
}

// insideRun is a run of encoded text and what it decodes to.
type insideRun struct {
	text, decoded, form string
}

// insideRuns returns the runs of base64, hex and base32 in text (up to 64
// of each) that decode, with their bytes: a base64 run in the first of
// its alphabets that decodes it, a hex run without an odd last digit, a
// base32 run (either case, padding dropped) cut to a whole number of
// bytes.
func insideRuns(text string) []insideRun {
	var out []insideRun
	for _, run := range runs(text, isBase64, 64) {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
			if b, err := enc.DecodeString(run); err == nil {
				out = append(out, insideRun{run, string(b), "base64 inside"})
				break
			}
		}
	}
	for _, run := range runs(text, isHex, 64) {
		if len(run)%2 == 1 {
			run = run[:len(run)-1]
		}
		if b, err := hex.DecodeString(run); err == nil {
			out = append(out, insideRun{run, string(b), "hex inside"})
		}
	}
	for _, run := range runs(text, isBase32, 64) {
		body := strings.ToUpper(strings.TrimRight(run, "="))
		for r := len(body) % 8; r == 1 || r == 3 || r == 6; r = len(body) % 8 {
			body = body[:len(body)-1] // not a whole number of bytes
		}
		if b, err := base32.StdEncoding.WithPadding(base32.NoPadding).DecodeString(body); err == nil {
			out = append(out, insideRun{run, string(b), "base32 inside"})
		}
	}
	return out
}

func isBase32(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '2' <= c && c <= '7' || c == '='
}

// runs returns up to n maximal runs of at least 16 bytes of which each
// is ok (base64 runs keep up to two "=" of padding).
func runs(text string, ok func(byte) bool, n int) []string {
	var out []string
	for i := 0; i < len(text) && len(out) < n; {
		if !ok(text[i]) {
			i++
			continue
		}
		j := i
		for j < len(text) && ok(text[j]) {
			j++
		}
		end := j
		for k := 0; k < 2 && end < len(text) && text[end] == '=' && ok('+'); k++ {
			end++
		}
		if j-i >= 16 {
			out = append(out, text[i:end])
		}
		i = max(end, i+1)
	}
	return out
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func isBase64(c byte) bool {
	return isHex(c) || 'g' <= c && c <= 'z' || 'G' <= c && c <= 'Z' || c == '+' || c == '/' || c == '_' || c == '-'
}

// partIndex maps every window of MinPartLen bytes of each value of at
// least twice that length to the value's index; made once.
func (s *Secrets) partIndex() map[string]int {
	s.partsOnce.Do(func() {
		s.parts = map[string]int{}
		for _, v := range s.values {
			val := ""
			for _, f := range v.forms {
				if f.Name == "as is" {
					val = f.Text
				}
			}
			if len(val) < 2*MinPartLen {
				continue
			}
			for i := 0; i+MinPartLen <= len(val); i++ {
				if _, ok := s.parts[val[i:i+MinPartLen]]; !ok {
					s.parts[val[i:i+MinPartLen]] = v.index
				}
			}
		}
	})
	return s.parts
}
