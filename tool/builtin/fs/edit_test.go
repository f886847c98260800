package fs_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/keel-run/keel/tool/builtin/fs"
)

// TestEditMatchCRLF is EDIT-MATCH/CRLF: LF old_string matches a CRLF
// file, and every CRLF, tab and other byte is kept.
func TestEditMatchCRLF(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write("crlf.py", "def f():\r\n\tx = 1\r\n\treturn x\r\n")
	r := e.call(fs.EditName, map[string]any{"path": "crlf.py", "old_string": "\tx = 1\n\treturn x", "new_string": "\tx = 2\n\treturn x"})
	wantOK(t, r, "replaced 1 occurrence (first at line 2); CRLF line endings kept")
	if got, want := e.read("crlf.py"), "def f():\r\n\tx = 2\r\n\treturn x\r\n"; got != want {
		t.Errorf("crlf.py = %q, want %q", got, want)
	}
}

func TestEditFile(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		file     string
		old, new string
		all      bool
		want     string // file afterwards
		msg      string // in the result
	}{
		{name: "simple", file: "a\nb\nc\n", old: "b", new: "B", want: "a\nB\nc\n", msg: "first at line 2"},
		// CRLF shapes.
		{name: "crlf new lines become crlf", file: "x\r\ny\r\n", old: "x\n", new: "x\nx2\nx3\n", want: "x\r\nx2\r\nx3\r\ny\r\n"},
		{name: "crlf old given with crlf", file: "x\r\ny\r\n", old: "x\r\ny", new: "z", want: "z\r\n"},
		{name: "crlf single line", file: "p = 1\r\nq = 2\r\n", old: "q = 2", new: "q = 3", want: "p = 1\r\nq = 3\r\n"},
		{name: "mixed endings keep the region's", file: "a\nb\r\nc\r\nd\n", old: "b\nc", new: "B\nC\nC2", want: "a\nB\r\nC\r\nC2\r\nd\n"},
		// Mixed endings (EDIT-FIDELITY/mixed-eol): lines the edit keeps keep
		// their own ending; new line breaks follow the lines the region
		// touches, the file's majority on a tie.
		{name: "mixed kept lines keep their endings", file: "a\r\nb\nc\r\n", old: "a\nb\n", new: "a\nb\nz\n", want: "a\r\nb\nz\r\nc\r\n"},
		{name: "mixed new line in an lf region", file: "x\ny\r\nz\n", old: "x\ny\nz\n", new: "x\nNEW\ny\nz\n", want: "x\nNEW\ny\r\nz\n"},
		{name: "mixed region inside an lf line", file: "a\r\nbcd\ne\r\n", old: "c", new: "1\n2", want: "a\r\nb1\n2d\ne\r\n"},
		{name: "mixed changed lf line stays lf", file: "p\r\nq\nr\r\n", old: "q\n", new: "Q\n", want: "p\r\nQ\nr\r\n"},
		{name: "mixed replace all per region", file: "k\r\nk\n", old: "k\n", new: "k2\n", all: true, want: "k2\r\nk2\n", msg: "replaced 2 occurrences"},
		{name: "mixed reordered lines", file: "1\r\n2\n3\r\n", old: "1\n2\n3\n", new: "3\n1\n2\n", want: "3\r\n1\r\n2\n"},
		{name: "mixed tie uses file majority", file: "a\nb\r\nc\n", old: "a\nb\n", new: "A\nB\n", want: "A\nB\nc\n"},
		{name: "lone cr is data", file: "a\rb\n", old: "a\rb", new: "ab", want: "ab\n"},
		{name: "bom kept", file: "\xef\xbb\xbfone\ntwo\n", old: "one", new: "1", want: "\xef\xbb\xbf1\ntwo\n"},
		// A BOM copied into old_string and new_string is the file's own,
		// never doubled; nor is one leading new_string in a file that has
		// one.
		{name: "bom in old and new", file: "\xef\xbb\xbfone\ntwo\n", old: "\ufeffone", new: "\ufeff1", want: "\xef\xbb\xbf1\ntwo\n"},
		{name: "bom only in new", file: "\xef\xbb\xbfone\ntwo\n", old: "one", new: "\ufeff1", want: "\xef\xbb\xbf1\ntwo\n"},
		{name: "bom in old and new, none in the file", file: "one\ntwo\n", old: "\ufeffone", new: "\ufeff1", want: "1\ntwo\n"},
		{name: "bom and crlf at file start", file: "\xef\xbb\xbfone\r\ntwo\r\n", old: "one\ntwo", new: "1\n2", want: "\xef\xbb\xbf1\r\n2\r\n"},
		{name: "tabs kept", file: "\tif x {\n\t\ty()\n\t}\n", old: "\t\ty()", new: "\t\tz()", want: "\tif x {\n\t\tz()\n\t}\n"},
		{name: "delete lines", file: "a\nb\nc\n", old: "b\n", new: "", want: "a\nc\n"},
		{name: "replace all", file: "foo(); foo();\nfoo\n", old: "foo", new: "bar", all: true, want: "bar(); bar();\nbar\n", msg: "replaced 3 occurrences"},
		{name: "replace all overlapping", file: "ababa", old: "aba", new: "X", all: true, want: "Xba", msg: "replaced 1 occurrence"},
		{name: "unicode", file: "naïve café\n", old: "café", new: "bistro", want: "naïve bistro\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.write("f", tt.file)
			r := e.call(fs.EditName, map[string]any{"path": "f", "old_string": tt.old, "new_string": tt.new, "replace_all": tt.all})
			wantOK(t, r, tt.msg)
			if got := e.read("f"); got != tt.want {
				t.Errorf("file = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestEditFidelityEOFNewline is EDIT-FIDELITY/EOF-newline: the end of
// the file (no newline, one, or a blank line) stays as it was unless the
// patch itself changes the last line's ending.
func TestEditFidelityEOFNewline(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, file, old, new, want string
	}{
		{"no newline, patch line 1", "a\nb", "a", "A", "A\nb"},
		{"blank line, patch line 1", "a\nb\n\n", "a", "A", "A\nb\n\n"},
		{"one newline, patch line 1", "a\nb\n", "a", "A", "A\nb\n"},
		{"no newline, patch last line", "a\nb", "b", "B", "a\nB"},
		{"blank line, patch last text line", "a\nb\n\n", "b", "B", "a\nB\n\n"},
		{"crlf no newline, patch line 1", "a\r\nb", "a", "A", "A\r\nb"},
		{"crlf blank line, patch line 1", "a\r\nb\r\n\r\n", "a", "A", "A\r\nb\r\n\r\n"},
		{"patch adds the final newline", "a\nb", "b", "b\n", "a\nb\n"},
		{"patch removes the final newline", "a\nb\n", "b\n", "b", "a\nb"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.write("f", tt.file)
			wantOK(t, e.call(fs.EditName, map[string]any{"path": "f", "old_string": tt.old, "new_string": tt.new}))
			if got := e.read("f"); got != tt.want {
				t.Errorf("file = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestEditMatchNonUnique is EDIT-MATCH/non-unique, overlapping matches
// included.
func TestEditMatchNonUnique(t *testing.T) {
	t.Parallel()
	block := "if err != nil {\n\treturn err\n}\n"
	for _, tt := range []struct {
		name, file, old, want string
	}{
		{"same block twice", "a()\n" + block + "b()\n" + block, block, "2 matches at lines 2,6; add context or set replace_all"},
		{"overlapping", "ababa\n", "aba", "2 matches at lines 1,1; add context or set replace_all"},
		{"overlapping lines", "x\nx\nx\n", "x\nx", "2 matches at lines 1,2; add context or set replace_all"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.write("f", tt.file)
			wantErr(t, e.call(fs.EditName, map[string]any{"path": "f", "old_string": tt.old, "new_string": "X"}), tt.want)
			if e.read("f") != tt.file {
				t.Errorf("file changed by a refused edit")
			}
		})
	}
}

// TestEditHints checks that a failed match says why when it can tell.
func TestEditHints(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, file, old, want string
	}{
		{"tabs vs spaces", "func f() {\n\treturn 1\n}\n", "func f() {\n    return 1\n}", "matches at line 1 only when indentation is ignored: the file indents that line with 1 tab, old_string with 4 spaces"},
		{"spaces vs tabs", "def f():\n    pass\n", "def f():\n\tpass", "the file indents that line with 4 spaces, old_string with 1 tab"},
		{"trailing whitespace", "a = 1   \nb = 2\n", "a = 1\nb = 2", "matches at line 1 only when trailing spaces and tabs are ignored"},
		{"line numbers copied", "alpha\nbeta\n", "     1\talpha\n     2\tbeta", "line-number prefixes of read_file's view"},
		{"escaped tab", "\tx := 1\n", `\tx := 1`, `the two characters \t or \n`},
		{"inner spacing", "x  =  1\n", "x = 1", "only when the spacing inside lines is ignored"},
		{"smart quotes", "say(\"hi\")\n", "say(\u201chi\u201d)", "only when quotes, dashes and non-breaking spaces are made plain"},
		{"eof newline", "last line", "last line\n", "the file has no newline at its end"},
		{"first line only", "start\nmiddle\nend\n", "start\nother\nend", "its first line occurs at line 1 but the lines after it differ"},
		{"plain not found", "hello\n", "goodbye", "old_string was not found in the file; read the file again"},
		{"crlf noted", "x = 1\r\n", "y = 1", "the file uses CRLF (\\r\\n) line endings and old_string uses LF"},
		{"empty old", "x\n", "", "old_string is empty"},
		{"no change", "x\n", "x", "the same"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.write("f", tt.file)
			repl := "NEW"
			if tt.name == "no change" {
				repl = tt.old
			}
			wantErr(t, e.call(fs.EditName, map[string]any{"path": "f", "old_string": tt.old, "new_string": repl}), tt.want)
			if e.read("f") != tt.file {
				t.Errorf("file changed by a failed edit")
			}
		})
	}
}

func TestEditRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write("bin", "ELF\x00\x01\x02")
	wantErr(t, e.call(fs.EditName, map[string]any{"path": "bin", "old_string": "ELF", "new_string": "X"}), "binary file")
	wantErr(t, e.call(fs.EditName, map[string]any{"path": "missing.txt", "old_string": "a", "new_string": "b"}), "no such file", "use write_file")
	os.Mkdir(filepath.Join(e.dir, "d"), 0o755)
	wantErr(t, e.call(fs.EditName, map[string]any{"path": "d", "old_string": "a", "new_string": "b"}), "is a directory")
	small := newEnvAt(t, t.TempDir(), &fs.Options{MaxEditBytes: 10})
	small.write("big", strings.Repeat("a", 11))
	wantErr(t, small.call(fs.EditName, map[string]any{"path": "big", "old_string": "a", "new_string": "b", "replace_all": true}), "more than edit_file's limit")
}

// TestEditNotIdempotent documents why edit_file is not declared
// idempotent: running the same call twice does not have the effect of
// running it once.
func TestEditNotIdempotent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write("f", "x\n")
	args := map[string]any{"path": "f", "old_string": "x", "new_string": "xx"}
	wantOK(t, e.call(fs.EditName, args))
	wantErr(t, e.call(fs.EditName, args), "matches") // now "x" occurs twice in "xx"
	if e.read("f") != "xx\n" {
		t.Errorf("f = %q", e.read("f"))
	}
}

func TestEditKeepsModeAndLinks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write("real/script.sh", "echo a\n")
	os.Chmod(filepath.Join(e.dir, "real/script.sh"), 0o755)
	os.Symlink("real/script.sh", filepath.Join(e.dir, "link.sh"))
	wantOK(t, e.call(fs.EditName, map[string]any{"path": "link.sh", "old_string": "a", "new_string": "b"}), "     1\techo b\n")
	if e.read("real/script.sh") != "echo b\n" {
		t.Errorf("target not edited")
	}
	if fi, _ := os.Stat(filepath.Join(e.dir, "real/script.sh")); fi.Mode().Perm() != 0o755 {
		t.Errorf("mode = %v, want 0755", fi.Mode())
	}
	if fi, _ := os.Lstat(filepath.Join(e.dir, "link.sh")); fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("link.sh is no longer a link")
	}
}

// A file with several hard links is edited in place: the same inode, so
// every link sees the change, with its mode and owner; write_file too.
func TestEditHardLinks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write("a.py", "x = 1\n")
	a, b := filepath.Join(e.dir, "a.py"), filepath.Join(e.dir, "b.py")
	if err := os.Link(a, b); err != nil {
		t.Skip(err)
	}
	os.Chmod(a, 0o640)
	asRoot := os.Geteuid() == 0
	if asRoot {
		if err := os.Chown(a, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := os.Stat(a)
	wantOK(t, e.call(fs.EditName, map[string]any{"path": "a.py", "old_string": "x = 1", "new_string": "x = 2"}),
		"edited in place: the file has 2 hard links")
	wantOK(t, e.call(fs.WriteName, map[string]any{"path": "b.py", "content": "x = 3\ny = 4\n"}))
	wantOK(t, e.call(fs.EditName, map[string]any{"path": "b.py", "old_string": "x = 3\ny = 4\n", "new_string": "z\n"}))
	for _, p := range []string{a, b} {
		got, _ := os.ReadFile(p)
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != "z\n" || !os.SameFile(fi, before) || fi.Mode().Perm() != 0o640 {
			t.Errorf("%s = %q, same inode %v, mode %v; want %q, the same inode, 0640", filepath.Base(p), got, os.SameFile(fi, before), fi.Mode().Perm(), "z\n")
		}
		if st := fi.Sys().(*syscall.Stat_t); asRoot && (st.Uid != 65534 || st.Gid != 65534) {
			t.Errorf("%s owner = %d:%d, want 65534:65534", filepath.Base(p), st.Uid, st.Gid)
		}
	}
	assertNoTemp(t, e.dir)
}

// A file owned by another user keeps its owner when edited (as root,
// through the rename; a user who cannot give files away writes in place).
func TestEditKeepsOwner(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("only root can make a file owned by another user here")
	}
	e := newEnv(t)
	e.write("o.txt", "old\n")
	p := filepath.Join(e.dir, "o.txt")
	if err := os.Chown(p, 65534, 65533); err != nil {
		t.Fatal(err)
	}
	wantOK(t, e.call(fs.EditName, map[string]any{"path": "o.txt", "old_string": "old", "new_string": "new"}))
	fi, _ := os.Stat(p)
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 || st.Gid != 65533 || e.read("o.txt") != "new\n" {
		t.Errorf("owner %d:%d, content %q", st.Uid, st.Gid, e.read("o.txt"))
	}
}
