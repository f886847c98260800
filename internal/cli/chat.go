package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/agent"
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
the conversation. The run stays in the journal: keel runs resume RUN
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
		m, ok := a.prompt.Ask(ctx, "you> ")
		if !ok || strings.TrimSpace(m) == "/exit" {
			return "", usagef("no task: the conversation ended before a message")
		}
		if strings.TrimSpace(m) != "" {
			return m, nil
		}
	}
}

// inline reports whether approvals are asked for at the terminal.
func (a *app) inline() bool { return tui.IsTerminal(os.Stdin) }

// decideInline asks the person at the terminal about each pending
// approval and records each answer as keel approve / keel deny would
// (tui.Prompt.DecideInline).
func (a *app) decideInline(ctx context.Context, store journal.Store, created *agent.RunCreated, pending []agent.PendingApproval) bool {
	l := &local{a: a, store: store}
	return a.prompt.DecideInline(ctx, created, pending, a.person(""), l.Decide)
}

// approveAsStandIn approves each pending call as standIn after showing
// it (tui.ApproveAsStandIn).
func (a *app) approveAsStandIn(ctx context.Context, store journal.Store, created *agent.RunCreated, pending []agent.PendingApproval, standIn string) bool {
	l := &local{a: a, store: store}
	return tui.ApproveAsStandIn(ctx, a.stderr, created, pending, standIn, l.Decide)
}

// converse goes on with runID after each answer (tui.Prompt.Converse):
// a failed execution (exit status 1) goes on with the next message;
// anything else ends the conversation.
func (a *app) converse(ctx context.Context, rt *agent.Runtime, runID string, w *wiring, jsonOut, quiet bool, err error, interrupted bool) error {
	goesOn := func(err error) bool {
		var ee *exitError
		return errors.As(err, &ee) && ee.code == 1
	}
	return a.prompt.Converse(ctx, runID, a.keelCmd(), err, interrupted, goesOn, func(ctx context.Context, m string) error {
		return a.execute(ctx, rt, runID, w, jsonOut, quiet, m)
	})
}
