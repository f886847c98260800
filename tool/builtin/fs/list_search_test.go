package fs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/tool/builtin/fs"
)

func TestListDirectory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write("b.txt", "12345")
	e.write("a/inner.go", "package a\n")
	e.write("a/deeper/x", "")
	e.write(".git/HEAD", "ref\n")
	e.write("z dir/é.txt", "")
	os.Symlink("a", filepath.Join(e.dir, "link"))
	os.Symlink("../outside", filepath.Join(e.dir, "bad"))
	wantOK(t, e.call(fs.ListName, map[string]any{}))
	r := e.call(fs.ListName, map[string]any{"path": "."})
	want := ".git/\na/\nb.txt  (5 B)\nbad -> ../outside  (leads outside the workspace or is broken)\nlink -> a\nz dir/\n"
	if r.Content != want {
		t.Errorf("list . = %q, want %q", r.Content, want)
	}
	r = e.call(fs.ListName, map[string]any{"path": ".", "depth": 3})
	want = ".git/\na/\n  deeper/\n    x  (0 B)\n  inner.go  (10 B)\nb.txt  (5 B)\nbad -> ../outside  (leads outside the workspace or is broken)\nlink -> a\nz dir/\n  é.txt  (0 B)\n"
	if r.Content != want {
		t.Errorf("list depth 3 = %q, want %q", r.Content, want)
	}
	wantOK(t, e.call(fs.ListName, map[string]any{"path": "link"}), "deeper/", "inner.go")
	wantErr(t, e.call(fs.ListName, map[string]any{"path": "b.txt"}), "not a directory", "use read_file")
	wantErr(t, e.call(fs.ListName, map[string]any{"path": "nope"}), "no such file")
	wantErr(t, e.call(fs.ListName, map[string]any{"depth": 99}), "do not match its schema")
	os.Mkdir(filepath.Join(e.dir, "empty"), 0o755)
	wantOK(t, e.call(fs.ListName, map[string]any{"path": "empty"}), "empty is empty")
}

func TestListDirectoryBounded(t *testing.T) {
	t.Parallel()
	e := newEnvAt(t, t.TempDir(), &fs.Options{MaxListEntries: 10})
	for i := range 25 {
		e.write(fmt.Sprintf("f%02d", i), "")
	}
	r := e.call(fs.ListName, map[string]any{})
	wantOK(t, r, "f09  (0 B)\n[… 15 more entries not shown")
	if strings.Contains(r.Content, "f10") {
		t.Errorf("listing not bounded: %q", r.Content)
	}
}

func TestSearchFiles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write(".gitignore", "build/\n*.log\n!keep.log\n")
	e.write("main.go", "package main\n\nfunc main() {\n\tTODO(\"x\")\n}\n")
	e.write("main_test.go", "package main // TODO test\n")
	e.write("README.md", "# TODO list\n")
	e.write("build/out.go", "TODO ignored\n")
	e.write("debug.log", "TODO ignored log\n")
	e.write("keep.log", "TODO kept log\n")
	e.write("sub/.gitignore", "gen.go\n")
	e.write("sub/gen.go", "TODO generated\n")
	e.write("sub/real.go", "TODO real\n")
	e.write("sub/deep/x_test.go", "TODO deep test\n")
	e.write(".git/config", "TODO in git\n")
	e.write("bin.dat", "TODO\x00binary")
	os.Symlink("main.go", filepath.Join(e.dir, "link.go"))
	for _, tt := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"all", map[string]any{"pattern": "TODO"},
			"README.md:1: # TODO list\nkeep.log:1: TODO kept log\nmain.go:4: \tTODO(\"x\")\nmain_test.go:1: package main // TODO test\nsub/deep/x_test.go:1: TODO deep test\nsub/real.go:1: TODO real\n" +
				"[6 matches in 6 files]\n[skipped: 3 ignored by .gitignore, 1 binary, 1 symbolic links (not followed)]"},
		{"glob by name", map[string]any{"pattern": "TODO", "glob": "*.go"},
			"main.go:4: \tTODO(\"x\")\nmain_test.go:1: package main // TODO test\nsub/deep/x_test.go:1: TODO deep test\nsub/real.go:1: TODO real\n[4 matches in 4 files]\n[skipped: 3 ignored by .gitignore, 1 symbolic links (not followed)]"},
		{"glob braces", map[string]any{"pattern": "TODO", "glob": "*.{md,log}"},
			"README.md:1: # TODO list\nkeep.log:1: TODO kept log\n[2 matches in 2 files]\n[skipped: 3 ignored by .gitignore, 1 symbolic links (not followed)]"},
		{"glob double star", map[string]any{"pattern": "TODO", "glob": "sub/**/*_test.go"},
			"sub/deep/x_test.go:1: TODO deep test\n[1 match in 1 file]\n[skipped: 3 ignored by .gitignore, 1 symbolic links (not followed)]"},
		{"subdirectory keeps parent gitignore", map[string]any{"pattern": "TODO", "path": "sub"},
			"sub/deep/x_test.go:1: TODO deep test\nsub/real.go:1: TODO real\n[2 matches in 2 files]\n[skipped: 1 ignored by .gitignore]"},
		{"one file", map[string]any{"pattern": "func", "path": "main.go"},
			"main.go:3: func main() {\n[1 match in 1 file]"},
		{"case insensitive", map[string]any{"pattern": "(?i)readme|^# todo", "path": "README.md"},
			"README.md:1: # TODO list\n[1 match in 1 file]"},
		{"no match", map[string]any{"pattern": "nothing-like-this"},
			"no matches for nothing-like-this in . (8 files searched)\n[skipped: 3 ignored by .gitignore, 1 binary, 1 symbolic links (not followed)]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := e.call(fs.SearchName, tt.args)
			if r.IsError || r.Content != tt.want {
				t.Errorf("search %v =\n%s\nwant\n%s", tt.args, r.Content, tt.want)
			}
		})
	}
	wantErr(t, e.call(fs.SearchName, map[string]any{"pattern": "(?<=x)y"}), "invalid pattern", "RE2")
	wantErr(t, e.call(fs.SearchName, map[string]any{"pattern": "x", "glob": "[a-"}), "invalid glob")
	wantErr(t, e.call(fs.SearchName, map[string]any{"pattern": "x", "path": "../"}), "outside the workspace")
}

func TestSearchFilesBounded(t *testing.T) {
	t.Parallel()
	e := newEnvAt(t, t.TempDir(), &fs.Options{MaxMatches: 5, MaxSearchBytes: 1000})
	var b strings.Builder
	for i := range 50 {
		fmt.Fprintf(&b, "match %d\n", i)
	}
	e.write("many.txt", b.String())
	e.write("huge.txt", strings.Repeat("match\n", 500))
	r := e.call(fs.SearchName, map[string]any{"pattern": "match"})
	wantOK(t, r, "many.txt:5: match 4\n[50 matches in 1 file; showing the first 5", "[skipped: 1 larger than 1000 B]")
	if strings.Contains(r.Content, "match 5\n") {
		t.Errorf("more than 5 matches shown: %q", r.Content)
	}
}
