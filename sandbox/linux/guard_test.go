//go:build linux

package linux

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func TestConfigProblem(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, config string
		want         string // a substring of the problem; "" for inert
	}{
		{"git init", "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n", ""},
		{"git clone", "[core]\n\trepositoryformatversion = 0\n[remote \"origin\"]\n\turl = https://example.com/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n", ""},
		{"submodule gitdir", "[core]\n\tbare = false\n\tworktree = ../../../m\n[submodule \"x\"]\n\tactive = true\n\turl = ../x\n", ""},
		{"user and comments", "# c\n; c\n[user]\n\tname = \"A \\\"B\\\"\" # comment\n\temail = a@b\n\n[color \"status\"]\n\tadded = green\n", ""},
		{"crlf and bom", "\xef\xbb\xbf[core]\r\n\tbare = false\r\n", ""},
		{"case-insensitive names", "[CORE]\n\tBare = false\n[Remote \"o\"]\n\tURL = x\n", ""},
		{"empty", "", ""},
		{"bare key", "[core]\n\tbare\n", ""},
		{"fsmonitor", "[core]\n\tfsmonitor = \"id > /tmp/PWNED; false\"\n", "core.fsmonitor, which makes git run a program"},
		{"hooksPath", "[core]\n\thooksPath = /tmp/h\n", "core.hookspath"},
		{"pager", "[core]\n\tpager = evil\n", "core.pager"},
		{"alias", "[alias]\n\tst = !evil\n", "alias.st"},
		{"include", "[include]\n\tpath = ../x.cfg\n", "include.path"},
		{"includeIf", "[includeIf \"gitdir:/\"]\n\tpath = x\n", "includeif.gitdir:/.path"},
		{"filter driver", "[filter \"lfs\"]\n\tsmudge = evil %f\n", "filter.lfs.smudge"},
		{"textconv", "[diff \"pdf\"]\n\ttextconv = evil\n", "diff.pdf.textconv"},
		{"uploadpack", "[remote \"o\"]\n\tuploadpack = evil\n", "remote.o.uploadpack"},
		{"submodule update command", "[submodule \"x\"]\n\tupdate = !evil\n", "submodule.x.update"},
		{"unknown key", "[core]\n\tsomethingnew = 1\n", "not on Keel's list"},
		{"old-style subsection", "[remote.origin]\n\turl = x\n", ""},
		{"old-style subsection, bad key", "[filter.lfs]\n\tclean = evil\n", "filter.lfs.clean"},
		{"key on the header line", "[core] fsmonitor = evil\n", "section header"},
		{"key on the header line after a subsection", "[remote \"o\"] uploadpack = evil\n", "section header"},
		{"carriage return in a line", "[core]\r\tfsmonitor = evil\n", "carriage return"},
		{"NUL byte", "[core]\n\tbare = false\x00\n", "NUL"},
		{"continuation", "[core]\n\tbare = false \\\n\tfsmonitor = evil\n", "one line"},
		{"unterminated quote", "[core]\n\tbare = \"false\n", "one line"},
		{"key before any section", "bare = false\n", "outside any section"},
		{"garbage line", "[core]\n\t= x\n", "one line"},
		{"unterminated header", "[core\n", "section header"},
		{"quote in a subsection", "[remote \"a\\\"] b\"]\n\turl = x\n", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := configProblem([]byte(tt.config))
			if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
				t.Errorf("configProblem(%q) = %q, want %q", tt.config, got, tt.want)
			}
		})
	}
}

func TestConfigIncludes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		config string
		want   []string
	}{
		{"[include]\n\tpath = ../shared.cfg\n", []string{"../shared.cfg"}},
		{"[include]\n\tpath = \"a b.cfg\" # why\n[includeIf \"gitdir:/x/\"]\n\tpath = /abs/c.cfg\n", []string{"a b.cfg", "/abs/c.cfg"}},
		{"[include]\n\tpath = x\\\\y ; c\n", []string{"x\\y"}},
		{"[core]\n\tpath = no\n[includeIf]\n\tpath = no\n", nil},
		{"[include] path = hidden\n", nil},
	} {
		if got := configIncludes([]byte(tt.config)); !slices.Equal(got, tt.want) {
			t.Errorf("configIncludes(%q) = %q, want %q", tt.config, got, tt.want)
		}
	}
}

// guardFixture is a workspace with a repository, a nested repository
// whose config (the user's own) runs a program, and a worktree.
func guardFixture(t *testing.T) string {
	t.Helper()
	ws := t.TempDir()
	files := map[string]string{
		".git/HEAD":                    "ref: refs/heads/main\n",
		".git/config":                  "[core]\n\tbare = false\n",
		".git/hooks/pre-commit.sample": "#!/bin/sh\n",
		".git/objects/.keep":           "",
		".git/worktrees/w/HEAD":        "ref: refs/heads/w\n",
		".git/worktrees/w/commondir":   "../..\n",
		"tools/repo/.git/HEAD":         "ref: refs/heads/main\n",
		"tools/repo/.git/config":       "[core]\n\tpager = less\n",
		"src/main.go":                  "package main\n",
		"src/hooks/useThing.ts":        "export {}\n",
	}
	for p, c := range files {
		writeFile(t, filepath.Join(ws, p), c)
	}
	return ws
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func newTestGuard(t *testing.T, ws string, absent ...string) *guard {
	t.Helper()
	root, err := os.OpenRoot(ws)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	g, _, err := newGuard(root, ws, absent)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestGuardCheck(t *testing.T) {
	t.Parallel()
	evil := "[core]\n\tfsmonitor = evil\n"
	for _, tt := range []struct {
		name   string
		change func(t *testing.T, ws string)
		want   []string // quarantined paths
	}{
		{"nothing changed", func(t *testing.T, ws string) {}, nil},
		{"ordinary files", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, "src/config"), evil)
			writeFile(t, filepath.Join(ws, "src/hooks/pre-commit"), "x")
			writeFile(t, filepath.Join(ws, "src/HEAD"), "x") // HEAD alone does not make a git directory
		}, nil},
		{"git init and clone", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, "new/.git/HEAD"), "ref: refs/heads/main\n")
			writeFile(t, filepath.Join(ws, "new/.git/config"), "[core]\n\trepositoryformatversion = 0\n[remote \"origin\"]\n\turl = x\n")
			writeFile(t, filepath.Join(ws, "new/.git/hooks/pre-push.sample"), "#!/bin/sh\n")
			writeFile(t, filepath.Join(ws, ".git/worktrees/v/commondir"), "../..\n")
			writeFile(t, filepath.Join(ws, ".git/worktrees/v/HEAD"), "ref: refs/heads/v\n")
		}, nil},
		{"the user's own config changed", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, "tools/repo/.git/config"), "[core]\n\tpager = less\n\teditor = evil\n")
		}, []string{"tools/repo/.git/config"}},
		{"nested repository with a hook and a config", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, "sub/.git/config"), evil)
			writeFile(t, filepath.Join(ws, "sub/.git/hooks/post-checkout"), "x")
			writeFile(t, filepath.Join(ws, "sub/.git/hooks/post-checkout.sample"), "x")
		}, []string{"sub/.git/config", "sub/.git/hooks/post-checkout"}},
		{"commondir", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, ".git/commondir"), "../.cache/g\n")
			writeFile(t, filepath.Join(ws, ".git/worktrees/x/commondir"), "../../../.cache/g\n")
			writeFile(t, filepath.Join(ws, ".git/worktrees/x/HEAD"), "x\n")
			writeFile(t, filepath.Join(ws, ".cache/g/config"), evil) // no HEAD: found through the commondir
		}, []string{".cache/g/config", ".git/commondir", ".git/worktrees/x/commondir"}},
		{"bare repository anywhere, the root included", func(t *testing.T, ws string) {
			for _, d := range []string{".", "lib/b"} {
				writeFile(t, filepath.Join(ws, d, "HEAD"), "ref: refs/heads/main\n")
				writeFile(t, filepath.Join(ws, d, "objects/.keep"), "")
				writeFile(t, filepath.Join(ws, d, "config"), "[alias]\n\tx = !evil\n")
			}
		}, []string{"config", "lib/b/config"}},
		{"gitfile and symlink targets", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, "a/.git"), "gitdir: ../.git/objects/zz\n")
			writeFile(t, filepath.Join(ws, ".git/objects/zz/config"), evil)
			writeFile(t, filepath.Join(ws, "store/x/config"), evil)
			os.MkdirAll(filepath.Join(ws, "b"), 0o755)
			os.Symlink("../store/x", filepath.Join(ws, "b/.git"))
			writeFile(t, filepath.Join(ws, "c/.git"), "gitdir: "+filepath.Join(ws, "store/y")+"\n")
			writeFile(t, filepath.Join(ws, "store/y/config.worktree"), evil)
		}, []string{".git/objects/zz/config", "store/x/config", "store/y/config.worktree"}},
		{"links and odd files", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, "d/.git/HEAD"), "x")
			os.Symlink("/etc/passwd", filepath.Join(ws, "d/.git/config"))
			os.Symlink("/tmp", filepath.Join(ws, "d/.git/hooks"))
			writeFile(t, filepath.Join(ws, "e/.git/config"), strings.Repeat("#", maxConfig+1))
			// FIFOs must neither hang the check nor pass it.
			os.MkdirAll(filepath.Join(ws, "f/.git"), 0o755)
			os.MkdirAll(filepath.Join(ws, "h"), 0o755)
			for _, p := range []string{"f/.git/config", "f/.git/commondir", "h/.git"} {
				if err := unix.Mkfifo(filepath.Join(ws, p), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}, []string{"d/.git/config", "d/.git/hooks", "e/.git/config", "f/.git/commondir", "f/.git/config", "h/.git"}},
		{"gitfiles git would follow and the check would not read", func(t *testing.T, ws string) {
			// git strips only trailing newlines, so a padded gitdir line
			// still sends it to the target.
			writeFile(t, filepath.Join(ws, "big/.git"), "gitdir: ../.git/objects/zz\n"+strings.Repeat("\n", maxGitFile))
			writeFile(t, filepath.Join(ws, ".git/objects/zz/config"), evil)
			writeFile(t, filepath.Join(ws, "small/.git"), "gitdir: ../.git/modules/small\n")
		}, []string{"big/.git"}},
		{"deeper than the walk goes", func(t *testing.T, ws string) {
			deep := ws
			for range 30 {
				deep = filepath.Join(deep, strings.Repeat("d", 110))
			}
			writeFile(t, filepath.Join(deep, "x/.git/config"), evil)
		}, []string{strings.TrimPrefix(strings.Repeat("/"+strings.Repeat("d", 110), 28), "/")}},
		{"protected path created", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, "deploy/new.env"), "x")
		}, []string{"deploy/new.env"}},
		{"unchanged .keel is not looked at", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, ".keel/x/.git/config"), evil)
		}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ws := guardFixture(t)
			g := newTestGuard(t, ws, "deploy/new.env")
			tt.change(t, ws)
			qs, warns := g.check()
			var got []string
			for _, q := range qs {
				got = append(got, q.Path)
				if q.Err != nil || !strings.HasPrefix(q.MovedTo, ".keel/quarantine/") {
					t.Errorf("%s not moved: %+v", q.Path, q)
				}
				if _, err := os.Lstat(filepath.Join(ws, q.Path)); err == nil {
					t.Errorf("%s is still there", q.Path)
				}
				if _, err := os.Lstat(filepath.Join(ws, q.MovedTo)); err != nil {
					t.Errorf("%s is not at %s: %v", q.Path, q.MovedTo, err)
				}
			}
			slices.Sort(got)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("quarantined (-want +got):\n%s\nwarnings: %v", diff, warns)
			}
			// Trial 10, N18: the quarantine is not listed by the
			// person's git status (.keel/ holds only ignored files).
			if b, err := os.ReadFile(filepath.Join(ws, ".keel/.gitignore")); len(qs) > 0 && (err != nil || !strings.HasSuffix(string(b), "\n*\n")) {
				t.Errorf(".keel/.gitignore after a quarantine = %q, %v; want it to ignore everything", b, err)
			}
			if _, err := exec.LookPath("git"); err == nil && len(qs) > 0 {
				out, err := exec.Command("git", "-C", ws, "status", "--porcelain", "--untracked-files=normal", "--", ".keel").CombinedOutput()
				if err == nil && len(out) > 0 {
					t.Errorf("git status lists the quarantine:\n%s", out)
				}
			}
			if again, _ := g.check(); len(again) != 0 {
				t.Errorf("a second check quarantined %v", again)
			}
			if b, err := os.ReadFile(filepath.Join(ws, "tools/repo/.git/config")); len(tt.want) == 0 && (err != nil || string(b) != "[core]\n\tpager = less\n") {
				t.Errorf("the user's own config was touched: %q %v", b, err)
			}
		})
	}
}

// TestGuardStaleState is the crash path: a guard's persisted state is
// checked by the next sandbox once its process is gone, and left alone
// while it lives.
func TestGuardStaleState(t *testing.T) {
	t.Parallel()
	ws := guardFixture(t)
	g := newTestGuard(t, ws)
	if err := g.persist(); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ws, "sub/.git/config"), "[core]\n\tfsmonitor = evil\n")
	root := g.root
	if qs, _ := recoverStale(root, ws, stateStore{root: root, dir: guardDir, inWorkspace: true}); len(qs) != 0 {
		t.Fatalf("a live sandbox's state was treated as stale: %v", qs)
	}
	// Make the state look like a dead process's.
	data, err := root.ReadFile(g.record)
	if err != nil {
		t.Fatal(err)
	}
	dead := strings.Replace(string(data), fmt.Sprintf(`"pid":%d`, os.Getpid()), `"pid":999999999`, 1)
	if err := root.WriteFile(g.record, []byte(dead), 0o644); err != nil {
		t.Fatal(err)
	}
	qs, _ := recoverStale(root, ws, stateStore{root: root, dir: guardDir, inWorkspace: true})
	if len(qs) != 1 || qs[0].Path != "sub/.git/config" {
		t.Errorf("recoverStale = %+v, want sub/.git/config quarantined", qs)
	}
	if names, _ := readDirNames(root, guardDir); len(names) != 0 {
		t.Errorf("stale state left: %v", names)
	}
}

// BenchmarkGuardCheck measures one check of a workspace with about
// 100,000 entries in 10,000 directories (the shape of a node_modules
// tree) when nothing changed, the work added to every command;
// BenchmarkGuardFirstWalk the full walk at the start.
func BenchmarkGuardCheck(b *testing.B) {
	ws := b.TempDir()
	for i := range 100 {
		for j := range 100 {
			d := filepath.Join(ws, "node_modules", fmt.Sprintf("p%d", i), fmt.Sprintf("d%d", j))
			if err := os.MkdirAll(d, 0o755); err != nil {
				b.Fatal(err)
			}
			for k := range 9 {
				if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d.js", k)), nil, 0o644); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		b.Fatal(err)
	}
	defer root.Close()
	g, _, err := newGuard(root, ws, nil)
	if err != nil {
		b.Fatal(err)
	}
	// The tree was made just now: with the default margin every directory
	// would be racy and read again. Measure the steady state.
	g.margin = 0
	g.check()
	b.ResetTimer()
	for b.Loop() {
		if qs, _ := g.check(); len(qs) != 0 {
			b.Fatal(qs)
		}
	}
}

// BenchmarkGuardCheckSmall is BenchmarkGuardCheck on a workspace the
// size of a small repository (1,000 files in 100 directories), the cost
// of the periodic check in the common case.
func BenchmarkGuardCheckSmall(b *testing.B) {
	ws := b.TempDir()
	for i := range 100 {
		d := filepath.Join(ws, "src", fmt.Sprintf("p%d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
		for k := range 10 {
			if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d.go", k)), nil, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		b.Fatal(err)
	}
	defer root.Close()
	g, _, err := newGuard(root, ws, nil)
	if err != nil {
		b.Fatal(err)
	}
	g.margin = 0
	g.check()
	b.ResetTimer()
	for b.Loop() {
		if qs, _ := g.check(); len(qs) != 0 {
			b.Fatal(qs)
		}
	}
}

func BenchmarkGuardFirstWalk(b *testing.B) {
	ws := b.TempDir()
	for i := range 100 {
		for j := range 100 {
			d := filepath.Join(ws, "node_modules", fmt.Sprintf("p%d", i), fmt.Sprintf("d%d", j))
			if err := os.MkdirAll(d, 0o755); err != nil {
				b.Fatal(err)
			}
			for k := range 9 {
				if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d.js", k)), nil, 0o644); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		b.Fatal(err)
	}
	defer root.Close()
	b.ResetTimer()
	for b.Loop() {
		if _, _, err := newGuard(root, ws, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// A rebase, cherry-pick or revert left in progress whose todo list runs
// a command, or whose merge strategy names a program, is quarantined:
// the person's git rebase --continue on the host would run it (fresh-user
// trial 7, P11: the run wrote .git/rebase-merge by hand with an exec
// line, and git rebase --continue ran it). A rebase stopped with picks
// and edits only is left to go on. Real git makes and continues them.
func TestGuardRebaseLeftInProgress(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	home := t.TempDir()
	run := func(t *testing.T, dir, line string) (string, error) {
		t.Helper()
		cmd := exec.Command("bash", "-c", line)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_EDITOR=true")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, tt := range []struct {
		name, change string
		quarantined  string // "" when nothing is
	}{
		{"an exec line written by hand", `h=$(git rev-parse HEAD); mkdir -p .git/rebase-merge && cd .git/rebase-merge &&
printf "exec touch $MARK\n" > git-rebase-todo && echo refs/heads/main > head-name && echo $h > onto && echo $h > orig-head && touch interactive && : > done && echo 0 > msgnum && echo 1 > end`, ".git/rebase-merge"},
		{"an exec line added to a real rebase", `GIT_SEQUENCE_EDITOR='sed -i 1s/^pick/edit/' git rebase -q -i HEAD~2 && printf "x\ttouch $MARK\n" >> .git/rebase-merge/git-rebase-todo`, ".git/rebase-merge"},
		{"a real rebase stopped at an edit", `GIT_SEQUENCE_EDITOR='sed -i 1s/^pick/edit/' git rebase -q -i HEAD~2`, ""},
		{"a strategy that names a program", `GIT_SEQUENCE_EDITOR='sed -i 1s/^pick/edit/' git rebase -q -i HEAD~2 && echo evil > .git/rebase-merge/strategy`, ".git/rebase-merge"},
		{"a cherry-pick stopped on a conflict", `git checkout -q -b side HEAD~2 && echo side > a.txt && git commit -qam side && echo b > b.txt && git add b.txt && git commit -qm b && git checkout -q main && ! git cherry-pick side~1 side >/dev/null 2>&1`, ""},
		{"a cherry-pick whose todo runs a command", `git checkout -q -b side HEAD~2 && echo side > a.txt && git commit -qam side && echo b > b.txt && git add b.txt && git commit -qm b && git checkout -q main && ! git cherry-pick side~1 side >/dev/null 2>&1; printf "exec touch $MARK\n" >> .git/sequencer/todo`, ".git/sequencer"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir()
			mark := filepath.Join(t.TempDir(), "pwned")
			if out, err := run(t, ws, "git init -q -b main . && for i in 1 2 3; do echo $i > a.txt; git add a.txt; git commit -qm c$i; done"); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			g := newTestGuard(t, ws)
			if out, err := run(t, ws, "MARK="+mark+"; "+tt.change); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			qs, _ := g.check()
			var got []string
			for _, q := range qs {
				got = append(got, q.Path)
				if !strings.Contains(q.Reason, "left in progress") {
					t.Errorf("reason %q", q.Reason)
				}
			}
			if want := []string{tt.quarantined}; tt.quarantined == "" && len(got) != 0 || tt.quarantined != "" && !slices.Equal(got, want) {
				t.Fatalf("quarantined %v, want %q", got, tt.quarantined)
			}
			// What the person would type on the host next.
			cont := "git rebase --continue"
			if strings.Contains(tt.name, "cherry-pick") {
				cont = "git add a.txt && git -c core.editor=true cherry-pick --continue"
			}
			out, err := run(t, ws, cont)
			if _, serr := os.Stat(mark); serr == nil {
				t.Fatalf("%s ran the planted command\n%s", cont, out)
			}
			if tt.quarantined == "" && err != nil {
				t.Errorf("%s after a rebase the guard left: %v\n%s", cont, err, out)
			}
		})
	}
}
