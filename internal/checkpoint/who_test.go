package checkpoint_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool"
)

// step journals a step of the run as an execution does: the model's
// answer asking for call id, the gate's decision, the call (do being
// what it does to the files) and the checkpoint after its batch.
func (l *runLog) step(id string, do func()) {
	l.t.Helper()
	l.add(journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: id, Name: "bash", Arguments: "{}"}}}})
	l.add(journal.GateDecided, &agent.GateDecided{CallID: id, Tool: "bash", Decision: policy.Decision{Effect: policy.Allow}})
	l.tool(id, do)
}

// answer journals the model's closing answer and the run's completion.
func (l *runLog) answer() {
	l.add(journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, Content: "done"}})
	l.add(journal.RunCompleted, &agent.RunEnded{Reason: agent.ReasonAnswer})
}

// resume journals a resume with a person's message (one append, as the
// runtime does) and the execution's first checkpoint.
func (l *runLog) resume(msg string) {
	l.add(journal.RunResumed, &agent.RunResumed{})
	if msg != "" {
		l.add(journal.UserMessage, &agent.UserMessage{Content: msg})
	}
	l.snap()
}

// wait journals a call that waits for a person's approval while hand
// changes the files, then the checkpoint after the wait.
func (l *runLog) wait(id string, hand func()) {
	l.add(journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: id, Name: "bash", Arguments: "{}"}}}})
	l.add(journal.ApprovalRequested, &agent.ApprovalRequested{CallID: id})
	l.add(journal.RunPaused, &agent.RunEnded{Reason: agent.ReasonApproval})
	hand()
	l.add(journal.ApprovalResolved, &agent.ApprovalResolved{CallID: id, Decision: policy.Allow})
	l.resume("")
}

func chmod(t *testing.T, ws, name string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(filepath.Join(ws, name), mode); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, ws, target, name string) {
	t.Helper()
	p := filepath.Join(ws, name)
	if err := os.RemoveAll(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

// One rule tells who changed a run's files, and the change summary and
// a rewind read it alike: a snapshot after calls of the run whose step
// had not ended (or that were cut short) holds the run's changes, as
// does a rewind's restore (Keel putting back the run's own files); any
// other change is by hands outside the run. Files git ignores are in
// neither, nor are changes of a window the store cannot compare.
func TestWhoChanged(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
	cases := []struct {
		name string
		// run is the run's life after its first checkpoint.
		run func(t *testing.T, l *runLog)
		// live: the rewind reads on to the workspace as it is (changes
		// after the run's newest checkpoint); else to that checkpoint.
		live bool
		want checkpoint.Who
		// wantRewind, when set, is the rewind's answer where it differs
		// (live: the files changed after the newest checkpoint).
		wantRewind *checkpoint.Who
	}{
		{
			name: "the run creates, modifies and deletes files",
			run: func(t *testing.T, l *runLog) {
				l.step("c", func() { write(t, l.ws, "new.txt", "run\n") })
				l.step("m", func() { write(t, l.ws, "notes.txt", "run\n") })
				l.step("d", func() { os.Remove(filepath.Join(l.ws, "gone.txt")) })
				l.answer()
			},
			want: checkpoint.Who{Run: []string{"gone.txt", "new.txt", "notes.txt"}},
		},
		{
			name: "a person edits while the run waits for an approval",
			run: func(t *testing.T, l *runLog) {
				l.step("w", func() { write(t, l.ws, "run.txt", "run\n") })
				l.wait("x", func() { write(t, l.ws, "notes.txt", "person\n") })
				l.answer()
			},
			want: checkpoint.Who{Run: []string{"run.txt"}, Outside: []string{"notes.txt"}},
		},
		{
			name: "a person edits during an approval wait after a step that changed nothing",
			run: func(t *testing.T, l *runLog) {
				l.step("w", func() { write(t, l.ws, "run.txt", "run\n") })
				l.step("ls", func() {}) // no checkpoint: its step ends without one
				l.wait("x", func() { write(t, l.ws, "notes.txt", "person\n") })
				l.answer()
			},
			want: checkpoint.Who{Run: []string{"run.txt"}, Outside: []string{"notes.txt"}},
		},
		{
			name: "a person edits after the run, which is then continued",
			run: func(t *testing.T, l *runLog) {
				l.step("w", func() { write(t, l.ws, "run.txt", "run\n") })
				l.step("cat", func() {})
				l.answer()
				write(t, l.ws, "MYNOTES.txt", "mine\n")
				l.resume("go on")
				l.answer()
			},
			want: checkpoint.Who{Run: []string{"run.txt"}, Outside: []string{"MYNOTES.txt"}},
		},
		{
			name: "a person edits after the run's newest checkpoint",
			run: func(t *testing.T, l *runLog) {
				l.step("w", func() { write(t, l.ws, "run.txt", "run\n") })
				l.step("cat", func() {})
				l.answer()
				write(t, l.ws, "MYNOTES.txt", "mine\n")
			},
			live:       true,
			want:       checkpoint.Who{Run: []string{"run.txt"}},
			wantRewind: &checkpoint.Who{Run: []string{"run.txt"}, Outside: []string{"MYNOTES.txt"}},
		},
		{
			name: "both: the run edits a file, a person edits it while the run waits",
			run: func(t *testing.T, l *runLog) {
				l.unlisted = true // the store tells
				l.step("w", func() { write(t, l.ws, "notes.txt", "run\n") })
				l.wait("x", func() { write(t, l.ws, "notes.txt", "run\nperson\n") })
				l.answer()
			},
			want: checkpoint.Who{Run: []string{"notes.txt"}, Outside: []string{"notes.txt"}},
		},
		{
			name: "files git ignores are in neither",
			run: func(t *testing.T, l *runLog) {
				l.step("b", func() {
					write(t, l.ws, "build/out.o", "run\n")
					write(t, l.ws, "main.c", "run\n")
				})
				l.wait("x", func() { write(t, l.ws, "build/hand.o", "person\n") })
				l.answer()
			},
			want: checkpoint.Who{Run: []string{"main.c"}},
		},
		{
			name: "renames: the old path and the new",
			run: func(t *testing.T, l *runLog) {
				l.step("mv", func() {
					if err := os.Rename(filepath.Join(l.ws, "notes.txt"), filepath.Join(l.ws, "moved.txt")); err != nil {
						t.Fatal(err)
					}
				})
				l.wait("x", func() {
					if err := os.Rename(filepath.Join(l.ws, "gone.txt"), filepath.Join(l.ws, "hand.txt")); err != nil {
						t.Fatal(err)
					}
				})
				l.answer()
			},
			want: checkpoint.Who{Run: []string{"moved.txt", "notes.txt"}, Outside: []string{"gone.txt", "hand.txt"}},
		},
		{
			name: "mode changes",
			run: func(t *testing.T, l *runLog) {
				l.step("x", func() { chmod(t, l.ws, "notes.txt", 0o755) })
				l.wait("y", func() { chmod(t, l.ws, "gone.txt", 0o755) })
				l.answer()
			},
			want: checkpoint.Who{Run: []string{"notes.txt"}, Outside: []string{"gone.txt"}},
		},
		{
			name: "symlinks: made, and a file that becomes one",
			run: func(t *testing.T, l *runLog) {
				l.step("ln", func() { symlink(t, l.ws, "notes.txt", "link") })
				l.wait("y", func() { symlink(t, l.ws, "notes.txt", "gone.txt") })
				l.answer()
			},
			want: checkpoint.Who{Run: []string{"link"}, Outside: []string{"gone.txt"}},
		},
		{
			name: "a rewind puts back the run's own file",
			run: func(t *testing.T, l *runLog) {
				l.step("v1", func() { write(t, l.ws, "notes.txt", "v1\n") })
				v1 := l.last
				l.step("v2", func() { write(t, l.ws, "notes.txt", "v2\n") })
				l.answer()
				l.rewind(v1)
			},
			want: checkpoint.Who{Run: []string{"notes.txt"}},
		},
		{
			name: "a call cut short by an interrupt, resumed with a message",
			run: func(t *testing.T, l *runLog) {
				l.add(journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "k", Name: "bash", Arguments: "{}"}}}})
				l.add(journal.ToolStarted, &agent.ToolStarted{CallID: "k", Tool: "bash"})
				write(t, l.ws, "half.txt", "half\n")
				// The runtime's result of a call a stop cut short.
				l.add(journal.ToolFinished, &agent.ToolFinished{CallID: "k", Tool: "bash", Result: tool.Result{IsError: true, Content: "[interrupted by the user while this call ran]"}})
				l.add(journal.UserMessage, &agent.UserMessage{Source: agent.InterruptSource, Content: agent.InterruptNote})
				l.add(journal.RunPaused, &agent.RunEnded{Reason: agent.ReasonInterrupted})
				l.resume("go on")
				l.answer()
			},
			want: checkpoint.Who{Run: []string{"half.txt"}},
		},
		{
			name: "a run killed in a call, resumed with a message",
			run: func(t *testing.T, l *runLog) {
				l.add(journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "k", Name: "bash", Arguments: "{}"}}}})
				l.add(journal.ToolStarted, &agent.ToolStarted{CallID: "k", Tool: "bash"})
				write(t, l.ws, "half.txt", "half\n")
				l.resume("go on")
				l.answer()
			},
			want: checkpoint.Who{Run: []string{"half.txt"}},
		},
		{
			name: "a run canceled in a call: its files after the newest checkpoint are the run's",
			run: func(t *testing.T, l *runLog) {
				l.step("w", func() { write(t, l.ws, "run.txt", "run\n") })
				l.add(journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "k", Name: "bash", Arguments: "{}"}}}})
				l.add(journal.ToolStarted, &agent.ToolStarted{CallID: "k", Tool: "bash"})
				write(t, l.ws, "half.txt", "half\n")
				l.add(journal.ToolFinished, &agent.ToolFinished{CallID: "k", Tool: "bash", Result: tool.Result{IsError: true, Content: "[interrupted: the run was stopped while this call ran]"}})
				l.add(journal.RunCanceled, &agent.RunEnded{Reason: agent.ReasonUser})
			},
			live:       true,
			want:       checkpoint.Who{Run: []string{"run.txt"}},
			wantRewind: &checkpoint.Who{Run: []string{"half.txt", "run.txt"}},
		},
		{
			name: "snapshots in another store: the window across stores is in neither",
			run: func(t *testing.T, l *runLog) {
				l.step("w", func() { write(t, l.ws, "run.txt", "run\n") })
				hook, release := checkpoint.Hook(filepath.Join(t.TempDir(), "other"), l.ws)
				t.Cleanup(release)
				l.hook = hook
				l.wait("x", func() { write(t, l.ws, "notes.txt", "person\n") })
				l.step("y", func() { write(t, l.ws, "y.txt", "run\n") })
				l.answer()
			},
			want: checkpoint.Who{Run: []string{"run.txt", "y.txt"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ws := repo(t, map[string]string{"notes.txt": "one\n", "gone.txt": "gone\n", ".gitignore": "build/\n"})
			l := newRunLog(t, ws, true)
			l.snap()
			tc.run(t, l)
			summary, rewind, err := checkpoint.WhoChanged(t.Context(), l.events(), ws, tc.live)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, summary); d != "" {
				t.Errorf("the change summary's (-want +got):\n%s", d)
			}
			want := tc.want
			if tc.wantRewind != nil {
				want = *tc.wantRewind
			}
			if d := cmp.Diff(want, rewind); d != "" {
				t.Errorf("a rewind's (-want +got):\n%s", d)
			}
		})
	}
}

// rewind rewinds the run to event to, as keel runs rewind does, and
// follows its events.
func (l *runLog) rewind(to int64) {
	l.t.Helper()
	rw, err := checkpoint.Rewind(l.t.Context(), l.store, l.id, to, checkpoint.RewindOptions{By: "ada"})
	if err != nil {
		l.t.Fatal(err)
	}
	l.last = rw.Event.Seq
	l.prev = &agent.Snapshot{Seq: rw.Event.Seq, Tree: rw.Restored.Tree, Commit: rw.Restored.Commit, Store: rw.Restored.Store}
}
