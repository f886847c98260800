package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/internal/foreground"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/server/api"
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
model: /help lists them (/diff, /undo, /cost, /model, /limit); // sends a message
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
			// /help lists the commands; the others need the run.
			a.prompt.Command(ctx, t, foreground.ChatCommands())
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
	l := &local{a: a, store: x.Runtime.Store()}
	cmds := x.Commands(runID, &foreground.ChatParams{
		Diff: func(ctx context.Context, stat bool) error { return a.runsDiff(ctx, l, runID, 0, stat) },
		Rewind: func(ctx context.Context, to int64, force bool) (r *api.Rewound, err error) {
			err = a.session(ctx, l.store, "", func(l *local) (err error) {
				r, err = l.Rewind(ctx, runID, &api.RewindRun{To: to, Force: force})
				return err
			})
			return r, err
		},
	}, func(s string) { note = s })
	given := x.Limits // what /limit sets counts for one execution
	return a.prompt.Converse(ctx, runID, a.keelCmd(), err, interrupted, goesOn, cmds, func(ctx context.Context, m string) error {
		if why := x.AtLimit(ctx, runID); why != "" {
			fmt.Fprintf(a.stderr, "keel: %s\n", why)
			return &exitError{1}
		}
		if note != "" {
			m, note = note+"\n\n"+m, ""
		}
		defer func() { x.Limits = given }()
		return execute(ctx, x, runID, nil, m)
	})
}
