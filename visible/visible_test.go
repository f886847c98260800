package visible_test

import (
	"testing"

	"github.com/keel-run/keel/visible"
)

func TestString(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain text\twith tab\nand newline", "plain text\twith tab\nand newline"},
		{"red \x1b[31mx\x1b[0m", `red \x1b[31mx\x1b[0m`},
		{"rm -rf ./data \u202e# pmt eht naelc\u202c", `rm -rf ./data \u202e# pmt eht naelc\u202c`},
		{"zero\u200bwidth\ufeff", `zero\u200bwidth\ufeff`},
		{"soft\u00adhyphen", `soft\u00adhyphen`},
		{"bad \xff byte", "bad \ufffd byte"},
		{"line\u2028sep", `line\u2028sep`},
		// A CRLF line end is a line end (a task pasted from Windows); a
		// lone carriage return, which can overwrite a line, is shown.
		{"one\r\ntwo\r\n", "one\ntwo\n"},
		{"shown\rhidden", `shown\rhidden`},
		{"end\r", `end\r`},
	} {
		if got := visible.String(c.in); got != c.want {
			t.Errorf("String(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
