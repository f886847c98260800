package checkpoint_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/policy"
)

// runLog writes a run's events to a real journal (SQLite in a temp
// dir) as an execution does: snapshots by the hook an execution uses,
// journaled only when the files changed.
type runLog struct {
	t       *testing.T
	store   journal.Store
	id      string
	ws      string
	hook    func(ctx context.Context, runID string, prev *agent.Snapshot) (*agent.WorkspaceCheckpoint, error)
	prev    *agent.Snapshot
	last    int64
	created *agent.RunCreated
	// unlisted journals checkpoints without their files (as one of
	// more than agent.MaxCheckpointFiles files does in part).
	unlisted bool
}

func newRunLog(t *testing.T, ws string, git bool) *runLog {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "journal.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	hook, release := checkpoint.Hook(filepath.Join(t.TempDir(), "store"), ws)
	t.Cleanup(release)
	l := &runLog{t: t, store: st, id: "01run", ws: ws, hook: hook}
	l.created = &agent.RunCreated{Workspace: ws, StateDir: t.TempDir()}
	if git {
		commit, dirty, err := checkpoint.Start(t.Context(), ws)
		if err != nil {
			t.Fatal(err)
		}
		l.created.Git = &agent.GitStart{Commit: commit, Dirty: dirty, Time: time.Now()}
		l.created.Git.Refs, l.created.Git.RefsAll = checkpoint.Refs(t.Context(), ws)
		if l.created.Git.Control, err = checkpoint.GitControl(t.Context(), ws); err != nil {
			t.Fatal(err)
		}
		var ok bool
		if l.created.Git.Since, ok = checkpoint.StartClock(ws); !ok {
			t.Fatal("StartClock: no clock")
		}
		x, err := checkpoint.InfoExclude(t.Context(), ws)
		if err != nil {
			t.Fatal(err)
		}
		l.created.Git.Exclude = &x
	}
	l.add(journal.RunCreated, l.created)
	return l
}

func (l *runLog) add(typ journal.Type, v any) {
	l.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		l.t.Fatal(err)
	}
	evs, err := l.store.Append(l.t.Context(), l.id, l.last, journal.Draft{Type: typ, Time: time.Now(), Payload: b})
	if err != nil {
		l.t.Fatal(err)
	}
	l.last = evs[0].Seq
}

// snap journals a checkpoint if the files changed since the newest.
func (l *runLog) snap() {
	l.t.Helper()
	cp, err := l.hook(l.t.Context(), l.id, l.prev)
	if err != nil {
		l.t.Fatal(err)
	}
	if cp == nil || (l.prev != nil && cp.Tree == l.prev.Tree) {
		return
	}
	if l.unlisted && len(cp.Files) > 0 {
		cp.Files, cp.MoreFiles = cp.Files[:0], len(cp.Files)
	}
	l.add(journal.WorkspaceCheckpoint, cp)
	l.prev = &agent.Snapshot{Seq: l.last, Tree: cp.Tree, Commit: cp.Commit, Store: cp.Store}
}

// tool journals a call the run makes, do being what it does to the
// files, then the checkpoint after its batch.
func (l *runLog) tool(name string, do func()) {
	l.add(journal.ToolStarted, &agent.ToolStarted{CallID: name, Tool: "bash"})
	do()
	l.add(journal.ToolFinished, &agent.ToolFinished{CallID: name, Tool: "bash"})
	l.snap()
}

func (l *runLog) events() []journal.Event {
	l.t.Helper()
	evs, err := l.store.Read(l.t.Context(), l.id, 1)
	if err != nil {
		l.t.Fatal(err)
	}
	return evs
}

// A run's changes are the run's own, in a git workspace as in one
// without git: not files that differed from the commit before it
// started, not files a person or another run changed while it was
// paused or waiting for an approval; what git says of it (commits it
// made) stays.
func TestChangedIsTheRunsOwn(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
	type want struct {
		changes          []string
		before, outside  []string
		notes            []string // in the notes, the CLI's and the web UI's words
		patch, notInDiff map[string]string
	}
	cases := []struct {
		name string
		git  bool
		// pre changes the workspace before the run is created; run is
		// the run's life in the journal.
		pre  func(t *testing.T, ws string)
		run  func(t *testing.T, l *runLog)
		want want
	}{
		{
			name: "untracked file before the run, the run only reads",
			git:  true,
			pre:  func(t *testing.T, ws string) { write(t, ws, "untracked-before.txt", "mine\n") },
			run: func(t *testing.T, l *runLog) {
				l.snap()
				l.tool("ls", func() {})
				l.add(journal.RunCompleted, &agent.RunEnded{Reason: agent.ReasonAnswer})
			},
			want: want{before: []string{"untracked-before.txt"}, notes: []string{"1 file(s) already differed from the start commit", "untracked-before.txt"}},
		},
		{
			name: "tracked file modified before the run, 0 steps",
			git:  true,
			pre:  func(t *testing.T, ws string) { write(t, ws, "notes.txt", "person's edit\n") },
			run: func(t *testing.T, l *runLog) {
				l.snap()
				l.add(journal.RunFailed, &agent.RunEnded{Reason: agent.ReasonModelError})
			},
			want: want{before: []string{"notes.txt"}},
		},
		{
			name: "tracked file deleted before the run",
			git:  true,
			pre: func(t *testing.T, ws string) {
				if err := os.Remove(filepath.Join(ws, "notes.txt")); err != nil {
					t.Fatal(err)
				}
			},
			run: func(t *testing.T, l *runLog) {
				l.snap()
				l.add(journal.RunCompleted, &agent.RunEnded{Reason: agent.ReasonAnswer})
			},
			want: want{before: []string{"notes.txt"}},
		},
		{
			name: "the run writes one file, an untracked one was there",
			git:  true,
			pre:  func(t *testing.T, ws string) { write(t, ws, "untracked-before.txt", "mine\n") },
			run: func(t *testing.T, l *runLog) {
				l.snap()
				l.tool("write", func() { write(t, l.ws, "hello.txt", "hi\n") })
				l.add(journal.RunCompleted, &agent.RunEnded{Reason: agent.ReasonAnswer})
			},
			want: want{changes: []string{"A hello.txt"}, before: []string{"untracked-before.txt"}},
		},
		{
			name: "still executing: the workspace now, less what it started with",
			git:  true,
			pre: func(t *testing.T, ws string) {
				write(t, ws, "untracked-before.txt", "mine\n")
				write(t, ws, "notes.txt", "person\n")
			},
			run: func(t *testing.T, l *runLog) {
				l.snap()
				l.tool("write", func() { write(t, l.ws, "hello.txt", "hi\n") })
				l.add(journal.ToolStarted, &agent.ToolStarted{CallID: "now", Tool: "bash"})
				write(t, l.ws, "now.txt", "in progress\n")
			},
			want: want{changes: []string{"A hello.txt", "A now.txt"}, before: []string{"notes.txt", "untracked-before.txt"}},
		},
		{
			name: "the run edits a file a person had modified: only the run's edit",
			git:  true,
			pre:  func(t *testing.T, ws string) { write(t, ws, "notes.txt", "one\nperson\n") },
			run: func(t *testing.T, l *runLog) {
				l.snap()
				l.tool("edit", func() { write(t, l.ws, "notes.txt", "one\nperson\nrun\n") })
				l.add(journal.RunCompleted, &agent.RunEnded{Reason: agent.ReasonAnswer})
			},
			want: want{changes: []string{"M notes.txt"}, patch: map[string]string{"notes.txt": "+run"}, notInDiff: map[string]string{"notes.txt": "+person"}},
		},
		{
			name: "paused for an approval: a person edits, another run adds a file",
			git:  true,
			run: func(t *testing.T, l *runLog) {
				l.snap()
				l.tool("first", func() { write(t, l.ws, "first.txt", "run\n") })
				l.add(journal.ApprovalRequested, &agent.ApprovalRequested{CallID: "w"})
				l.add(journal.RunPaused, &agent.RunEnded{Reason: agent.ReasonApproval})
				write(t, l.ws, "notes.txt", "person\n")    // a person
				write(t, l.ws, "other.txt", "other run\n") // another run
				write(t, l.ws, "first.txt", "run\nperson\n")
				l.add(journal.ApprovalResolved, &agent.ApprovalResolved{CallID: "w", Decision: policy.Allow})
				l.add(journal.RunResumed, &agent.RunResumed{})
				l.snap() // the execution's first
				l.tool("w", func() { write(t, l.ws, "y.txt", "y\n") })
				l.add(journal.RunCompleted, &agent.RunEnded{Reason: agent.ReasonAnswer})
			},
			want: want{changes: []string{"A first.txt", "A y.txt"}, outside: []string{"notes.txt", "other.txt"},
				notes: []string{"2 file(s) changed while the run was paused or waiting", "notes.txt, other.txt"}},
		},
		{
			name: "paused; checkpoints that do not list their files: the store tells",
			git:  true,
			run: func(t *testing.T, l *runLog) {
				l.unlisted = true
				l.snap()
				l.tool("first", func() { write(t, l.ws, "first.txt", "run\n") })
				l.add(journal.RunPaused, &agent.RunEnded{Reason: agent.ReasonApproval})
				write(t, l.ws, "other.txt", "other run\n")
				l.add(journal.RunResumed, &agent.RunResumed{})
				l.snap()
				l.add(journal.RunCompleted, &agent.RunEnded{Reason: agent.ReasonAnswer})
			},
			want: want{changes: []string{"A first.txt"}, outside: []string{"other.txt"}},
		},
		{
			name: "waiting at the terminal for an approval: a person's edit is not the run's",
			git:  true,
			run: func(t *testing.T, l *runLog) {
				l.snap()
				l.add(journal.ApprovalRequested, &agent.ApprovalRequested{CallID: "w"})
				write(t, l.ws, "notes.txt", "person\n")
				l.add(journal.ApprovalResolved, &agent.ApprovalResolved{CallID: "w", Decision: policy.Allow})
				l.snap() // after the wait, before the approved call
				l.add(journal.ToolStarted, &agent.ToolStarted{CallID: "w", Tool: "write_file"})
				l.add(journal.ToolFinished, &agent.ToolFinished{CallID: "w", Tool: "write_file", Synthetic: true}) // refused: stale
				l.add(journal.RunCompleted, &agent.RunEnded{Reason: agent.ReasonAnswer})
			},
			want: want{outside: []string{"notes.txt"}},
		},
		{
			name: "a person's edit while the run waits, after a step that changed nothing, is not the run's",
			git:  true,
			run: func(t *testing.T, l *runLog) {
				l.snap()
				l.step("w", func() { write(t, l.ws, "w.txt", "run\n") })
				l.step("ls", func() {}) // no checkpoint: its step ends without one
				l.wait("x", func() { write(t, l.ws, "notes.txt", "person\n") })
				l.answer()
			},
			want: want{changes: []string{"A w.txt"}, outside: []string{"notes.txt"}},
		},
		{
			name: "a run killed in a tool: the resumed execution's first checkpoint is the run's",
			git:  true,
			run: func(t *testing.T, l *runLog) {
				l.snap()
				l.add(journal.ToolStarted, &agent.ToolStarted{CallID: "k", Tool: "bash"})
				write(t, l.ws, "half.txt", "half\n")
				// killed: no result, no checkpoint
				l.add(journal.RunResumed, &agent.RunResumed{})
				l.snap()
				l.add(journal.RunCompleted, &agent.RunEnded{Reason: agent.ReasonAnswer})
			},
			want: want{changes: []string{"A half.txt"}},
		},
		{
			name: "the run commits",
			git:  true,
			run: func(t *testing.T, l *runLog) {
				l.snap()
				l.tool("commit", func() {
					write(t, l.ws, "f.txt", "f\n")
					run(t, l.ws, "add", "f.txt")
					run(t, l.ws, "commit", "-q", "-m", "run's commit")
				})
				l.add(journal.RunCompleted, &agent.RunEnded{Reason: agent.ReasonAnswer})
			},
			want: want{changes: []string{"M .git/refs/heads/main", "A f.txt"}},
		},
		{
			name: "no git: paused while another run adds a file",
			run: func(t *testing.T, l *runLog) {
				l.snap()
				l.tool("write", func() { write(t, l.ws, "mine.txt", "run\n") })
				l.add(journal.RunPaused, &agent.RunEnded{Reason: agent.ReasonApproval})
				write(t, l.ws, "other.txt", "other run\n")
				l.add(journal.RunResumed, &agent.RunResumed{})
				l.snap()
				l.add(journal.RunCompleted, &agent.RunEnded{Reason: agent.ReasonAnswer})
			},
			want: want{changes: []string{"A mine.txt"}, outside: []string{"other.txt"}},
		},
		{
			name: "no git: a file there before the run is not listed",
			pre:  func(t *testing.T, ws string) { write(t, ws, "a.txt", "before\n") },
			run: func(t *testing.T, l *runLog) {
				l.snap()
				l.tool("write", func() { write(t, l.ws, "b.txt", "run\n") })
				l.add(journal.RunCompleted, &agent.RunEnded{Reason: agent.ReasonAnswer})
			},
			want: want{changes: []string{"A b.txt"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ws string
			if tc.git {
				ws = repo(t, map[string]string{"notes.txt": "one\n", ".gitignore": "build/\n"})
				run(t, ws, "branch", "-M", "main")
			} else {
				ws = t.TempDir()
				write(t, ws, "notes.txt", "one\n")
			}
			if tc.pre != nil {
				tc.pre(t, ws)
			}
			l := newRunLog(t, ws, tc.git)
			tc.run(t, l)
			sum, err := checkpoint.Changed(t.Context(), l.created, l.events())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want.changes, statuses(sum.Changes)); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want.before, sum.Before); diff != "" {
				t.Errorf("Before (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want.outside, sum.Outside); diff != "" {
				t.Errorf("Outside (-want +got):\n%s", diff)
			}
			if sum.From == 0 {
				t.Errorf("From = 0: the run's first checkpoint was not used")
			}
			notes := strings.Join(sum.Notes(l.created), "\n")
			for _, w := range tc.want.notes {
				if !strings.Contains(notes, w) {
					t.Errorf("notes lack %q:\n%s", w, notes)
				}
			}
			for p, w := range tc.want.patch {
				if c := find(sum.Changes, p); c == nil || !strings.Contains(c.Patch, w) {
					t.Errorf("%s: patch lacks %q: %+v", p, w, c)
				}
			}
			for p, w := range tc.want.notInDiff {
				if c := find(sum.Changes, p); c == nil || strings.Contains(c.Patch, w) {
					t.Errorf("%s: patch has %q, not the run's: %+v", p, w, c)
				}
			}
		})
	}
}
