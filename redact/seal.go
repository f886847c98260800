package redact

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
)

// Sealed placeholders stand for a known secret value in text that is
// journaled or shown but must still work when it is used again: a tool
// call's arguments. [Secrets.Seal] writes them, [Secrets.Unseal] puts the
// values back. A placeholder names the value (its name, never the value)
// and the spelling it stood in:
//
//	«secret:API_TOKEN:as-is»        the value as is (also reversed, url, hex, b64,
//	                                b64raw, b64url, b64urlraw, spaced; -upper: in
//	                                upper case)
//	«secret:API_TOKEN:piece-3-12»   12 bytes of the value from byte 3
//	«secret:API_TOKEN:hidden»       a spelling Seal cannot restore (mixed case)
//	«secret-in:b64:…»               a run of base64 or hex whose decoded bytes hold a
//	                                value: the decoded bytes sealed, then base64url
//
// Text that already looks like a placeholder is escaped first, visibly
// ([TypedMark] after «: «secret:API_TOKEN:as-is» written by a model
// becomes «typed-by-model:secret:API_TOKEN:as-is»), so that Unseal
// restores only what Seal wrote, and a person who reads the sealed text
// tells a placeholder the model typed from one standing for a value.
// Unseal removes the escape again. (Journals written before used a zero
// width space as the mark; Unseal removes it too.)
var (
	sealed   = onceRegexp(`«secret:([^«»]*):([a-z0-9-]+)»`)
	sealedIn = onceRegexp(`«secret-in:(b64|b64raw|b64url|b64urlraw|hex|b32|b32raw):([A-Za-z0-9_-]*)»`)
	// escaped is text Seal escaped: « and marks before secret.
	escaped   = onceRegexp("«((?:" + TypedMark + "|\u200b)*)secret")
	unescaped = onceRegexp("«(?:" + TypedMark + "|\u200b)((?:" + TypedMark + "|\u200b)*)secret")
)

// TypedMark follows « in placeholder-like text Seal did not write (the
// model typed it): such text reaches the tool as typed, never as a
// value.
const TypedMark = "typed-by-model:"

// formTokens name the spellings of [Forms] in placeholders.
var formTokens = map[string]string{"as is": "as-is", "reversed": "reversed", "url-escaped": "url", "hex": "hex",
	"base64": "b64", "base64 unpadded": "b64raw", "base64url": "b64url", "base64url unpadded": "b64urlraw", "spaced": "spaced",
	"rot13": "rot13", "base32": "b32", "base32 unpadded": "b32raw"}

var encodings = map[string]*base64.Encoding{"b64": base64.StdEncoding, "b64raw": base64.RawStdEncoding,
	"b64url": base64.URLEncoding, "b64urlraw": base64.RawURLEncoding}

func placeholder(name, token string) string { return "«secret:" + name + ":" + token + "»" }

// Seal returns text with every spelling of every value [Secrets.Scan]
// finds replaced by a placeholder naming it (names[i] names the i-th
// value given to [NewSecrets]): its [Forms], in upper case too, a piece
// of at least [MinPartLen] bytes, and a run of base64 or hex whose
// decoded bytes hold one. [Secrets.Unseal] restores the text exactly,
// except a spelling in mixed case ("hidden").
func (s *Secrets) Seal(text string, names []string) string {
	if s == nil || len(s.values) == 0 || text == "" {
		return text
	}
	return s.seal(text, names, 0, true)
}

// SealAgain is [Secrets.Seal] for text that may hold placeholders Seal
// wrote already (a reason or a summary copied from sealed text): it
// leaves placeholder-like text as it is, so sealing twice changes
// nothing. What it returns must never be given to [Secrets.Unseal]
// unless all of it came from Seal: a placeholder it did not write would
// be restored.
func (s *Secrets) SealAgain(text string, names []string) string {
	if s == nil || len(s.values) == 0 || text == "" {
		return text
	}
	return s.seal(text, names, 0, false)
}

func (s *Secrets) seal(text string, names []string, depth int, escape bool) string {
	if escape && strings.Contains(text, "«") {
		text = escaped().ReplaceAllString(text, "«"+TypedMark+"${1}secret")
	}
	name := func(i int) string {
		if i < len(names) && names[i] != "" {
			return names[i]
		}
		return "#" + strconv.Itoa(i)
	}
	for _, v := range s.values {
		for _, f := range v.forms {
			tok := formTokens[f.Name]
			text = strings.ReplaceAll(text, f.Text, placeholder(name(v.index), tok))
			if !f.Fold {
				continue
			}
			if up := strings.ToUpper(f.Text); up != f.Text {
				text = strings.ReplaceAll(text, up, placeholder(name(v.index), tok+"-upper"))
			}
			if strings.Contains(strings.ToLower(text), strings.ToLower(f.Text)) {
				text = foldRegexp(f.Text).ReplaceAllLiteralString(text, placeholder(name(v.index), "hidden"))
			}
		}
	}
	if depth == 0 {
		text = s.sealInside(text, names, escape)
	}
	return s.sealPieces(text, name)
}

// sealInside seals runs of base64 or hex whose decoded bytes hold a value.
func (s *Secrets) sealInside(text string, names []string, escape bool) string {
	var repl []string
	for _, run := range runs(text, isBase64, 64) {
		for _, tok := range []string{"b64", "b64raw", "b64url", "b64urlraw"} {
			if b, err := encodings[tok].DecodeString(run); err == nil {
				if len(s.Find(string(b))) > 0 {
					inner := s.seal(string(b), names, 1, escape)
					repl = append(repl, run, "«secret-in:"+tok+":"+base64.RawURLEncoding.EncodeToString([]byte(inner))+"»")
				}
				break
			}
		}
	}
	for _, run := range runs(text, isHex, 64) {
		if len(run)%2 == 1 {
			continue
		}
		if b, err := hex.DecodeString(run); err == nil && len(s.Find(string(b))) > 0 && strings.ToLower(run) == run {
			inner := s.seal(string(b), names, 1, escape)
			repl = append(repl, run, "«secret-in:hex:"+base64.RawURLEncoding.EncodeToString([]byte(inner))+"»")
		}
	}
	for _, run := range runs(text, isBase32, 64) {
		b, err := base32.StdEncoding.DecodeString(run)
		tok := "b32"
		if err != nil {
			b, err = base32.StdEncoding.WithPadding(base32.NoPadding).DecodeString(run)
			tok = "b32raw"
		}
		if err == nil && len(s.Find(string(b))) > 0 {
			inner := s.seal(string(b), names, 1, escape)
			repl = append(repl, run, "«secret-in:"+tok+":"+base64.RawURLEncoding.EncodeToString([]byte(inner))+"»")
		} else if ms := s.Scan(run); len(ms) > 0 && slices.ContainsFunc(ms, func(m Match) bool { return m.Form == "base32 inside" }) {
			// Lower case, or cut short: sealed, never restored.
			n := "#" + strconv.Itoa(ms[0].Value)
			if ms[0].Value < len(names) && names[ms[0].Value] != "" {
				n = names[ms[0].Value]
			}
			repl = append(repl, run, placeholder(n, "hidden"))
		}
	}
	if len(repl) == 0 {
		return text
	}
	return strings.NewReplacer(repl...).Replace(text)
}

// sealPieces replaces each run of pieces ([Secrets.Scan]'s "split") by a
// placeholder with its offset in the value, or "hidden" when the run is
// not one piece of one value.
func (s *Secrets) sealPieces(text string, name func(int) string) string {
	if len(text) < MinPartLen {
		return text
	}
	parts := s.partIndex()
	if len(parts) == 0 {
		return text
	}
	var b strings.Builder
	done := 0
	for i := 0; i+MinPartLen <= len(text); i++ {
		v, ok := parts[text[i:i+MinPartLen]]
		if !ok {
			continue
		}
		end := i + MinPartLen
		for end < len(text) {
			if _, ok := parts[text[end-MinPartLen+1:end+1]]; !ok {
				break
			}
			end++
		}
		tok := "hidden"
		if off := strings.Index(s.asIs(v), text[i:end]); off >= 0 {
			tok = "piece-" + strconv.Itoa(off) + "-" + strconv.Itoa(end-i)
		}
		b.WriteString(text[done:i])
		b.WriteString(placeholder(name(v), tok))
		done = end
		i = end - 1
	}
	if done == 0 {
		return text
	}
	b.WriteString(text[done:])
	return b.String()
}

// asIs returns the value of index i ("" when it is not held).
func (s *Secrets) asIs(i int) string {
	for _, v := range s.values {
		if v.index == i {
			for _, f := range v.forms {
				if f.Name == "as is" {
					return f.Text
				}
			}
		}
	}
	return ""
}

// Unseal returns text with the placeholders [Secrets.Seal] wrote for s's
// values (named by names as for Seal) replaced by the values again, in
// the spelling each stood in; a placeholder of another name, or
// "hidden", stays.
func (s *Secrets) Unseal(text string, names []string) string {
	if s == nil || !strings.Contains(text, "«") {
		return text
	}
	text = sealedIn().ReplaceAllStringFunc(text, func(m string) string {
		sub := sealedIn().FindStringSubmatch(m)
		inner, err := base64.RawURLEncoding.DecodeString(sub[2])
		if err != nil {
			return m
		}
		raw := []byte(s.unsealOne(string(inner), names))
		switch sub[1] {
		case "hex":
			return hex.EncodeToString(raw)
		case "b32":
			return base32.StdEncoding.EncodeToString(raw)
		case "b32raw":
			return base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(raw)
		}
		return encodings[sub[1]].EncodeToString(raw)
	})
	return s.unsealOne(text, names)
}

func (s *Secrets) unsealOne(text string, names []string) string {
	text = s.unsealPlaceholders(text, names)
	if strings.Contains(text, "«\u200b") || strings.Contains(text, "«"+TypedMark) {
		text = unescaped().ReplaceAllString(text, "«${1}secret")
	}
	return text
}

func (s *Secrets) unsealPlaceholders(text string, names []string) string {
	return sealed().ReplaceAllStringFunc(text, func(m string) string {
		sub := sealed().FindStringSubmatch(m)
		idx := -1
		for i, n := range names {
			if n == sub[1] {
				idx = i
			}
		}
		if n, ok := strings.CutPrefix(sub[1], "#"); ok && idx < 0 {
			idx, _ = strconv.Atoi(n)
		}
		val := s.asIs(idx)
		if val == "" {
			return m
		}
		tok := sub[2]
		if p, ok := strings.CutPrefix(tok, "piece-"); ok {
			o, l, _ := strings.Cut(p, "-")
			off, err1 := strconv.Atoi(o)
			n, err2 := strconv.Atoi(l)
			if err1 != nil || err2 != nil || off < 0 || n <= 0 || off+n > len(val) {
				return m
			}
			return val[off : off+n]
		}
		upper := false
		if t, ok := strings.CutSuffix(tok, "-upper"); ok {
			tok, upper = t, true
		}
		for _, f := range Forms(val) {
			if formTokens[f.Name] == tok {
				if upper {
					return strings.ToUpper(f.Text)
				}
				return f.Text
			}
		}
		if tok == "as-is" {
			return val
		}
		return m
	})
}
