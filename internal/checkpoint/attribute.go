package checkpoint

import (
	"context"
	"slices"
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// attribute splits sum's changes (of the run made by created, compared
// with the commit it started on; Mask not yet applied) by who made
// them, with o from the run's journal: a file that already differed
// from the commit when the run started (its first snapshot) and that
// the run left as it found it is the person's, named in sum.Before; a
// file changed only while the run did nothing (paused, waiting) is not
// the run's either, named in sum.Outside; a file the run changed that
// had differed from the commit at its start is shown from the run's
// start (its first snapshot) when the run has stopped. Files the
// snapshots do not hold (ignored by git, refs, nested repositories)
// are left as they are: only what the snapshots prove moves a file out
// of the run's changes.
func attribute(ctx context.Context, created *agent.RunCreated, sum *Summary, o *owners) error {
	g, err := ReadCheckpoints(ctx, o.first.Store, created.Workspace)
	if err != nil {
		return err
	}
	start, err := g.files(ctx, o.first.Tree)
	if err != nil {
		return err
	}
	var end map[string]entry // the run's side: where it left its files
	if sum.At > 0 {
		if end, err = g.files(ctx, o.last.Tree); err != nil {
			return err
		}
	}
	dirty := map[string]bool{}
	for _, p := range created.Git.Dirty {
		dirty[p] = true
	}
	// result reports whether the run's side of p is e (nil: no file).
	result := func(p string, e *entry) bool {
		if end != nil {
			r, ok := end[p]
			if e == nil || !ok {
				return e == nil && !ok
			}
			return r == *e
		}
		cur, kind, err := readKind(created.Workspace + "/" + p)
		if err != nil || e == nil || kind == 0 {
			return err == nil && e == nil && kind == 0
		}
		return (e.mode == "120000") == (kind == 'l') && hashObject("blob", cur).String() == e.sha
	}
	var fromStart map[string]Change // the run's own diffs, from its start
	own := func(p string) (Change, bool, error) {
		if fromStart == nil {
			cs, err := g.Diff(ctx, o.first.Tree, o.last.Tree)
			if err != nil {
				return Change{}, false, err
			}
			fromStart = map[string]Change{}
			for _, c := range cs {
				fromStart[c.Path] = c
			}
		}
		c, ok := fromStart[p]
		return c, ok, nil
	}
	var last map[string]entry // the run's newest snapshot, read when needed
	out := sum.Changes[:0:0]
	listed := map[string]bool{}
	for _, c := range sum.Changes {
		listed[c.Path] = true
		if !plain(c) {
			out = append(out, c)
			continue
		}
		s, inStart := start[c.Path]
		var se *entry
		if inStart {
			se = &s
		}
		atStart := inStart || (c.Status == Deleted && dirty[c.Path])
		if atStart && !o.run[c.Path] && result(c.Path, se) {
			// As the run found it: changed before the run.
			if o.outside[c.Path] {
				// Changed meanwhile and back: not the run's either.
				sum.Outside = append(sum.Outside, c.Path)
			} else {
				sum.Before = append(sum.Before, c.Path)
			}
			continue
		}
		if o.outside[c.Path] && !o.run[c.Path] {
			// Changed only while the run did nothing: not the run's,
			// unless it changed again since its newest snapshot (while
			// it executes).
			still := end != nil
			if !still {
				if last == nil {
					if last, err = g.files(ctx, o.last.Tree); err != nil {
						return err
					}
				}
				e, ok := last[c.Path]
				still = (ok && result(c.Path, &e)) || (!ok && result(c.Path, nil))
			}
			if still {
				sum.Outside = append(sum.Outside, c.Path)
				continue
			}
		}
		differed := dirty[c.Path] || (inStart && c.Status == Added)
		if differed && end != nil {
			if oc, ok, err := own(c.Path); err != nil {
				return err
			} else if ok {
				oc.Later, oc.Autorun, oc.Link = c.Later, c.Autorun, c.Link
				oc.Note = joinNote(c.Note, "differed from the start commit when the run started: the diff is from the run's start")
				c = oc
			}
		} else if differed {
			c.Note = joinNote(c.Note, "differed from the start commit when the run started: the diff includes that")
		}
		if o.outside[c.Path] {
			c.Outside = true
		}
		out = append(out, c)
	}
	if end != nil {
		// A file the run put back as the commit has it (a change of the
		// person's it undid) differs from the run's start, not from the
		// commit.
		for p := range o.run {
			if listed[p] {
				continue
			}
			oc, ok, err := own(p)
			if err != nil {
				return err
			}
			if ok {
				oc.Note = joinNote(oc.Note, "differed from the start commit when the run started: the run put it back as the commit has it")
				oc.Outside = o.outside[p]
				out = append(out, oc)
			}
		}
	}
	sortChanges(out)
	sum.Changes = out
	sum.From = o.first.Seq
	return nil
}

// sortChanges sorts changes by path.
func sortChanges(changes []Change) {
	slices.SortFunc(changes, func(a, b Change) int { return strings.Compare(a.Path, b.Path) })
}

// plain reports whether c is a change of a file the run's snapshots
// hold: a file of the work tree git lists (not ignored, not in .git,
// not shown whole for a forged history).
func plain(c Change) bool {
	return !c.Ignored && c.Files == 0 && !c.Hidden && !c.Rewritten && c.Path != ".git" && !strings.HasPrefix(c.Path, ".git/")
}

// Changed returns what the run made by created changed (events, its
// journal from event 1): the one answer every front end gives (keel
// run's and chat's closing summary, keel runs diff, the API's diff, the
// web UI's files). With a start commit it is [SinceStart]'s; without
// one (a workspace that is not a git repository's top, a fork into a
// new directory), the run's first checkpoint against its newest
// (Summary.From and At; ErrNone when it has none). Either way the files
// that changed only while the run did nothing (paused, waiting for a
// person) are left out and named in Summary.Outside.
func Changed(ctx context.Context, created *agent.RunCreated, events []journal.Event) (*Summary, error) {
	if created.Git != nil {
		return SinceStart(ctx, created, events)
	}
	if len(events) == 0 {
		return nil, ErrNone
	}
	changes, from, to, err := Diff(ctx, events, events[len(events)-1].Seq)
	if err != nil {
		return nil, err
	}
	sum := &Summary{Changes: changes, From: from, At: to}
	o, err := whoChanged(ctx, events, nil, nil, "")
	if err != nil || o == nil {
		return sum, err
	}
	out := changes[:0:0]
	for _, c := range changes {
		switch {
		case o.outside[c.Path] && !o.run[c.Path]:
			sum.Outside = append(sum.Outside, c.Path)
			continue
		case o.outside[c.Path]:
			c.Outside = true
		}
		out = append(out, c)
	}
	sum.Changes = out
	return sum, nil
}
