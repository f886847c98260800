package checkpoint

import (
	"fmt"
	"strings"

	"github.com/keel-run/keel/agent"
)

// The words every front end shows around a run's changes ([Changed]):
// keel run's and chat's closing summary, keel runs diff and the web
// UI's files say the same.

// What says what the run made by created is compared with, after "N
// file(s) changed".
func (s *Summary) What(created *agent.RunCreated) string {
	if created.Git == nil {
		return CheckpointsSince(s.From, s.At)
	}
	short := created.Git.Commit[:min(12, len(created.Git.Commit))]
	what := fmt.Sprintf("since commit %s in %s", short, created.Workspace)
	if s.From > 0 {
		what = fmt.Sprintf("since the run started at commit %s (its first checkpoint: event %d) in %s", short, s.From, created.Workspace)
	}
	if s.At > 0 {
		what += fmt.Sprintf(" (as the run left them: its last checkpoint, event %d)", s.At)
	}
	return what
}

// CheckpointsSince is what a diff between a run's checkpoints (of
// events from and to) covers, for a run without a start commit.
func CheckpointsSince(from, to int64) string {
	return fmt.Sprintf("since the run's first checkpoint (event %d; no git commit was recorded at its start), at the checkpoint of event %d", from, to)
}

// Notes are the notes under the run's changes (of the run made by
// created): the files left out as not the run's, and, for a run whose
// checkpoints could not tell, the files that differed at its start.
func (s *Summary) Notes(created *agent.RunCreated) []string {
	var notes []string
	for _, n := range []string{BeforeNote(s.Before), OutsideNote(s.Outside), LaterNote(s.At, s.Later)} {
		if n != "" {
			notes = append(notes, n)
		}
	}
	if s.From == 0 && created.Git != nil && len(created.Git.Dirty) > 0 && len(s.Changes) > 0 {
		notes = append(notes, fmt.Sprintf("%d file(s) had uncommitted changes when the run started; their diff includes them: %s", len(created.Git.Dirty), strings.Join(created.Git.Dirty, ", ")))
	}
	return notes
}

// Reviewed reports whether c is a change a person reviews as the run's:
// not a file git ignores (build output, caches), unless it runs on its
// own or is hidden only by rules the run wrote. A directory standing for
// many ignored files (Files) is not one: it counts as its files, apart,
// also when some of them are code that runs (its line says so).
func (c Change) Reviewed() bool {
	return c.Files == 0 && (!c.Ignored || c.Autorun != "" || c.Hidden)
}

// Reviewed counts the changes a person reviews as the run's (the others
// are listed apart, uncounted).
func Reviewed(changes []Change) int {
	n := 0
	for _, c := range changes {
		if c.Reviewed() {
			n++
		}
	}
	return n
}

// Unreviewed counts the files of changes a person does not review as
// the run's (files git ignores: build output, caches), a directory
// standing for many counting them all.
func Unreviewed(changes []Change) int {
	n := 0
	for _, c := range changes {
		if !c.Reviewed() {
			n += max(c.Files, 1)
		}
	}
	return n
}
