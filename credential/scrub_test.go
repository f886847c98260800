package credential_test

import (
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/keel-run/keel/credential"
)

func TestScrub(t *testing.T) {
	const tok = "CanaryAccessTok77+/x"
	b := []byte(tok)
	for _, tt := range []struct{ name, echo string }{
		{"exact", tok},
		{"lower", strings.ToLower(tok)},
		{"upper", strings.ToUpper(tok)},
		{"reversed", "x/+77koTsseccAyranaC"},
		{"base64", base64.StdEncoding.EncodeToString(b)},
		{"base64 raw url", base64.RawURLEncoding.EncodeToString(b)},
		{"hex", hex.EncodeToString(b)},
		{"hex upper", strings.ToUpper(hex.EncodeToString(b))},
		{"query escaped", "CanaryAccessTok77%2B%2Fx"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := credential.Scrub("before "+tt.echo+" after", tok)
			if got != "before "+credential.Redacted+" after" {
				t.Errorf("Scrub(%q) = %q", tt.echo, got)
			}
		})
	}
	if got := credential.Scrub("nothing here", tok); got != "nothing here" {
		t.Errorf("Scrub changed text without the token: %q", got)
	}
	if got := credential.Scrub("abc", ""); got != "abc" {
		t.Errorf("Scrub with no token = %q", got)
	}
}
