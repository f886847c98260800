package tui

import (
	"encoding/json"
	"fmt"
	"io"
	"path"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/tool/builtin/fs"
)

// CheckpointsSince is what a diff between a run's checkpoints covers.
func CheckpointsSince(from, to int64) string { return checkpoint.CheckpointsSince(from, to) }

// EditsUpTo prints the file edits of run runID (its events) up to event
// seq at: each write_file and edit_file call that succeeded, with its
// path (keel runs diff --at of a run without checkpoints).
func EditsUpTo(out io.Writer, runID string, events []journal.Event, at int64) error {
	w := Esc(out)
	paths := map[string]string{}
	n := 0
	for i := range events {
		e := &events[i]
		if e.Seq > at {
			break
		}
		v, err := agent.Decode(e)
		if err != nil {
			return err
		}
		switch x := v.(type) {
		case *agent.ModelResponded:
			for _, c := range x.Message.ToolCalls {
				if c.Name != fs.WriteName && c.Name != fs.EditName {
					continue
				}
				var args struct {
					Path string `json:"path"`
				}
				if json.Unmarshal([]byte(c.Arguments), &args) == nil && args.Path != "" {
					paths[c.ID] = path.Clean(args.Path)
				}
			}
		case *agent.ToolFinished:
			p, ok := paths[x.CallID]
			if !ok || x.IsError || x.Synthetic {
				continue
			}
			n++
			fmt.Fprintf(w, "%d\t%s\t%s\n", e.Seq, x.Tool, p)
		}
	}
	if n == 0 {
		fmt.Fprintf(w, "no file edits up to event %d\n", at)
	}
	fmt.Fprintf(w, "note: run %s has no workspace checkpoints (it ran before they existed, or without git): these are the edits of Keel's file tools up to event %d; what shell commands changed, and the files' contents at that event, are not known\n", runID, at)
	return nil
}
