package tool

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

func TestSanitize(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, in, want string
	}{
		{"plain", "hello\tworld\n", "hello\tworld\n"},
		{"unicode kept", "héllo 世界 🚀\n", "héllo 世界 🚀\n"},
		// OUTPUT-BYTES/NUL-breaks-JSON, the four repro inputs.
		{"nul", "A\x00B\x00C\n", `A\0B\0C` + "\n"},
		{"invalid utf8", "bad utf8: \xff\xfe\xc3\x28\n", "bad utf8: \uFFFD\uFFFD\uFFFD(\n"},
		{"ansi and cr", "\033[31mred\033[0m \033[2K\r progress\n", " progress\n"},
		{"elf", "\x7fELF\x02\x01\x01\x00", `\x7fELF\x02\x01\x01\0`},
		// Carriage returns.
		{"crlf", "one\r\ntwo\r\n", "one\ntwo\n"},
		{"progress redraw", "10%\r50%\r100%\ndone\n", "100%\ndone\n"},
		{"cr at end keeps text", "abc\r", "abc"},
		{"cr then crlf", "abc\r\r\n", "abc\n"},
		// Backspace overstrike (nroff bold and underline) and spinners.
		{"overstrike bold", "b\bbo\bol\bld\bd", "bold"},
		{"overstrike underline", "_\bu_\bl", "ul"},
		{"spinner", "|\b/\b-\b\\", `\`},
		// Escape sequences of every shape.
		{"csi with params", "\033[1;32;40mgreen\033[m", "green"},
		{"csi private", "\033[?25lhidden cursor\033[?25h", "hidden cursor"},
		{"osc title bel", "\033]0;my title\007text", "text"},
		{"osc hyperlink st", "\033]8;;https://example.com\033\\link\033]8;;\033\\", "link"},
		{"charset", "\033(Bx\033)0y", "xy"},
		{"two byte", "\0337saved\0338", "saved"},
		{"lone esc at end", "abc\033", "abc"},
		{"unterminated osc", "\033]0;title", ""},
		// Other control characters become visible.
		{"bell", "\x07ding", `\x07ding`},
		{"del", "a\x7fb", `a\x7fb`},
		{"vertical tab and form feed", "a\vb\fc", `a\x0bb\x0cc`},
		{"c1 control", "a\u0085b", `a\u0085b`},
		{"bidi override", "x\u202ey\u2066z", `x\u202ey\u2066z`},
		{"raw c1 csi byte", "a\x9b31mb", "a\uFFFD31mb"},
		{"binary line keeps cr visible", "\x00a\rb\x1b", `\0a\rb\x1b`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Sanitize(tt.in); got != tt.want {
				t.Errorf("Sanitize(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestEscape(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, in, want string
	}{
		{"plain", "a\tb\n", "a\tb\n"},
		{"cr kept visible", "a\r\nb\rc", `a\r` + "\n" + `b\rc`},
		{"ansi kept visible", "\033[31mred", `\x1b[31mred`},
		{"nul", "a\x00", `a\0`},
		{"backspace", "a\bb", `a\x08b`},
		{"invalid", "\xff", "\uFFFD"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Escape(tt.in); got != tt.want {
				t.Errorf("Escape(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// checkSafe reports why s is not safe to send to a model, or "".
func checkSafe(s string) string {
	if !utf8.ValidString(s) {
		return "invalid UTF-8"
	}
	for _, r := range s {
		if (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || isHiddenControl(r) {
			return "control character " + string(rune(r))
		}
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err.Error()
	}
	var back string
	if err := json.Unmarshal(b, &back); err != nil || back != s {
		return "does not round-trip through JSON"
	}
	return ""
}

func FuzzSanitize(f *testing.F) {
	for _, s := range []string{"A\x00B", "\033[31mred\033[0m\r x", "\xff\xfe\xc3\x28", "a\b\b\bb", "\033]8;;x\033\\y", "\u202e\u0085"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if why := checkSafe(Sanitize(s)); why != "" {
			t.Errorf("Sanitize(%q): %s", s, why)
		}
		if why := checkSafe(Escape(s)); why != "" {
			t.Errorf("Escape(%q): %s", s, why)
		}
	})
}
