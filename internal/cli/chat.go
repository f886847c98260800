package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/gitws"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool/builtin/fs"
	"github.com/keel-run/keel/visible"
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
		m, ok := a.ask(ctx, "you> ")
		if !ok || strings.TrimSpace(m) == "/exit" {
			return "", usagef("no task: the conversation ended before a message")
		}
		if strings.TrimSpace(m) != "" {
			return m, nil
		}
	}
}

// converse goes on with runID after each answer: it reads the person's
// next message and executes the run with it, until the input ends, the
// person types /exit or presses Ctrl-C twice at the prompt, or the run
// stops in a way a message cannot go on from (paused for a person who
// left, canceled). A turn the person interrupted (Ctrl-C, see
// interrupt.go) goes on with the next message. err is the outcome of the
// execution so far, interrupted whether the person interrupted it; the
// last one's is returned.
func (a *app) converse(ctx context.Context, rt *agent.Runtime, runID string, w *wiring, jsonOut, quiet bool, err error, interrupted bool) error {
	fmt.Fprintf(a.stderr, "keel: chat: your next message for run %s (empty line: nothing; Ctrl-D or /exit ends; Ctrl-C interrupts a turn)\n", runID)
	defer a.intr.set(nil)
	for ctx.Err() == nil {
		var ee *exitError
		if err != nil && !interrupted && (!errors.As(err, &ee) || ee.code != 1) {
			return err // paused, canceled, or the runtime failed
		}
		if interrupted {
			fmt.Fprintln(a.stderr, "keel: interrupted; the model is told when your next message goes on")
		}
		a.atPrompt()
		m, ok := a.ask(ctx, "you> ")
		if !ok || strings.TrimSpace(m) == "/exit" {
			if interrupted {
				fmt.Fprintf(a.stderr, "keel: run %s stays paused (interrupted); %s runs resume %s --message TEXT goes on\n", runID, a.keelCmd(), runID)
			}
			return err
		}
		if strings.TrimSpace(m) == "" {
			continue
		}
		interrupted, err = a.turn(ctx, func(ctx context.Context) error {
			return a.execute(ctx, rt, runID, w, jsonOut, quiet, m)
		})
	}
	return err
}

// inline reports whether approvals are asked for at the terminal.
func (a *app) inline() bool { return isTerminal(os.Stdin) }

// decideInline asks the person about each pending approval and records
// each answer as keel approve / keel deny would. It returns false when
// the input ended before every call was decided (the run then waits for
// a decision from elsewhere, as without a terminal).
func (a *app) decideInline(ctx context.Context, store journal.Store, created *agent.RunCreated, pending []agent.PendingApproval) bool {
	l := &local{a: a, store: store}
	for _, p := range pending {
		fmt.Fprintf(a.stderr, "\nkeel: call %s (%s) needs your approval:\n", visible.String(p.CallID), p.Tool)
		a.showPending(created, p)
		for decided := false; !decided; {
			ans, ok := a.ask(ctx, "  approve? [y]es, [n]o, [r] always for this run, [a] always for this agent: ")
			if !ok && ctx.Err() != nil {
				return false // interrupted (Ctrl-C): the run stops, nothing to decide
			}
			if !ok {
				fmt.Fprintf(a.stderr, "keel: no answer; decide with: keel approve %s %s   or   keel deny %s %s --reason TEXT\n", p.RunID, shellWord(p.CallID), p.RunID, shellWord(p.CallID))
				return false
			}
			res := &agent.ApprovalResolved{Decision: policy.Allow, By: a.person("")}
			switch strings.ToLower(strings.TrimSpace(ans)) {
			case "y", "yes":
			case "r", "run":
				res.Remember = policy.ScopeRun
			case "a", "agent":
				res.Remember = policy.ScopeAgent
			case "n", "no":
				reason, ok := a.ask(ctx, "  why (the model is told): ")
				if !ok {
					return false
				}
				if strings.TrimSpace(reason) == "" {
					reason = "denied at the terminal"
				}
				res.Decision, res.Reason = policy.Deny, reason
			default:
				fmt.Fprintln(a.stderr, "  answer y, n, r or a")
				continue
			}
			if err := l.Decide(ctx, p.RunID, p.CallID, res); err != nil {
				// A command that cannot be remembered (a compound one)
				// is still asked about: say why and ask again.
				fmt.Fprintf(a.stderr, "  keel: %v\n", err)
				continue
			}
			decided = true
			verb := map[policy.Effect]string{policy.Allow: "approved", policy.Deny: "denied"}[res.Decision]
			switch res.Remember {
			case policy.ScopeRun:
				verb += ", and matching calls from now on in this run"
			case policy.ScopeAgent:
				verb += ", and matching calls from now on in every run of agent " + created.Principal
			}
			fmt.Fprintf(a.stderr, "keel: %s\n", verb)
		}
	}
	return true
}

// showPending prints what a call waiting for approval would do: its
// action, the parts that asked and why, and, for a file edit, its diff.
func (a *app) showPending(created *agent.RunCreated, p agent.PendingApproval) {
	for _, line := range strings.Split(visible.String(p.Action), "\n") {
		fmt.Fprintf(a.stderr, "    │ %s\n", line)
	}
	for _, part := range p.Parts {
		fmt.Fprintf(a.stderr, "  asks: %s — %s\n", clip(oneLine(visible.String(part.Text)), 160), visible.String(part.Reason))
		if part.Detail != "" {
			fmt.Fprintf(a.stderr, "        (%s)\n", clip(visible.String(part.Detail), 160))
		}
	}
	if d := pendingDiff(created, p.Tool, p.Arguments); d != "" {
		fmt.Fprint(a.stderr, d)
	}
}

// approveAsStandIn approves each pending call as standIn, for a run
// whose approvals nobody can answer here but that must show its gate
// (keel demo with stdin not a terminal): each call is shown as a person
// would see it, with its diff, and the approval says who gave it. It
// returns false when a decision could not be recorded.
func (a *app) approveAsStandIn(ctx context.Context, store journal.Store, created *agent.RunCreated, pending []agent.PendingApproval, standIn string) bool {
	l := &local{a: a, store: store}
	for _, p := range pending {
		fmt.Fprintf(a.stderr, "\nkeel: call %s (%s) needs a person's approval:\n", visible.String(p.CallID), p.Tool)
		a.showPending(created, p)
		fmt.Fprintf(a.stderr, "keel: stdin is not a terminal, so nobody can answer here: approved by %s (--no-wait stops at the approval instead; keel approve/deny decide from any process)\n", standIn)
		res := &agent.ApprovalResolved{Decision: policy.Allow, By: standIn, Reason: "stdin was not a terminal"}
		if err := l.Decide(ctx, p.RunID, p.CallID, res); err != nil {
			fmt.Fprintf(a.stderr, "keel: %v\n", err)
			return false
		}
	}
	return true
}

// maxDiffLines bounds the diff shown for an edit waiting for approval.
const maxDiffLines = 200

// pendingDiff is the unified diff a file-writing call would make, indented,
// or "" for other calls. The file is read inside the workspace only.
func pendingDiff(created *agent.RunCreated, toolName string, args json.RawMessage) string {
	if toolName != "edit_file" && toolName != "write_file" {
		return ""
	}
	var in struct {
		Path string `json:"path"`
	}
	if json.Unmarshal(args, &in) != nil || in.Path == "" {
		return ""
	}
	rel := in.Path
	if path.IsAbs(rel) {
		r, ok := strings.CutPrefix(path.Clean(rel), strings.TrimSuffix(created.MountPath, "/")+"/")
		if !ok {
			return ""
		}
		rel = r
	}
	rel = path.Clean(rel)
	if rel == "." || strings.HasPrefix(rel, "../") || rel == ".." {
		return ""
	}
	var old []byte
	if root, err := os.OpenRoot(created.Workspace); err == nil {
		old, _ = root.ReadFile(filepath.FromSlash(rel))
		root.Close()
	}
	cur, msg := fs.Preview(toolName, args, old)
	if msg != "" {
		return "  (no diff: " + visible.String(msg) + ")\n"
	}
	c := gitws.FileDiff(rel, old, cur)
	switch {
	case c.Binary:
		return "  (binary or large file: no line diff)\n"
	case c.Patch == "":
		return "  (the file would not change)\n"
	}
	lines := strings.Split(strings.TrimRight(visible.String(c.Patch), "\n"), "\n")
	var b strings.Builder
	fmt.Fprintf(&b, "  the edit (+%d −%d):\n", c.Added, c.Removed)
	for i, l := range lines {
		if i == maxDiffLines {
			fmt.Fprintf(&b, "    … %d more lines\n", len(lines)-i)
			break
		}
		b.WriteString("    " + l + "\n")
	}
	return b.String()
}
