// Package visible makes text safe to show a person: every character that
// could hide or reorder what a person reads (control characters, escape
// sequences, bidirectional overrides, zero-width characters) becomes a
// visible escape. The web UI, the command line and the checks of names
// that people read (token names) use it.
package visible

import (
	"strconv"
	"strings"

	"github.com/keel-run/keel/tool"
)

// String returns s with every character that could hide or reorder what
// a person reads shown as a visible escape: control characters (except
// newline and tab), bidirectional overrides and isolates (as
// [tool.Escape] does), and zero-width and other invisible format
// characters (U+200B to U+200D, U+2060 to U+2064, U+FEFF, U+00AD, U+180E,
// U+034F, U+115F, U+1160, U+3164, U+FFA0, U+2028, U+2029) as \uNNNN. The
// web UI and the command line show approvals, reasons and names through
// it, so that "rm -rf ./data \u202e# pmt eht naelc\u202c" cannot read as
// something else. A carriage return before a newline (a CRLF line end)
// is a line end, not shown; a lone one is escaped.
func String(s string) string {
	if strings.Contains(s, "\r\n") {
		s = strings.ReplaceAll(s, "\r\n", "\n")
	}
	s = tool.Escape(s)
	if !strings.ContainsFunc(s, invisible) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if invisible(r) {
			b.WriteString(`\u`)
			h := strconv.FormatInt(int64(r), 16)
			b.WriteString(strings.Repeat("0", 4-len(h)))
			b.WriteString(h)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// invisible reports whether r is a character that renders as nothing (or
// as a line break) and so can hide text from a reader.
func invisible(r rune) bool {
	switch {
	case r >= 0x200b && r <= 0x200d, r >= 0x2060 && r <= 0x2064, r == 0x2028, r == 0x2029:
		return true
	case r == 0xfeff, r == 0x00ad, r == 0x180e, r == 0x034f, r == 0x115f, r == 0x1160, r == 0x3164, r == 0xffa0:
		return true
	}
	return false
}
