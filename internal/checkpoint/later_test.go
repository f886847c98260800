package checkpoint_test

import (
	"encoding/json"
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

// ctimeOf is the change time the kernel gave a file just written in dir
// (its coarse clock).
func ctimeOf(t *testing.T, dir, name string) time.Time {
	t.Helper()
	write(t, dir, name, name)
	fi, err := os.Lstat(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return checkpoint.ChangeTime(fi)
}

// A run's changes are what it did, up to where it left its files (its
// newest checkpoint), whatever happened in the workspace after it: a file
// it changed and someone changed again is shown as the run left it, a
// file only changed later (tracked, new, ignored) is not the run's, and
// a file it made that was deleted later still is; each later file is
// named. While the run may still be executing, the workspace as it is
// now is its.
func TestSinceStartLeavesOutLaterChanges(t *testing.T) {
	scratch := t.TempDir() // files whose change times stand for the clock
	// The start's time comes before git init writes .git/config (which
	// is then "written since"), however long making the repository
	// takes on a loaded machine.
	start := ctimeOf(t, scratch, "start").Add(-time.Second)
	dir := repo(t, map[string]string{"a.py": "a = 1\n", "b.py": "b = 1\n", ".gitignore": "build/\n"})
	commit, _, err := checkpoint.Start(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	created := &agent.RunCreated{Workspace: dir, StateDir: t.TempDir(), Git: &agent.GitStart{Commit: commit, Time: start}}
	hook, release := checkpoint.Hook(filepath.Join(t.TempDir(), "store"), dir)
	defer release()
	var events []journal.Event
	add := func(typ journal.Type, at time.Time, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, journal.Event{RunID: "r", Seq: int64(len(events) + 1), Type: typ, Time: at, Payload: b})
	}
	var prev *agent.Snapshot
	snap := func() {
		cp, err := hook(t.Context(), "r", prev)
		if err != nil {
			t.Fatal(err)
		}
		if cp == nil {
			t.Fatal("no checkpoint: nothing changed")
		}
		add(journal.WorkspaceCheckpoint, time.Now(), cp)
		prev = &agent.Snapshot{Seq: int64(len(events)), Tree: cp.Tree, Commit: cp.Commit, Store: cp.Store}
	}
	add(journal.RunCreated, created.Git.Time, created)
	snap()
	// The run: a tool call (a checkpoint follows the run's own calls).
	add(journal.ToolStarted, time.Now(), &agent.ToolStarted{CallID: "c1", Tool: "bash"})
	write(t, dir, "a.py", "a = 2\n")
	write(t, dir, "new.py", "print('run')\n")
	write(t, dir, "build/run.log", "run\n")
	snap()
	ended := ctimeOf(t, scratch, "ended")
	add(journal.RunCompleted, ended, &agent.RunEnded{Reason: agent.ReasonAnswer})
	// After it, by hand: past the end by more than the clock's slack.
	for n := 0; !ctimeOf(t, scratch, "tick").After(ended.Add(50 * time.Millisecond)); n++ {
		if n > 1e6 {
			t.Fatal("the clock does not move")
		}
	}
	write(t, dir, "a.py", "a = 3\n")
	write(t, dir, "b.py", "b = 3\n")
	write(t, dir, "later.py", "later\n")
	write(t, dir, "build/later.log", "later\n")
	if err := os.Remove(filepath.Join(dir, "new.py")); err != nil {
		t.Fatal(err)
	}

	sum, err := checkpoint.SinceStart(t.Context(), created, events)
	if err != nil {
		t.Fatal(err)
	}
	// .git/config: written by git init, counted from the start's time.
	sum.Changes = dropConfig(t, sum.Changes, func(c checkpoint.Change) string { return c.Path })
	if diff := cmp.Diff([]string{"M a.py", "A build/run.log", "A new.py"}, statuses(sum.Changes)); diff != "" {
		t.Errorf("the run's changes (-want +got):\n%s", diff)
	}
	if c := find(sum.Changes, "a.py"); c == nil || !c.Later || !strings.Contains(c.Patch, "+a = 2") || strings.Contains(c.Patch, "a = 3") {
		t.Errorf("a.py is not shown as the run left it: %+v", c)
	}
	if c := find(sum.Changes, "new.py"); c == nil || !c.Later || !strings.Contains(c.Patch, "+print('run')") {
		t.Errorf("new.py, deleted after the run, is not shown as the run made it: %+v", c)
	}
	if c := find(sum.Changes, "build/run.log"); c == nil || c.Later || !c.Ignored {
		t.Errorf("build/run.log: %+v", c)
	}
	if diff := cmp.Diff([]string{"a.py", "b.py", "build/later.log", "later.py", "new.py"}, sum.Later); diff != "" {
		t.Errorf("Later (-want +got):\n%s", diff)
	}
	if sum.At != 4 {
		t.Errorf("At = %d, want 4 (the run's last checkpoint)", sum.At)
	}
	note := checkpoint.LaterNote(sum.At, sum.Later)
	for _, w := range []string{"5 file(s) changed", "event 4", "later.py"} {
		if !strings.Contains(note, w) {
			t.Errorf("LaterNote lacks %q: %s", w, note)
		}
	}

	// Executing again (a follow-up): the workspace now is the run's.
	add(journal.RunResumed, time.Now(), &agent.RunResumed{})
	sum, err = checkpoint.SinceStart(t.Context(), created, events)
	if err != nil {
		t.Fatal(err)
	}
	sum.Changes = dropConfig(t, sum.Changes, func(c checkpoint.Change) string { return c.Path })
	if diff := cmp.Diff([]string{"M a.py", "M b.py", "A build/later.log", "A build/run.log", "A later.py"}, statuses(sum.Changes)); diff != "" {
		t.Errorf("while executing (-want +got):\n%s", diff)
	}
	if sum.At != 0 || len(sum.Later) != 0 {
		t.Errorf("while executing: At %d, Later %v", sum.At, sum.Later)
	}
}
