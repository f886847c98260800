package tui

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// Rewound prints what a rewind of run runID did (keel runs rewind, keel
// chat's /undo) to out, with how to undo it: keel is the command that
// acts where the rewind did (keel, keel --db FILE, keel --server URL).
func Rewound(out io.Writer, keel, runID string, r *api.Rewound) {
	w := Esc(out)
	fmt.Fprintf(w, "run %s: files restored to the checkpoint of event %d (%s), journaled as event %d\n", runID, r.To, Short(r.Tree), r.Seq)
	switch {
	case r.Asked > 0 && r.To > r.Asked && r.Later > 0:
		fmt.Fprintf(w, "event %d is in a step whose checkpoint is event %d: the files have the effect of the calls up to event %d, and of %d more of that step that finished after it\n", r.Asked, r.To, r.Asked, r.Later)
	case r.Asked > 0 && r.To > r.Asked:
		fmt.Fprintf(w, "event %d is in a step whose checkpoint is event %d: the files have the effect of the calls up to event %d\n", r.Asked, r.To, r.Asked)
	case r.Asked > 0 && r.Missing > 0:
		fmt.Fprintf(w, "event %d: no checkpoint after its step (the run paused, resumed or was rewound before one was taken), so the files are those of event %d, without the effects of %d calls that finished between them\n", r.Asked, r.To, r.Missing)
	case r.Asked > 0:
		fmt.Fprintf(w, "event %d: the newest checkpoint at or before it is event %d (no file changed between them)\n", r.Asked, r.To)
	}
	RewoundKept(w, r.Kept)
	if r.Note != "" {
		fmt.Fprintf(w, "%s\n", r.Note)
	}
	if len(r.Files) == 0 && r.MoreFiles == 0 {
		fmt.Fprintf(w, "no file changed: the workspace already had the run's files of that point\n")
		return
	}
	for _, f := range r.Files {
		fmt.Fprintf(w, "  %s %s\n", f.Status, f.Path)
	}
	if r.MoreFiles > 0 {
		fmt.Fprintf(w, "  ... and %d more\n", r.MoreFiles)
	}
	fmt.Fprintf(w, "undo: %s runs rewind %s --to %d\n", keel, runID, RewindUndo(r))
}

// RewoundKept says which files a rewind left as they were (changed only
// outside the run since the checkpoint); nothing when none.
func RewoundKept(out io.Writer, kept []string) {
	if len(kept) == 0 {
		return
	}
	w := Esc(out)
	fmt.Fprintf(w, "left as they are: %d file(s) changed since then only outside the run (by hand, or by another run):\n", len(kept))
	for i, p := range kept {
		if i == 10 {
			fmt.Fprintf(w, "  ... and %d more\n", len(kept)-i)
			break
		}
		fmt.Fprintf(w, "  %s\n", p)
	}
}

// RewindUndo is the event to rewind to to undo rewind r: the one it
// names, or (from a server that does not) the event before it.
func RewindUndo(r *api.Rewound) int64 {
	if r.Undo > 0 {
		return r.Undo
	}
	return r.Seq - 1
}

// Checkpoints prints keel runs checkpoints to out: the workspace
// checkpoints and rewinds among run runID's events.
func Checkpoints(out io.Writer, runID string, events []journal.Event) error {
	tw := tabwriter.NewWriter(Esc(out), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tKIND\tTREE\tMS\tFILES")
	n := 0
	for i := range events {
		e := &events[i]
		if !journal.KeepsStatus(e.Type) {
			continue
		}
		v, err := agent.Decode(e)
		if err != nil {
			return err
		}
		n++
		switch p := v.(type) {
		case *agent.WorkspaceCheckpoint:
			kind := "checkpoint"
			if p.Unfinished != 0 {
				kind = fmt.Sprintf("checkpoint (rewind %d unfinished)", p.Unfinished)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", e.Seq, e.Time.Local().Format("15:04:05"), kind, Short(p.Tree), p.DurationMS, Cell(fileList(p.Files, p.MoreFiles)))
		case *agent.WorkspaceRestored:
			fmt.Fprintf(tw, "%d\t%s\trestored to %d\t%s\t\t%s\n", e.Seq, e.Time.Local().Format("15:04:05"), p.To, Short(p.Tree), Cell(fileList(p.Files, p.MoreFiles)))
		case *agent.WorkspaceRestoring:
			// The rewind's intent; its end (or the checkpoint that
			// says it did not finish) follows.
			fmt.Fprintf(tw, "%d\t%s\trewinding to %d\t%s\t\t%s\n", e.Seq, e.Time.Local().Format("15:04:05"), p.To, Short(p.Tree), Cell(fileList(p.Files, p.MoreFiles)))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n == 0 {
		fmt.Fprintf(out, "run %s has no workspace checkpoints (it ran before they existed, or without git)\n", runID)
	}
	return nil
}

func fileList(files []agent.FileChange, more int) string {
	if len(files) == 0 && more == 0 {
		return "-"
	}
	parts := make([]string, 0, len(files))
	for _, f := range files {
		parts = append(parts, f.Status+" "+f.Path)
	}
	s := agent.Clip(strings.Join(parts, ", "), 100)
	if more > 0 {
		s += fmt.Sprintf(" (+%d more)", more)
	}
	return s
}

// Bytes is a size as people read it.
func Bytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// Forked says what keel runs fork made: run, forked from src at event
// at, and which files it has (fk); with noStart, how to start it (keel
// is the command prefix of the hint).
func Forked(stderr io.Writer, src string, at int64, run *api.Run, fk *service.Forked, noStart bool, keel string) {
	w := Esc(stderr)
	fmt.Fprintf(w, "keel: forked run %s at event %d as run %s in %s\n", src, at, run.ID, run.Workspace)
	switch {
	case fk.Files == 0:
		fmt.Fprintf(w, "keel: run %s has no workspace checkpoint at or before event %d: the fork works on the files as they are now\n", src, at)
	case fk.Files > at:
		fmt.Fprintf(w, "keel: event %d is in a step whose checkpoint is event %d: the files are those of that checkpoint, with the effect of the calls up to event %d (as runs rewind --to %d and runs diff --at %d give them)\n", at, fk.Files, at, at, at)
	case fk.After > 0:
		fmt.Fprintf(w, "keel: the files are those of the checkpoint of event %d; %d tool call(s) finished between it and event %d, whose effects they lack\n", fk.Files, fk.After, at)
	default:
		fmt.Fprintf(w, "keel: the files are those of the checkpoint of event %d\n", fk.Files)
	}
	if fk.NoRepo {
		fmt.Fprintf(w, "keel: %s is not a git repository: the repository of run %s could not be copied at its start commit (the log of the process that made the fork says why: keel serve's, for a fork through a server), so git commands in the fork fail and keel runs diff compares with its first checkpoint\n", run.Workspace, src)
	}
	switch {
	case noStart && fk.Completed:
		fmt.Fprintf(w, "keel: event %d completes run %s, so the fork is completed too; follow it up with: %s runs resume %s --message TEXT\n", at, src, keel, run.ID)
	case noStart:
		fmt.Fprintf(w, "keel: not started; start it with: %s runs resume %s\n", keel, run.ID)
	}
}
