package credential

import (
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Redacted replaces a token in text that Scrub redacts.
const Redacted = "[credential redacted]"

// Scrub replaces in s every form of token a hostile or careless resource
// is likely to echo: the token itself in any letter case, reversed, URL
// query-escaped, hex and base64 (standard and URL alphabets, padded or
// not). It is a guard, not a proof: a resource can always encode a token
// some other way, so credentials go only to the resources of their
// provider.
func Scrub(s, token string) string {
	if token == "" || s == "" {
		return s
	}
	b := []byte(token)
	rev := []rune(token)
	slices.Reverse(rev)
	forms := []string{token, string(rev), url.QueryEscape(token), hex.EncodeToString(b),
		base64.StdEncoding.EncodeToString(b), base64.RawStdEncoding.EncodeToString(b),
		base64.URLEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b)}
	// Longest first, so a padded form is replaced whole.
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	forms = slices.Compact(forms)
	for _, f := range forms {
		if len(f) < 8 {
			continue // too short to tell from ordinary text
		}
		if strings.Contains(s, f) {
			s = strings.ReplaceAll(s, f, Redacted)
		}
		// Case-insensitive for the forms whose letters carry no
		// information of the encoding (the token, reversed, hex).
		if f == token || f == string(rev) || f == hex.EncodeToString(b) {
			s = regexp.MustCompile("(?i)"+regexp.QuoteMeta(f)).ReplaceAllLiteralString(s, Redacted)
		}
	}
	return s
}
