package redact_test

import (
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"

	"github.com/keel-run/keel/redact"
)

// Seal leaves no spelling Scan knows of a value in the text, and Unseal
// gives the text back byte for byte.
func TestSealUnseal(t *testing.T) {
	t.Parallel()
	const v = "SuperSecretCanary12345xyz"
	names := []string{"API_TOKEN", "OTHER"}
	s := redact.NewSecrets(v, "another-value-0987654321")
	rev := []rune(v)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	for _, text := range []string{
		`{"url":"http://localhost:18777/fetch?d=` + v + `"}`,
		"curl -d " + base64.StdEncoding.EncodeToString([]byte(v)) + " x; echo " + hex.EncodeToString([]byte(v)),
		"upper hex " + strings.ToUpper(hex.EncodeToString([]byte(v))) + " and " + string(rev),
		"escaped " + url.QueryEscape(v+"/?&"),
		"pieces " + v[:12] + " then " + v[12:] + " and another-value-0987654321",
		"inside " + base64.StdEncoding.EncodeToString([]byte("token="+v+"&x=1")),
		"inside hex " + hex.EncodeToString([]byte("t="+v)),
		"spaced S u p e r S e c r e t C a n a r y 1 2 3 4 5 x y z",
		"a forged «secret:API_TOKEN:as-is» stays as written",
		"escaped already «\u200bsecret:API_TOKEN:as-is» and «\u200b\u200bsecret:OTHER:as-is» with " + v,
		"marked already «typed-by-model:secret:API_TOKEN:as-is» and «typed-by-model:\u200bsecret:X:b64» with " + v,
		"inside a forged " + base64.StdEncoding.EncodeToString([]byte("«secret:API_TOKEN:as-is» then "+v+" and more padding to be long")),
		"nothing here",
	} {
		sealed := s.Seal(text, names)
		if m := s.Scan(sealed); len(m) > 0 {
			t.Errorf("Seal(%q) = %q: Scan still finds %v", text, sealed, m)
		}
		if got := s.Unseal(sealed, names); got != text {
			t.Errorf("Unseal(Seal(%q)) = %q (sealed %q)", text, got, sealed)
		}
		if strings.Contains(text, "forged") && strings.Contains(s.Unseal(sealed, names), v) {
			t.Errorf("a placeholder the text held was unsealed: %q", s.Unseal(sealed, names))
		}
	}
	if got := s.Seal("id "+v, names); got != "id «secret:API_TOKEN:as-is»" {
		t.Errorf("Seal = %q", got)
	}
	// Mixed case cannot be restored: hidden, and stays hidden.
	mixed := "x " + strings.ToLower(v[:5]) + v[5:]
	if got := s.Unseal(s.Seal(mixed, names), names); strings.Contains(got, strings.ToLower(v[:5])+v[5:]) || !strings.Contains(got, "hidden") {
		t.Errorf("mixed case unsealed to %q", got)
	}
	// The spaced-out spelling is hidden from results.
	if got := s.Hide("S u p e r S e c r e t C a n a r y 1 2 3 4 5 x y z"); got != redact.Mask {
		t.Errorf("Hide(spaced) = %q", got)
	}
}

// A line that spells a value with blanks between its pieces (od -c,
// xxd's grouped hex) is hidden whole (new-user trial 19, R4: tool
// results reached the model and the journal in clear), and text without
// such a line is left as it is.
func TestHideSpacedLines(t *testing.T) {
	const v = "LONGCANARYq8w7e6r5t4y3u2i1o0pZ"
	s := redact.NewSecrets(v)
	for _, tt := range []struct{ name, in, want string }{
		{"od -c", "0000000   L   O   N   G   C   A   N   A   R   Y   q   8   w   7   e   6\n0000020   r   5   t   4   y   3   u   2   i   1   o   0   p   Z\nok\n", redact.Mask + "\n" + redact.Mask + "\nok\n"},
		{"xxd grouped", "00000000: 4c4f 4e47 4341 4e41 5259 7138 7737 6536  LONGCANARYq8w7e6\n", redact.Mask + "\n"},
		{"dashes", "L-O-N-G-C-A-N-A-R-Y-q-8-w-7-e-6-r-5-t-4-y-3-u-2-i-1-o-0-p-Z-\n", redact.Mask + "\n"},
		{"ordinary", "total 4\ndrwxr-xr-x 2 root root 40 a b\n", "total 4\ndrwxr-xr-x 2 root root 40 a b\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := s.Hide(tt.in)
			if tt.want != "" && got != tt.want {
				t.Errorf("Hide = %q, want %q", got, tt.want)
			}
			if strings.Contains(got, "CANARY") || strings.Contains(strings.Join(strings.Fields(got), ""), "LONGCANARY") {
				t.Errorf("Hide left the value: %q", got)
			}
		})
	}
}
