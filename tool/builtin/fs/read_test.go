package fs_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/keel-run/keel/tool/builtin/fs"
)

func TestReadFile(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write("a.txt", "one\n\ttwo\nthree\n")
	e.write("crlf.py", "def f():\r\n\tx = 1\r\n")
	e.write("bom.txt", "\xef\xbb\xbfhello\n")
	e.write("noeol.txt", "a\nb")
	e.write("ctrl.txt", "bell\a esc\x1b[31m nul\x00?\n")
	e.write("latin1.txt", "caf\xe9\n")
	e.write("empty.txt", "")
	e.write("long.txt", strings.Repeat("x", 5000)+"\nshort\n")
	e.write("sub/f.txt", "f\n")
	for _, tt := range []struct {
		name string
		args map[string]any
		want string // exact content, or
		has  []string
		err  bool
	}{
		{name: "numbered", args: map[string]any{"path": "a.txt"}, want: "     1\tone\n     2\t\ttwo\n     3\tthree\n"},
		{name: "offset and limit", args: map[string]any{"path": "a.txt", "offset": 2, "limit": 1},
			want: "     2\t\ttwo\n[showing lines 2-2 of 3; continue with offset=3]\n"},
		{name: "absolute under mount", args: map[string]any{"path": "/workspace/a.txt", "offset": 3}, want: "     3\tthree\n"},
		{name: "crlf", args: map[string]any{"path": "crlf.py"}, has: []string{"     1\tdef f():\n     2\t\tx = 1\n", "CRLF line endings"}},
		{name: "bom", args: map[string]any{"path": "bom.txt"}, has: []string{"     1\thello\n", "byte-order mark"}},
		{name: "no newline at eof", args: map[string]any{"path": "noeol.txt"}, want: "     1\ta\n     2\tb\n[no newline at end of file]\n"},
		{name: "control characters escaped", args: map[string]any{"path": "ctrl.txt"}, err: true, has: []string{"binary"}},
		{name: "invalid utf8", args: map[string]any{"path": "latin1.txt"}, has: []string{"caf\uFFFD", "not valid UTF-8"}},
		{name: "empty", args: map[string]any{"path": "empty.txt"}, want: "empty.txt is empty (0 bytes)"},
		{name: "long line clipped", args: map[string]any{"path": "long.txt"}, has: []string{"[… line clipped: 5,000 bytes in all]", "     2\tshort", "clipped"}},
		{name: "directory listed", args: map[string]any{"path": "sub", "offset": 1}, want: "f.txt  (2 B)\n"},
		{name: "workspace root listed", args: map[string]any{"path": "."}, has: []string{"a.txt  (15 B)\n", "sub/\n"}},
		{name: "missing", args: map[string]any{"path": "nope.txt"}, err: true, has: []string{"no such file"}},
		{name: "offset past end", args: map[string]any{"path": "a.txt", "offset": 9}, err: true, has: []string{"offset 9 is past the end: a.txt has 3 lines"}},
		{name: "bad offset type", args: map[string]any{"path": "a.txt", "offset": "2"}, err: true, has: []string{"do not match its schema"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := e.call(fs.ReadName, tt.args)
			if tt.err {
				wantErr(t, r, tt.has...)
				return
			}
			if tt.want != "" && r.Content != tt.want {
				t.Errorf("content = %q, want %q", r.Content, tt.want)
			}
			wantOK(t, r, tt.has...)
		})
	}
	// A text file with a lone control character is text, shown escaped.
	e.write("esc.txt", "plain \x1b[1mbold\x1b[0m\n")
	wantOK(t, e.call(fs.ReadName, map[string]any{"path": "esc.txt"}), `plain \x1b[1mbold\x1b[0m`)
}

func TestReadFileBinary(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	exe, err := os.ReadFile("/bin/ls")
	if err != nil {
		t.Skip(err)
	}
	e.write("ls.bin", string(exe))
	e.write("img.png", "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
	e.write("data.gz", "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03")
	for path, kind := range map[string]string{"ls.bin": "ELF executable", "img.png": "PNG image", "data.gz": "gzip"} {
		r := e.call(fs.ReadName, map[string]any{"path": path})
		wantErr(t, r, "is a binary file", kind, " bytes")
	}
	r := e.call(fs.ReadName, map[string]any{"path": "ls.bin"})
	if !strings.Contains(r.Content, fmt.Sprintf("%d", len(exe)%1000)) {
		t.Errorf("size missing: %q", r.Content)
	}
}

// TestReadFileHuge pages a file far larger than the result bound.
func TestReadFileHuge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var b strings.Builder
	for i := 1; i <= 200_000; i++ {
		fmt.Fprintf(&b, "line %d of a big file\n", i)
	}
	e.write("big.txt", b.String())
	r := e.call(fs.ReadName, map[string]any{"path": "big.txt"})
	wantOK(t, r, "     1\tline 1 of", "of 200000 (the result size limit); continue with offset=")
	if n := utf8.RuneCountInString(r.Content); n > 10000 {
		t.Errorf("content has %d characters, bound 10000", n)
	}
	r = e.call(fs.ReadName, map[string]any{"path": "big.txt", "offset": 199_999})
	if r.Content != "199999\tline 199999 of a big file\n200000\tline 200000 of a big file\n" {
		t.Errorf("last page = %q", r.Content)
	}
}
