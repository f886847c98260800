//go:build linux

package linux

import (
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// The stream replacer finds a value split across reads, prefers the
// longer of two pairs starting at the same byte, and passes the rest
// through unchanged.
func TestReplaceReader(t *testing.T) {
	pairs := [][2]string{{"SECRET", "ph"}, {"SECRET-LONG", "PH"}, {"abc", "x"}}
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{"nothing here", "nothing here"},
		{"a SECRET b", "a ph b"},
		{"SECRET-LONG and SECRETSECRET", "PH and phph"},
		{"ends with SECR", "ends with SECR"},
		{"ababcabc SECRET", "abxx ph"},
	} {
		for name, r := range map[string]io.Reader{"whole": strings.NewReader(tt.in), "byte by byte": iotest.OneByteReader(strings.NewReader(tt.in))} {
			rr := &replaceReader{r: io.NopCloser(r), pairs: pairs}
			got, err := io.ReadAll(iotest.OneByteReader(rr))
			if err != nil || string(got) != tt.want {
				t.Errorf("%s %q: got %q, %v; want %q", name, tt.in, got, err, tt.want)
			}
		}
	}
}
