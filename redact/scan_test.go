package redact_test

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/redact"
)

func TestSecretsScan(t *testing.T) {
	t.Parallel()
	const tok = "kcS-9f3a1c77e2b04d5a8e61"
	other := "hunter2-but-longer"
	set := redact.NewSecrets(tok, other)
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, tt := range []struct {
		name, text string
		want       []redact.Match
	}{
		{"nothing", "GET /docs?q=python", nil},
		{"as is", `{"url":"http://h/c?d=` + tok + `"}`, []redact.Match{{0, "as is"}}},
		{"base64 of the value", b64(tok), []redact.Match{{0, "base64"}}},
		{"base64 of a text holding it", b64("tok=" + tok + "&x=1"), []redact.Match{{0, "base64 inside"}}},
		{"hex of a text holding it", hex.EncodeToString([]byte("t=" + tok)), []redact.Match{{0, "hex"}}},
		{"percent-encoded", "d=" + url.PathEscape("a b/"+tok), []redact.Match{{0, "as is"}}},
		{"percent-encoded letters", "d=%6b%63%53-9f3a1c77e2b04d5a8e61", []redact.Match{{0, "url-escaped"}}},
		{"reversed", "r=" + reverse(tok), []redact.Match{{0, "reversed"}}},
		{"a half", "p=" + tok[:12], []redact.Match{{0, "split"}}},
		{"the other half", "p=" + tok[12:], []redact.Match{{0, "split"}}},
		{"too short a piece", "p=" + tok[:9], nil},
		{"two values", other + " and " + tok, []redact.Match{{0, "as is"}, {1, "as is"}}},
		{"upper-case hex", strings.ToUpper(hex.EncodeToString([]byte(tok))), []redact.Match{{0, "hex"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, set.Scan(tt.text)); diff != "" {
				t.Errorf("Scan(%q) (-want +got):\n%s", tt.text, diff)
			}
		})
	}
	if got := (*redact.Secrets)(nil).Scan(tok); got != nil {
		t.Errorf("nil set: %v", got)
	}
}

func reverse(s string) string {
	r := []rune(s)
	slices.Reverse(r)
	return string(r)
}

// BenchmarkScanPerCall is the scanner's cost per tool call: three secrets
// against the arguments of a typical call (a 300-byte command line) and
// a large one (a 16 KiB file write). It reports p50 and p99.
func BenchmarkScanPerCall(b *testing.B) {
	set := redact.NewSecrets("kcS-9f3a1c77e2b04d5a8e61", "ghp_0123456789abcdefghijABCDEFGHIJ012345", "sk-proj-abcdefghijklmnopqrstuvwxyz012345")
	for _, size := range []int{300, 16 << 10} {
		args := fmt.Sprintf(`{"command":"cd /workspace && %s"}`, strings.Repeat("grep -n def src/marshmallow/fields.py | head; ", size/48))
		b.Run(fmt.Sprintf("%dB", len(args)), func(b *testing.B) {
			var ds []time.Duration
			for b.Loop() {
				s := time.Now()
				if len(set.Scan(args)) != 0 {
					b.Fatal("found a secret")
				}
				ds = append(ds, time.Since(s))
			}
			sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
			b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// A value split in pieces (over lines, or with text between) is hidden
// piece by piece; text around and short fragments stay.
func TestHidePieces(t *testing.T) {
	const tok = "kcS-0123456789abcdefXYZ" // 23 bytes
	s := redact.NewSecrets(tok)
	for _, tt := range []struct{ name, in, want string }{
		{"two lines", "a=" + tok[:12] + "\nb=" + tok[12:] + "\n", "a=" + redact.Mask + "\nb=" + redact.Mask + "\n"},
		{"three pieces", tok[:10] + " | " + tok[10:20] + " | " + tok[13:], redact.Mask + " | " + redact.Mask + " | " + redact.Mask},
		{"adjacent to text", "x" + tok[2:15] + "y", "x" + redact.Mask + "y"},
		{"short piece stays", "id " + tok[:9] + " ok", "id " + tok[:9] + " ok"},
		{"nothing", "plain text with no token", "plain text with no token"},
		{"whole", "<" + tok + ">", "<" + redact.Mask + ">"},
	} {
		if got := s.Hide(tt.in); got != tt.want {
			t.Errorf("%s: Hide(%q) = %q, want %q", tt.name, tt.in, got, tt.want)
		}
	}
}

// What a new user's trial sent past the scanner: the value rot13'd
// (tr 'a-z' 'n-za-m'), and base32 of a line that holds it (grep | base32),
// in a URL's path. Scan finds both, Hide and Seal hide both, and Unseal
// restores the sealed call exactly.
func TestScanRot13AndBase32(t *testing.T) {
	const v = "sk-canary-0123456789abcdef"
	s := redact.NewSecrets(v)
	b32line := base32.StdEncoding.EncodeToString([]byte("API_TOKEN=" + v + "\n"))
	for _, tt := range []struct{ text, form string }{
		{"fx-pnanel-0123456789nopqrs", "rot13"},
		{"/b32/" + b32line, "base32"},
		{"/b32/" + strings.ToLower(b32line), "base32"},
		{"/b32/" + base32.StdEncoding.EncodeToString([]byte("TOKEN="+v+"\xff")), "base32 inside"},
		{"x " + base32.StdEncoding.EncodeToString([]byte(v)) + " y", "base32"},
	} {
		ms := s.Scan(tt.text)
		if len(ms) != 1 || !strings.HasPrefix(ms[0].Form, tt.form) {
			t.Errorf("Scan(%q) = %+v, want form %q", tt.text, ms, tt.form)
		}
		if h := s.Hide(tt.text); len(s.Scan(h)) > 0 || !strings.Contains(h, redact.Mask) {
			t.Errorf("Hide(%q) = %q", tt.text, h)
		}
		sealed := s.Seal(tt.text, []string{"API_TOKEN"})
		if len(s.Scan(sealed)) > 0 {
			t.Errorf("Seal(%q) = %q still carries the value", tt.text, sealed)
		}
		if tt.text != "/b32/"+strings.ToLower(b32line) {
			if got := s.Unseal(sealed, []string{"API_TOKEN"}); got != tt.text {
				t.Errorf("Unseal(Seal(%q)) = %q", tt.text, got)
			}
		}
	}
}
