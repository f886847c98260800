package tui

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/checkpoint"
)

// RunDiff prints the changes of the run made by created, as diff
// finds them: a list of files with their added and removed lines, then
// (unless stat) their diffs.
func RunDiff(ctx context.Context, out io.Writer, diff func(context.Context, string, *agent.RunCreated) ([]checkpoint.Change, error), runID string, created *agent.RunCreated, stat bool) error {
	if created.Git == nil {
		return fmt.Errorf("run %s recorded no git commit at its start (its workspace %s was not the top of a git repository with a commit, or the run predates the record): there is nothing to compare with", runID, created.Workspace)
	}
	changes, err := diff(ctx, runID, created)
	if err != nil {
		return err
	}
	w := escWriter{out}
	short := created.Git.Commit[:min(12, len(created.Git.Commit))]
	if len(changes) == 0 {
		fmt.Fprintf(w, "no files changed since %s in %s\n", short, created.Workspace)
		return nil
	}
	Changes(w, changes, fmt.Sprintf("since %s in %s", short, created.Workspace), true)
	if len(created.Git.Dirty) > 0 {
		fmt.Fprintf(w, "note: %d file(s) had uncommitted changes when the run started; their diff includes them: %s\n", len(created.Git.Dirty), strings.Join(created.Git.Dirty, ", "))
	}
	if !stat {
		printPatches(w, changes)
	}
	return nil
}

// Changes prints the list of changed files (with what, "since
// ..."), then, unless stat, their diffs.
func Changes(w io.Writer, changes []checkpoint.Change, what string, stat bool) {
	if len(changes) == 0 {
		fmt.Fprintf(w, "no files changed %s\n", what)
		return
	}
	added, removed, files := 0, 0, 0
	for _, c := range changes {
		added, removed, files = added+c.Added, removed+c.Removed, files+max(c.Files, 1)
	}
	fmt.Fprintf(w, "%d file(s) changed %s (+%d -%d)\n", files, what, added, removed)
	for _, c := range changes {
		name := checkpoint.QuotePath(c.Path)
		if c.Denied {
			fmt.Fprintf(w, "  %s %s (%s)\n", c.Status, name, deniedNote)
			continue
		}
		if c.Files > 0 {
			fmt.Fprintf(w, "  %s %s (%d files %s, written since the run started; not listed)\n", c.Status, name, c.Files, ignoredWhere(c))
			continue
		}
		var notes []string
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
