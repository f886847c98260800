package foreground

import (
	"context"
	"errors"
	"fmt"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// ChatParams are what keel chat's commands need beyond the execution:
// the run's diff printed (keel runs diff), and its files put back as
// they were at an event (keel runs rewind, through the service).
type ChatParams struct {
	Diff   func(ctx context.Context, stat bool) error
	Rewind func(ctx context.Context, to int64) (*api.Rewound, error)
}

// Commands are keel chat's commands on run id (/help and /exit are the
// prompt's own); tell gives the model a note with the next message.
func (x *Execution) Commands(id string, cp *ChatParams, tell func(string)) []tui.Command {
	store := x.Runtime.Store()
	state := func(ctx context.Context) (*agent.State, []journal.Event, error) {
		events, err := store.Read(ctx, id, 1)
		if err != nil {
			return nil, nil, err
		}
		st, err := agent.Fold(id, events)
		return st, events, err
	}
	return []tui.Command{
		{Name: "diff", Usage: "[--stat]", Help: "the files this run changed, with their diff (keel runs diff)", Do: func(ctx context.Context, arg string) error {
			return cp.Diff(ctx, arg == "--stat")
		}},
		{Name: "undo", Help: "put the files back as they were before your last message (keel runs rewind; the model is told)", Do: func(ctx context.Context, _ string) error {
			st, events, err := state(ctx)
			if err != nil {
				return err
			}
			// The newest message the person typed, else the task.
			to := int64(1)
			for _, e := range events {
				if e.Type != journal.UserMessage {
					continue
				}
				if v, err := agent.Decode(&e); err == nil && v.(*agent.UserMessage).Source == "" {
					to = e.Seq
				}
			}
			if st.Checkpoint == nil {
				return errors.New("this run has no workspace checkpoints (--no-checkpoints, or a workspace Keel cannot snapshot): nothing to undo")
			}
			r, err := cp.Rewind(ctx, to)
			if err != nil {
				return err
			}
			tui.Rewound(x.Stderr, id, r)
			if len(r.Files) > 0 || r.MoreFiles > 0 {
				tell(fmt.Sprintf("[The person undid the file changes made since event %d (keel runs rewind): the workspace's files are as they were then; read them again before relying on what you saw.]", to))
			}
			return nil
		}},
		{Name: "cost", Help: "the steps, tokens and cost of this run so far", Do: func(ctx context.Context, _ string) error {
			st, _, err := state(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(x.Stderr, "keel: run %s · %d steps · %s tok (%s in, %s out) · $%.4f · model %s\n", id, st.Steps,
				agent.Num(st.Usage.Total()), agent.Num(st.Usage.InputTokens), agent.Num(st.Usage.OutputTokens), st.Cost, st.Created.Model)
			return nil
		}},
		{Name: "model", Help: "the model of this run", Do: func(ctx context.Context, arg string) error {
			st, _, err := state(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(x.Stderr, "keel: run %s uses model %s\n", id, st.Created.Model)
			if arg != "" {
				fmt.Fprintf(x.Stderr, "keel: a run keeps its model (its resumes and forks use it too); for %s, /exit and start another: %s chat --model %s\n", arg, x.Keel, tui.ShellWord(arg))
			}
			return nil
		}},
	}
}
