package tui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/journal"
)

// RunDiff prints the changes of the run made by created, as diff
// finds them (checkpoint.Changed, here or on a team server): a list of
// files with their added and removed lines, the notes on what is not the
// run's, then (unless stat) their diffs.
func RunDiff(ctx context.Context, out io.Writer, diff func(context.Context, string, *agent.RunCreated) (*checkpoint.Summary, error), runID string, created *agent.RunCreated, stat bool) error {
	sum, err := diff(ctx, runID, created)
	if created.Git == nil && errors.Is(err, checkpoint.ErrNone) {
		return fmt.Errorf("run %s has nothing to compare with: it recorded no git commit at its start (its workspace %s was not the top of a git repository with a commit) and no workspace checkpoint (checkpoints off, or the run predates them); keel runs diff %s --at EVENT lists its file edits", runID, created.Workspace, runID)
	}
	w := escWriter{out}
	var he *checkpoint.HistoryError
	if errors.As(err, &he) && he.From > 0 {
		// Git cannot read the start commit (the run deleted
		// .git/objects, say): the run's own checkpoints still tell.
		fmt.Fprintf(w, "warning: %v\n", he.Cause)
		Changes(w, he.Changes, fmt.Sprintf("since the run's first checkpoint (event %d; Keel's own store), at the checkpoint of event %d", he.From, he.To), stat)
		return nil
	}
	if err != nil {
		return err
	}
	Changes(w, sum.Changes, sum.What(created), true)
	for _, n := range sum.Notes(created) {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if !stat {
		printPatches(w, sum.Changes)
	}
	return nil
}

// Reviewed counts the changes a person reviews as the run's (Changes
// lists the others apart, uncounted).
func Reviewed(changes []checkpoint.Change) int {
	return checkpoint.Reviewed(changes)
}

// Changes prints the list of changed files (with what, "since
// ..."), then, unless stat, their diffs.
func Changes(w io.Writer, changes []checkpoint.Change, what string, stat bool) {
	if len(changes) == 0 {
		fmt.Fprintf(w, "no files changed %s\n", what)
		return
	}
	// Files git ignores (build output, caches) are counted apart: they
	// are not what a person reviews as the run's change, unless they run
	// on their own or are hidden by rules the run wrote.
	added, removed, files, ignored, runs := 0, 0, 0, 0, 0
	for _, c := range changes {
		added, removed = added+c.Added, removed+c.Removed
		switch {
		case c.Reviewed():
			files++
			if c.Ignored {
				runs++
			}
		default:
			ignored += max(c.Files, 1)
		}
	}
	also := ""
	if runs > 0 {
		also = fmt.Sprintf(", %d of them ignored by git but code that runs on its own", runs)
	}
	if ignored > 0 {
		also += fmt.Sprintf("; %d file(s) git ignores were written too (build output, caches: listed, not counted)", ignored)
	}
	if files == 0 {
		fmt.Fprintf(w, "no files changed %s%s\n", what, also)
	} else {
		fmt.Fprintf(w, "%d file(s) changed %s (+%d -%d)%s\n", files, what, added, removed, also)
	}
	for _, c := range changes {
		name := checkpoint.QuotePath(c.Path)
		if c.Denied {
			fmt.Fprintf(w, "  %s %s (%s)\n", c.Status, name, deniedNote)
			continue
		}
		if c.Files > 0 {
			runs := ""
			if c.Autorun != "" {
				runs = "; " + c.Autorun
			}
			fmt.Fprintf(w, "  %s %s (%d files %s, written since the run started; not listed%s)\n", c.Status, name, c.Files, ignoredWhere(c), runs)
			continue
		}
		var notes []string
		if c.Note != "" {
			notes = append(notes, c.Note)
		}
		if c.Later {
			notes = append(notes, "changed again after the run: shown as the run left it")
		}
		if c.Outside {
			notes = append(notes, OutsideChangeNote)
		}
		if c.Hidden {
			notes = append(notes, hiddenNote)
		}
		if c.Rewritten {
			notes = append(notes, rewrittenNote)
		}
		if c.Ignored {
			n := ignoredWhere(c) + ", written since the run started"
			switch {
			case c.Patch == "" && !c.Binary:
				n += "; content not shown"
			case c.Status == checkpoint.Modified:
				n += "; its earlier content is unknown: the whole file is shown as added"
			}
			notes = append(notes, n)
		}
		if c.Autorun != "" {
			notes = append(notes, "runs on its own: "+c.Autorun)
		}
		note := ""
		if len(notes) > 0 {
			note = " (" + strings.Join(notes, "; ") + ")"
		}
		switch {
		case c.Link != "":
			name += " → symlink to " + checkpoint.QuotePath(c.Link)
		case c.Status == checkpoint.TypeChanged:
			name += " (was a symlink, now a file)"
		}
		switch {
		case c.Binary:
			fmt.Fprintf(w, "  %s %s (binary)%s\n", c.Status, name, note)
		case c.Ignored && c.Patch == "":
			fmt.Fprintf(w, "  %s %s%s\n", c.Status, name, note)
		default:
			fmt.Fprintf(w, "  %s %s +%d -%d%s\n", c.Status, name, c.Added, c.Removed, note)
		}
	}
	if !stat {
		printPatches(w, changes)
	}
}

// ignoredWhere says why git does not show an ignored change.
func ignoredWhere(c checkpoint.Change) string {
	if c.Path == ".git" || strings.HasPrefix(c.Path, ".git/") {
		return "in git's own directory"
	}
	return "ignored by git"
}

// OutsideChangeNote marks a file the run changed that also changed
// while it was paused or waiting (checkpoint.Change.Outside).
const OutsideChangeNote = "also changed while the run was paused or waiting (by a person or another run): its diff includes that"

// hiddenNote marks a file git ignores only by rules the run wrote.
const hiddenNote = "hidden from git: ignored only by rules written during the run"

// rewrittenNote marks a file whose start copy in .git/objects no longer
// matches its hash.
const rewrittenNote = "git history rewritten: the start commit's copy in .git/objects was changed; the whole file is shown as added"

// deniedNote stands for the content of a path the run's policy denies.
const deniedNote = "content not shown: the run's policy denies this path"

func printPatches(w io.Writer, changes []checkpoint.Change) {
	for _, c := range changes {
		if c.Files > 0 {
			continue // a count of files, none shown
		}
		fmt.Fprintf(w, "\ndiff --git %s %s\n", checkpoint.QuotePath("a/"+c.Path), checkpoint.QuotePath("b/"+c.Path))
		if c.Denied {
			fmt.Fprintf(w, "(%s)\n", deniedNote)
			continue
		}
		if c.Binary {
			fmt.Fprintf(w, "Binary files differ\n")
			continue
		}
		if c.Ignored && c.Patch == "" {
			fmt.Fprintf(w, "(%s: content not shown)\n", ignoredWhere(c))
			continue
		}
		io.WriteString(w, c.Patch)
	}
}

// DiffSource is where a run's changes are read: this machine, or the
// team server that has the run's workspace and checkpoints.
type DiffSource interface {
	// WorkspaceDiff returns what run id changed (created is its
	// run.created; see checkpoint.Changed): its workspace against the git
	// commit it started on, as the run left it when no process executes
	// it, or its first checkpoint against its newest.
	WorkspaceDiff(ctx context.Context, id string, created *agent.RunCreated) (*checkpoint.Summary, error)
	// CheckpointDiff compares run id's first workspace checkpoint with
	// its newest one at or before event at (events are its journal), and
	// returns the two checkpoints' events; checkpoint.ErrNone when it
	// has none there (see checkpoint.Diff).
	CheckpointDiff(ctx context.Context, id string, events []journal.Event, at int64) (changes []checkpoint.Change, from, to int64, err error)
}

// Diff prints what run id (events, its whole journal) changed, as keel
// runs diff does: with at > 0, between its first checkpoint and its
// newest at or before event at (its file edits up to there when it has
// no checkpoints); else its workspace compared with the git commit it
// started on, or, when it recorded none, its checkpoints.
func Diff(ctx context.Context, out io.Writer, src DiffSource, id string, events []journal.Event, at int64, stat bool) error {
	if at > 0 {
		changes, from, to, err := src.CheckpointDiff(ctx, id, events, at)
		if errors.Is(err, checkpoint.ErrNone) {
			for _, e := range events {
				if journal.KeepsStatus(e.Type) {
					fmt.Fprintf(Esc(out), "no files changed up to event %d: the run's first checkpoint (the files it started with) is event %d\n", at, e.Seq)
					return nil
				}
			}
			return EditsUpTo(out, id, events, at)
		}
		if err != nil {
			return err
		}
		where := fmt.Sprintf("since the checkpoint of event %d, at the checkpoint of event %d", from, to)
		if to > at {
			where += fmt.Sprintf(" (the end of event %d's step: the files as a rewind to event %d gives them)", at, at)
		}
		Changes(Esc(out), changes, where, stat)
		return nil
	}
	created, err := agent.Created(events)
	if err != nil {
		return err
	}
	return RunDiff(ctx, out, src.WorkspaceDiff, id, created, stat)
}

// EndDiff prints, at the end of keel run (local or on a team server),
// the files the run changed (to out, with the progress) and how to see
// their diff (keel starts the command: keel --db PATH, keel --server
// URL), as the source's WorkspaceDiff tells (checkpoint.Changed; nothing
// for a run without a git commit or checkpoints); events are read to
// tell whether the run ended.
func EndDiff(ctx context.Context, out io.Writer, src DiffSource, runID string, created *agent.RunCreated, events func() ([]journal.Event, error), keel string) {
	var b strings.Builder
	if err := RunDiff(ctx, &b, src.WorkspaceDiff, runID, created, true); err != nil {
		if created.Git != nil {
			fmt.Fprintf(out, "keel: %v\n", err)
		}
		return
	}
	text := b.String()
	if rest, ok := strings.CutPrefix(text, "no files changed"); ok && !ended(runID, events) {
		// A run that paused (for an approval, say) before its first
		// edit has changed nothing yet.
		text = "no files changed yet" + rest
	}
	fmt.Fprintf(out, "\n%s", text)
	if !strings.HasPrefix(text, "no files changed") {
		fmt.Fprintf(out, "diff: %s runs diff %s\n", keel, runID)
	}
}

// ended reports whether run id, whose journal events reads, has ended
// (completed, failed or canceled); false when it cannot be read.
func ended(id string, events func() ([]journal.Event, error)) bool {
	evs, err := events()
	if err != nil {
		return false
	}
	st, err := agent.Fold(id, evs)
	return err == nil && st.Status.Terminal()
}

// DemoEnd prints the end of keel demo (both forms): the files run runID
// (created is its run.created) changed with their diff, from src, and how
// to run a real model; keel is the command prefix of the hints.
func DemoEnd(ctx context.Context, stdout, stderr io.Writer, src DiffSource, runID string, created *agent.RunCreated, keel string) {
	head := fmt.Sprintf("\n== diff made in %s (%s runs diff %s) ==\n", created.Workspace, keel, runID)
	if created.Git == nil {
		fmt.Fprint(stdout, head)
		fmt.Fprintln(stdout, "(git is not installed: compare textstats.py yourself)")
	} else if sum, err := src.WorkspaceDiff(ctx, runID, created); err != nil {
		fmt.Fprintf(stderr, "keel demo: no diff: %v (%s runs diff %s shows it)\n", err, keel, runID)
	} else {
		// The only word on the files: the run's own closing summary is
		// left to this (liveOptions.demo).
		fmt.Fprint(stdout, head)
		got := func(context.Context, string, *agent.RunCreated) (*checkpoint.Summary, error) { return sum, nil }
		if err := RunDiff(ctx, stdout, got, runID, created, false); err != nil {
			fmt.Fprintf(stdout, "(diff failed: %v)\n", err)
		}
	}
	fmt.Fprintln(stdout, "\nThe model in this demo was scripted, not an AI model. Run a real one with:")
	fmt.Fprintln(stdout, "  OPENAI_API_KEY=... keel run --model openai:gpt-4o --workspace DIR 'your task'")
}
