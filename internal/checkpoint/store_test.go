package checkpoint_test

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/internal/checkpoint"
)

// tree reads every file under dir (except .git and ignored build/) as
// path → mode and content, links as their target.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			m[rel] = "link " + target
			return err
		}
		b, err := os.ReadFile(p)
		m[rel] = fi.Mode().Perm().String() + " " + string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func needGit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
}

func TestCheckpointRestoreIsByteIdentical(t *testing.T) {
	needGit(t)
	ctx := t.Context()
	ws := t.TempDir()
	store := filepath.Join(t.TempDir(), "checkpoints")
	write(t, ws, "a.txt", "one\r\ntwo\r\n") // CRLF kept as is
	write(t, ws, "bin.dat", "\x00\x01\xff")
	write(t, ws, "nonl.txt", "x")
	write(t, ws, "sub/deep/keep.go", "package deep\n")
	write(t, ws, ".gitignore", "build/\n")
	write(t, ws, "build/out.o", "ignored\n")
	// Attributes that would change bytes or run a program if git
	// honoured them.
	write(t, ws, ".gitattributes", "* text eol=crlf filter=evil ident\n")
	if err := os.Chmod(filepath.Join(ws, "nonl.txt"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub/deep/keep.go", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	write(t, ws, ".keel/old-artifact", "keel's own\n")
	cp, err := checkpoint.OpenCheckpoints(ctx, store, ws)
	if err != nil {
		t.Fatal(err)
	}
	first, err := cp.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := tree(t, ws)

	// The agent works: edits, deletes, adds, replaces a file by a link.
	write(t, ws, "a.txt", "changed\n")
	os.Remove(filepath.Join(ws, "bin.dat"))
	write(t, ws, "new/file.txt", "new\n")
	os.RemoveAll(filepath.Join(ws, "sub"))
	write(t, ws, "build/out.o", "rebuilt\n")
	second, err := cp.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Fatal("a changed workspace gave the same tree")
	}
	again, err := cp.Snapshot(ctx)
	if err != nil || again != second {
		t.Fatalf("unchanged workspace: tree %s, want %s (%v)", again, second, err)
	}
	changes, err := cp.Changes(ctx, first, second)
	if err != nil {
		t.Fatal(err)
	}
	wantChanges := []checkpoint.FileChange{{Path: "a.txt", Status: checkpoint.Modified}, {Path: "bin.dat", Status: checkpoint.Deleted},
		{Path: "new/file.txt", Status: checkpoint.Added}, {Path: "sub/deep/keep.go", Status: checkpoint.Deleted}}
	if d := cmp.Diff(wantChanges, changes); d != "" {
		t.Errorf("changes (-want +got):\n%s", d)
	}

	before, restored, err := cp.Restore(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if before != second || len(restored) != 4 {
		t.Errorf("restore replaced %s with %d changes, want %s and 4", before, len(restored), second)
	}
	got := tree(t, ws)
	// Ignored files are not snapshotted: the rebuilt one stays.
	want["build/out.o"] = got["build/out.o"]
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("restored workspace (-want +got):\n%s", d)
	}
	if _, err := os.Stat(filepath.Join(ws, "new")); !os.IsNotExist(err) {
		t.Errorf("directory of a removed file left: %v", err)
	}

	// The restore is undone by restoring the tree it replaced.
	if _, _, err := cp.Restore(ctx, before); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ws, "new/file.txt")); err != nil {
		t.Errorf("undo of the restore: %v", err)
	}

	// A fork's workspace gets the files of a snapshot.
	dir := filepath.Join(t.TempDir(), "fork")
	fk, err := cp.Materialize(ctx, first, dir)
	if err != nil {
		t.Fatal(err)
	}
	forked := tree(t, dir)
	delete(want, "build/out.o")
	delete(want, ".keel/old-artifact")
	if d := cmp.Diff(want, forked); d != "" {
		t.Errorf("materialized (-want +got):\n%s", d)
	}
	if tr, err := fk.Snapshot(ctx); err != nil || tr != first {
		t.Errorf("fork snapshot %s, want %s (%v)", tr, first, err)
	}
}

func TestCheckpointPrune(t *testing.T) {
	needGit(t)
	ctx := t.Context()
	ws := t.TempDir()
	store := filepath.Join(t.TempDir(), "checkpoints")
	cp, err := checkpoint.OpenCheckpoints(ctx, store, ws)
	if err != nil {
		t.Fatal(err)
	}
	var trees []string
	for i, run := range []string{"old", "kept"} {
		write(t, ws, "f.txt", strings.Repeat(run, 1000+i))
		tr, err := cp.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cp.Keep(ctx, "refs/keel/runs/"+run, tr, "", run); err != nil {
			t.Fatal(err)
		}
		trees = append(trees, tr)
	}
	dropped, err := checkpoint.Prune(ctx, store, 0, func(id string) bool { return id == "old" })
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"old"}, dropped); d != "" {
		t.Errorf("dropped (-want +got):\n%s", d)
	}
	if cp.Has(ctx, trees[0]) {
		t.Error("the pruned run's snapshot is still in the store")
	}
	if !cp.Has(ctx, trees[1]) {
		t.Error("the kept run's snapshot is gone")
	}
	if _, _, err := cp.Restore(ctx, trees[0]); err == nil || !strings.Contains(err.Error(), "pruned") {
		t.Errorf("restore of a pruned snapshot: %v", err)
	}
	// The next snapshot works without the dropped index.
	write(t, ws, "g.txt", "more")
	if _, err := cp.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
}

// In a git repository, a snapshot leaves out what the repository's own
// git ignores, also by rules the store cannot read in the work tree
// (.git/info/exclude, core.excludesFile), but never a file git tracks;
// a path with pattern characters is matched literally.
func TestCheckpointLeavesOutWhatGitIgnores(t *testing.T) {
	needGit(t)
	ctx := t.Context()
	ws := t.TempDir()
	write(t, ws, "a.py", "print(1)\n")
	write(t, ws, "tracked.log", "kept: git tracks it\n")
	run(t, ws, "init", "-q")
	run(t, ws, "add", "-A")
	run(t, ws, "commit", "-q", "-m", "base")
	global := filepath.Join(t.TempDir(), "ignore")
	if err := os.WriteFile(global, []byte("__pycache__/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, ws, "config", "core.excludesFile", global)
	write(t, ws, ".git/info/exclude", "*.log\na\\*b\n")
	write(t, ws, "__pycache__/a.cpython-311.pyc", "\x00compiled")
	write(t, ws, "sub/__pycache__/b.cpython-311.pyc", "\x00compiled")
	write(t, ws, "run.log", "ignored\n")
	write(t, ws, "tracked.log", "changed, still kept\n")
	write(t, ws, "a*b", "ignored: the rule names it\n")
	write(t, ws, "axb", "kept: the rule is a*b literally\n")
	write(t, ws, "sub/new.py", "kept\n")
	cp, err := checkpoint.OpenCheckpoints(ctx, filepath.Join(t.TempDir(), "checkpoints"), ws)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := cp.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cp.Changes(ctx, "", snap)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, c := range got {
		paths = append(paths, c.Path)
	}
	want := []string{"a.py", "axb", "sub/new.py", "tracked.log"}
	if diff := cmp.Diff(want, paths); diff != "" {
		t.Errorf("snapshot files (-want +got):\n%s", diff)
	}
}

// The first snapshot of a workspace (written as packs: blobs by git add's
// bulk check-in, trees by fast-import) is the tree plain git makes of
// the same files, whatever their names, and leaves almost nothing loose;
// a restore of it from a fresh workspace is byte-identical.
func TestFirstSnapshotIsPacked(t *testing.T) {
	needGit(t)
	ctx := t.Context()
	ws := t.TempDir()
	names := []string{"plain.txt", "sp ace/a b.txt", `quo"te.txt`, `back\slash.txt`, "tab\there.txt", "new\nline.txt",
		"ünï/cödé.txt", "\"lead", "deep/er/and/deeper/f.go", "empty", "-dash", "#hash", "*star", "x/.hidden"}
	for i, n := range names {
		content := fmt.Sprintf("file %d: %s\n", i, n)
		if n == "empty" {
			content = ""
		}
		write(t, ws, n, content)
	}
	for i := range 300 { // enough files and directories for the packs to matter
		write(t, ws, fmt.Sprintf("many/d%02d/f%03d.txt", i%30, i), strings.Repeat("line\n", i))
	}
	if err := os.Chmod(filepath.Join(ws, "plain.txt"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("plain.txt", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	want := tree(t, ws)

	// Git's own tree of the files, from a plain repository of a copy.
	ref := t.TempDir()
	if out, err := exec.Command("cp", "-a", ws+"/.", ref).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	gitIn := func(dir string, args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	gitIn(ref, "init", "-q")
	gitIn(ref, "add", "-A")
	wantTree := gitIn(ref, "write-tree")

	store := filepath.Join(t.TempDir(), "store")
	cp, err := checkpoint.OpenCheckpoints(ctx, store, ws)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cp.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got != wantTree {
		t.Errorf("first snapshot %s, git's tree %s", got, wantTree)
	}
	loose := 0
	filepath.WalkDir(filepath.Join(store, "objects"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.Contains(p, string(filepath.Separator)+"pack"+string(filepath.Separator)) && !strings.Contains(p, "info") {
			loose++
		}
		if err == nil && strings.HasSuffix(p, ".keep") {
			t.Errorf("a pack is kept: %s", p)
		}
		return nil
	})
	if loose > 2 { // the empty blob (not streamed) at most
		out, _ := exec.Command("find", filepath.Join(store, "objects"), "-type", "f").Output()
		t.Log(string(out))
		t.Errorf("%d loose objects after the first snapshot, want the files and trees packed", loose)
	}
	if out := gitIn(store, "for-each-ref"); out != "" {
		t.Errorf("refs left in the store: %s", out)
	}
	// An unchanged workspace gives the same tree; a fresh directory
	// gets the files back byte for byte.
	if again, err := cp.Snapshot(ctx); err != nil || again != got {
		t.Errorf("second snapshot %s (%v), want %s", again, err, got)
	}
	dir := filepath.Join(t.TempDir(), "copy")
	if _, err := cp.Materialize(ctx, got, dir); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, tree(t, dir)); d != "" {
		t.Errorf("materialized first snapshot (-workspace +copy):\n%s", d)
	}
}
