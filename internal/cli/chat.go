package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/foreground"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
)

// chatCmd is keel run -i under its own name.
func (a *app) chatCmd() *cobra.Command {
	cmd := a.runCmd()
	cmd.Use = "chat [flags] [TASK]"
	cmd.Short = "Talk with an agent: after each answer, type the next message into the same run"
	cmd.Long = `Chat is keel run -i: it runs the agent on TASK (or on the first message
typed), and after each answer reads the next message from the terminal and
continues the same run with it (journaled as a user message, read verbatim
by every later model call). An empty line is ignored; Ctrl-D or /exit ends
the conversation. A line starting with / is a command, never sent to the
model: /help lists them (/diff, /undo, /cost, /model); // sends a message
starting with /. The run stays in the journal: keel runs resume RUN
--message TEXT continues it later.

When stdin is a terminal, a call that needs approval is asked about right
there: y approves, n denies (with a reason the model is told), r approves
it for the rest of this run, a for every run of this agent. An edit
waiting for approval is shown as the unified diff it would make.

Every flag of keel run applies.`
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if err := c.Flags().Set("interactive", "true"); err != nil {
			return err
		}
		return run(c, args)
	}
	return cmd
}

// firstMessage asks for the task of a chat given none.
func (a *app) firstMessage(ctx context.Context) (string, error) {
	fmt.Fprintln(a.stderr, "keel: chat: type the task; after each answer, the next message (Ctrl-D or /exit ends)")
	for {
		m, ok := a.prompt.Message(ctx, "you> ")
		if !ok || strings.TrimSpace(m) == "/exit" {
			return "", usagef("no task: the conversation ended before a message")
		}
		switch t := strings.TrimSpace(m); {
		case strings.HasPrefix(t, "//"):
			return t[1:], nil
		case strings.HasPrefix(t, "/"):
			fmt.Fprintln(a.stderr, "keel: chat: there is no run yet for a command: type the task first (a task starting with / is typed as //)")
		case t != "":
			return m, nil
		}
	}
}

// inline reports whether approvals are asked for at the terminal.
func (a *app) inline() bool { return tui.IsTerminal(os.Stdin) }

// converse goes on with runID after each answer (tui.Prompt.Converse):
// a failed execution (exit status 1) goes on with the next message;
// anything else ends the conversation.
func (a *app) converse(ctx context.Context, x *foreground.Execution, runID string, err error, interrupted bool) error {
	goesOn := func(err error) bool {
		var ee *exitError
		return errors.As(err, &ee) && ee.code == 1
	}
	// note is said to the model with the next message: what a command
	// changed that the model would not know.
	var note string
	cmds := a.chatCommands(x.Runtime.Store(), runID, func(s string) { note = s })
	return a.prompt.Converse(ctx, runID, a.keelCmd(), err, interrupted, goesOn, cmds, func(ctx context.Context, m string) error {
		if note != "" {
			m, note = note+"\n\n"+m, ""
		}
		return execute(ctx, x, runID, nil, m)
	})
}

// chatCommands are keel chat's commands on run id (/help and /exit are
// the prompt's own); tell gives the model a note with the next message.
func (a *app) chatCommands(store journal.Store, id string, tell func(string)) []tui.Command {
	l := &local{a: a, store: store}
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
			return a.runsDiff(ctx, l, id, 0, arg == "--stat")
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
			r, err := l.Rewind(ctx, id, to, a.person(""))
			if err != nil {
				return err
			}
			tui.Rewound(a.stderr, id, r)
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
			fmt.Fprintf(a.stderr, "keel: run %s · %d steps · %s tok (%s in, %s out) · $%.4f · model %s\n", id, st.Steps,
				agent.Num(st.Usage.Total()), agent.Num(st.Usage.InputTokens), agent.Num(st.Usage.OutputTokens), st.Cost, st.Created.Model)
			return nil
		}},
		{Name: "model", Help: "the model of this run", Do: func(ctx context.Context, arg string) error {
			st, _, err := state(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "keel: run %s uses model %s\n", id, st.Created.Model)
			if arg != "" {
				fmt.Fprintf(a.stderr, "keel: a run keeps its model (its resumes and forks use it too); for %s, /exit and start another: %s chat --model %s\n", arg, a.keelCmd(), tui.ShellWord(arg))
			}
			return nil
		}},
	}
}
