package checkpoint_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/checkpoint"
)

// readAll reads every file of dir (not .git, not .keel) as path → content.
func readAll(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == ".keel" {
				return filepath.SkipDir
			}
			return nil
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		m[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// finishedRun journals a run in ws that changes a.txt and makes b.txt in
// one step, then a step whose call changes nothing, then completes
// (fresh-user report 12: B5, N6). It returns the log and the event of
// its first checkpoint.
func finishedRun(t *testing.T) (*runLog, int64) {
	ws := t.TempDir()
	write(t, ws, "a.txt", "a\n")
	write(t, ws, "keep.txt", "keep\n")
	l := newRunLog(t, ws, false)
	l.snap()
	first := l.last
	l.step("edit", func() {
		write(t, ws, "a.txt", "a by the run\n")
		write(t, ws, "b.txt", "made by the run\n")
	})
	l.step("look", func() {}) // cat: no checkpoint
	l.answer()
	return l, first
}

// A rewind puts back what the run changed and leaves a file written by
// hand after the run alone (it deleted it: fresh-user report 12, B5); a
// file both changed is put back only when forced, and named.
func TestRewindLeavesFilesChangedOutsideTheRun(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
	ctx := t.Context()
	t.Run("only by hand", func(t *testing.T) {
		l, first := finishedRun(t)
		write(t, l.ws, "MYNOTES.txt", "my own edit\n")
		after := readAll(t, l.ws)
		rw, err := checkpoint.Rewind(ctx, l.store, l.id, first, checkpoint.RewindOptions{By: "ada"})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"a.txt": "a\n", "keep.txt": "keep\n", "MYNOTES.txt": "my own edit\n"}
		if d := cmp.Diff(want, readAll(t, l.ws)); d != "" {
			t.Errorf("rewound files (-want +got):\n%s", d)
		}
		if d := cmp.Diff([]string{"MYNOTES.txt"}, rw.Kept); d != "" {
			t.Errorf("kept (-want +got):\n%s", d)
		}
		if d := cmp.Diff([]agent.FileChange{{Path: "a.txt", Status: "M"}, {Path: "b.txt", Status: "D"}}, rw.Restored.Files); d != "" {
			t.Errorf("files restored (-want +got):\n%s", d)
		}
		// The plan of the same rewind says the same.
		// The undo puts everything back, exactly.
		if _, err := checkpoint.Rewind(ctx, l.store, l.id, rw.Undo, checkpoint.RewindOptions{By: "ada"}); err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(after, readAll(t, l.ws)); d != "" {
			t.Errorf("undone (-after the run +got):\n%s", d)
		}
	})
	t.Run("by both", func(t *testing.T) {
		l, first := finishedRun(t)
		write(t, l.ws, "a.txt", "a by the run, then by hand\n")
		write(t, l.ws, "MYNOTES.txt", "my own edit\n")
		after := readAll(t, l.ws)
		p, err := checkpoint.PlanRewind(ctx, l.events(), first)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff([]string{"a.txt"}, p.Both); d != "" {
			t.Errorf("plan: both (-want +got):\n%s", d)
		}
		if len(p.Kept) != 1 || p.Kept[0].Path != "MYNOTES.txt" {
			t.Errorf("plan: kept %v, want MYNOTES.txt", p.Kept)
		}
		_, err = checkpoint.Rewind(ctx, l.store, l.id, first, checkpoint.RewindOptions{By: "ada"})
		var ce *checkpoint.ConflictError
		if !errors.As(err, &ce) || !cmp.Equal(ce.Paths, []string{"a.txt"}) {
			t.Fatalf("rewind over a file changed by both = %v, want a ConflictError naming a.txt", err)
		}
		if d := cmp.Diff(after, readAll(t, l.ws)); d != "" {
			t.Errorf("a refused rewind changed files (-before +after):\n%s", d)
		}
		rw, err := checkpoint.Rewind(ctx, l.store, l.id, first, checkpoint.RewindOptions{By: "ada", Force: true})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"a.txt": "a\n", "keep.txt": "keep\n", "MYNOTES.txt": "my own edit\n"}
		if d := cmp.Diff(want, readAll(t, l.ws)); d != "" {
			t.Errorf("forced rewind (-want +got):\n%s", d)
		}
		if _, err := checkpoint.Rewind(ctx, l.store, l.id, rw.Undo, checkpoint.RewindOptions{By: "ada"}); err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(after, readAll(t, l.ws)); d != "" {
			t.Errorf("undone (-before the rewind +got):\n%s", d)
		}
	})
}

// The undo of a rewind that journaled no checkpoint of its own (the
// files were the run's newest checkpoint's) names that checkpoint,
// which restores them exactly, and a rewind to the event that completed
// the run after calls that changed nothing lacks nothing (fresh-user
// report 12, N6: the undo named the event before the rewind, which
// warned "without the effects of 2 calls").
func TestRewindUndoIsExact(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
	ctx := t.Context()
	l, first := finishedRun(t)
	after := readAll(t, l.ws)
	completed := l.last
	rw, err := checkpoint.Rewind(ctx, l.store, l.id, first, checkpoint.RewindOptions{By: "ada"})
	if err != nil {
		t.Fatal(err)
	}
	events := l.events()
	st, err := agent.Fold(l.id, events[:completed])
	if err != nil {
		t.Fatal(err)
	}
	if rw.Undo != st.Checkpoint.Seq || checkpoint.UndoOf(events, rw.Event.Seq) != rw.Undo {
		t.Errorf("undo = %d (UndoOf %d), want the run's newest checkpoint, event %d", rw.Undo, checkpoint.UndoOf(events, rw.Event.Seq), st.Checkpoint.Seq)
	}
	cp, later, missing, err := checkpoint.AtEvent(events, completed)
	if err != nil || cp.Seq != st.Checkpoint.Seq || later != 0 || missing != 0 {
		t.Errorf("AtEvent(run.completed %d) = %+v, later %d, missing %d, %v; want event %d, nothing missing", completed, cp, later, missing, err, st.Checkpoint.Seq)
	}
	undo, err := checkpoint.Rewind(ctx, l.store, l.id, rw.Undo, checkpoint.RewindOptions{By: "ada"})
	if err != nil {
		t.Fatal(err)
	}
	if undo.Restored.Missing != 0 || undo.Restored.Asked != 0 {
		t.Errorf("the undo: asked %d, missing %d; want the checkpoint itself", undo.Restored.Asked, undo.Restored.Missing)
	}
	if d := cmp.Diff(after, readAll(t, l.ws)); d != "" {
		t.Errorf("undone (-after the run +got):\n%s", d)
	}
}

// CloneAt works in a directory that holds what the sandbox made when a
// fork was checked (its .keel), and leaves it: the repository is cloned
// aside and moved in.
func TestCloneAtBesideKeel(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
	ctx := t.Context()
	src := repo(t, map[string]string{"a.txt": "one\n"})
	start := checkpoint.StartOf(ctx, src)
	if start == nil {
		t.Fatal("StartOf: no start")
	}
	dir := filepath.Join(t.TempDir(), "fork")
	if err := os.MkdirAll(filepath.Join(dir, ".keel"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.CloneAt(ctx, src, dir, start); err != nil {
		t.Fatal(err)
	}
	if got := checkpoint.StartOf(ctx, dir); got == nil || got.Commit != start.Commit {
		t.Fatalf("StartOf(the clone) = %+v, want commit %s", got, start.Commit)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if d := cmp.Diff([]string{".git", ".keel"}, names); d != "" {
		t.Errorf("the clone's directory (-want +got):\n%s", d)
	}
}

// CloneAt into a directory that is already a repository refuses, and
// leaves that repository's .git as it was (it removed it).
func TestCloneAtLeavesAnExistingRepository(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
	ctx := t.Context()
	src := repo(t, map[string]string{"a.txt": "one\n"})
	start := checkpoint.StartOf(ctx, src)
	if start == nil {
		t.Fatal("StartOf: no start")
	}
	dir := repo(t, map[string]string{"mine.txt": "mine\n"})
	if err := checkpoint.CloneAt(ctx, src, dir, start); err == nil {
		t.Fatal("CloneAt into a repository: no error")
	}
	if got := checkpoint.StartOf(ctx, dir); got == nil || got.Commit == start.Commit {
		t.Fatalf("StartOf(the repository) after the refused clone = %+v, want its own commit", got)
	}
}
