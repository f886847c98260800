package tool

import (
	"strconv"
	"unicode/utf8"
)

// Sanitize returns s as a model should see command or web output: valid
// UTF-8 (each invalid byte becomes U+FFFD), ANSI/ECMA-48 escape sequences
// (colours, cursor moves, OSC titles and links) removed, terminal redraws
// collapsed (a bare carriage return keeps only the text written after it,
// a backspace erases the previous character, CRLF becomes LF), and every
// other control character shown as a visible escape: NUL as \0, other C0
// controls and DEL as \xNN, C1 controls and bidirectional-override
// characters as \uNNNN. Newlines and tabs are kept. The result is always
// safe inside a JSON string (docs/architecture.md, "Contract — tool results").
//
// Sanitize does not bound its result; use [Output] for that.
func Sanitize(s string) string {
	if isPlain(s) {
		return s
	}
	return string(appendSanitized(nil, []byte(s), modeDisplay))
}

// Escape returns s as valid UTF-8 with every control character except
// newline and tab shown as a visible escape (\0, \r, \xNN, \uNNNN) and
// each invalid byte replaced by U+FFFD. Unlike [Sanitize] it removes and
// collapses nothing, so a model sees that a file contains escape
// sequences or carriage returns; file tools use it for file contents.
func Escape(s string) string {
	if isPlain(s) {
		return s
	}
	return string(appendSanitized(nil, []byte(s), modeLiteral))
}

// isPlain reports whether s is printable ASCII plus newline and tab, the
// common case that needs no work.
func isPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 || c == 0x7f || (c < 0x20 && c != '\n' && c != '\t') {
			return false
		}
	}
	return true
}

type sanitizeMode int

const (
	modeDisplay sanitizeMode = iota // terminal output: strip ANSI, collapse CR/BS
	modeLiteral                     // file contents: escape everything visibly
)

// appendSanitized appends the sanitised form of src to dst, line by line.
func appendSanitized(dst, src []byte, mode sanitizeMode) []byte {
	for len(src) > 0 {
		i := indexByte(src, '\n')
		if i < 0 {
			dst, _ = appendLine(dst, src, mode)
			break
		}
		dst, _ = appendLine(dst, src[:i], mode)
		dst = append(dst, '\n')
		src = src[i+1:]
	}
	return dst
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// lineStats describes one sanitised line.
type lineStats struct {
	runes   int // runes appended
	escapes int // control characters escaped or invalid bytes replaced
}

// appendLine appends the sanitised form of one line (without its '\n').
func appendLine(dst, line []byte, mode sanitizeMode) ([]byte, lineStats) {
	var st lineStats
	start := len(dst)
	// A line with NUL bytes is binary data, not terminal output: its CR,
	// BS and ESC bytes are data too, so show them instead of applying them.
	if mode == modeDisplay && indexByte(line, 0) >= 0 {
		mode = modeLiteral
	}
	// A CRLF line ending is not a redraw.
	if mode == modeDisplay && len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	reset := false // a bare CR was seen; the next visible text starts the line over
	visible := func() {
		if reset {
			dst = dst[:start]
			st = lineStats{}
			reset = false
		}
	}
	for i := 0; i < len(line); {
		c := line[i]
		if c < utf8.RuneSelf {
			switch {
			case c == 0x1b && mode == modeDisplay:
				i += escapeLen(line[i:])
				continue
			case c == '\r' && mode == modeDisplay:
				reset = true
				i++
				continue
			case c == '\b' && mode == modeDisplay:
				if !reset && len(dst) > start {
					_, n := utf8.DecodeLastRune(dst[start:])
					dst = dst[:len(dst)-n]
				}
				i++
				continue
			case c == '\t' || (c >= 0x20 && c < 0x7f):
				visible()
				dst = append(dst, c)
			default:
				visible()
				dst = appendCtrl(dst, rune(c))
				st.escapes++
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(line[i:])
		visible()
		switch {
		case r == utf8.RuneError && n == 1:
			dst = append(dst, "\uFFFD"...)
			st.escapes++
		case isHiddenControl(r):
			dst = appendCtrl(dst, r)
			st.escapes++
		default:
			dst = append(dst, line[i:i+n]...)
		}
		i += n
	}
	st.runes = utf8.RuneCount(dst[start:])
	return dst, st
}

// isHiddenControl reports whether r is a C1 control or a character that
// reorders or hides text (bidirectional overrides and isolates, as in the
// "trojan source" attack).
func isHiddenControl(r rune) bool {
	return (r >= 0x80 && r <= 0x9f) ||
		(r >= 0x202a && r <= 0x202e) ||
		(r >= 0x2066 && r <= 0x2069) ||
		r == 0x200e || r == 0x200f || r == 0x061c
}

// appendCtrl appends the visible escape of a control rune.
func appendCtrl(dst []byte, r rune) []byte {
	switch {
	case r == 0:
		return append(dst, `\0`...)
	case r == '\r':
		return append(dst, `\r`...)
	case r < 0x80:
		dst = append(dst, `\x`...)
		return appendHex(dst, uint32(r), 2)
	default:
		dst = append(dst, `\u`...)
		return appendHex(dst, uint32(r), 4)
	}
}

func appendHex(dst []byte, v uint32, width int) []byte {
	s := strconv.FormatUint(uint64(v), 16)
	for i := len(s); i < width; i++ {
		dst = append(dst, '0')
	}
	return append(dst, s...)
}

// escapeLen returns the length of the escape sequence at the start of b
// (b[0] is ESC), following ECMA-48: CSI (ESC [ params intermediates
// final), string sequences (OSC, DCS, SOS, PM, APC, ended by BEL or
// ESC \), and two- or three-byte escapes (ESC intermediates final). An
// unterminated sequence runs to the end of b.
func escapeLen(b []byte) int {
	if len(b) < 2 {
		return len(b)
	}
	switch b[1] {
	case '[':
		for i := 2; i < len(b); i++ {
			c := b[i]
			switch {
			case c >= 0x40 && c <= 0x7e:
				return i + 1
			case c >= 0x20 && c <= 0x3f:
				continue
			default:
				// Not a valid CSI byte: drop the introducer only.
				return i
			}
		}
		return len(b)
	case ']', 'P', 'X', '^', '_':
		for i := 2; i < len(b); i++ {
			if b[i] == 0x07 {
				return i + 1
			}
			if b[i] == 0x1b && i+1 < len(b) && b[i+1] == '\\' {
				return i + 2
			}
		}
		return len(b)
	}
	i := 1
	for i < len(b) && b[i] >= 0x20 && b[i] <= 0x2f {
		i++
	}
	if i < len(b) && b[i] >= 0x30 && b[i] <= 0x7e {
		return i + 1
	}
	return i
}
