package tui

import (
	"fmt"
	"io"
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// showTree prints the tree of child agents under st: each node's
// status, what it spent and what is left of its limits (a child's: its
// slice).
func showTree(w io.Writer, st *agent.State, events func(id string) ([]journal.Event, error)) {
	t := agent.LoadTree(st, events, agent.MaxTreeRuns)
	fmt.Fprintf(w, "\ntree (spent itself · with children / limits · left):\n")
	printTree(w, t, "")
}

func printTree(w io.Writer, t *agent.Tree, indent string) {
	name := t.RunID
	if t.Agent != "" {
		name += " (" + t.Agent + ")"
	}
	status := string(t.Status)
	if t.Reason != "" {
		status += " " + t.Reason
	}
	fmt.Fprintf(w, "%s%s  %s\n", indent, name, status)
	fmt.Fprintf(w, "%s    spent %s · with children %s\n", indent, t.Own, t.Used)
	fmt.Fprintf(w, "%s    limits %s · left %s\n", indent, t.Limits, left(t))
	for _, c := range t.Children {
		printTree(w, c, indent+"  ")
	}
}

// left says what is left of each limited axis.
func left(t *agent.Tree) string {
	r, l := t.Remaining(), t.Limits
	var parts []string
	if l.MaxSteps > 0 {
		parts = append(parts, fmt.Sprintf("%d steps", r.Steps))
	}
	if l.MaxTokens > 0 {
		parts = append(parts, num(r.Tokens)+" tok")
	}
	if l.MaxCost > 0 {
		parts = append(parts, fmt.Sprintf("$%.4f", r.Cost))
	}
	if l.MaxToolCalls > 0 {
		parts = append(parts, fmt.Sprintf("%d tool calls", r.ToolCalls))
	}
	if l.MaxChildren > 0 {
		parts = append(parts, fmt.Sprintf("%d children", r.Children))
	}
	if len(parts) == 0 {
		return "no limit"
	}
	return strings.Join(parts, ", ")
}

// ChildWaits prints what the paused children of a team wait for (their
// pending approvals, or their pause's reason), how to decide, and how
// to continue the team: keel run --team, when a child stops for a
// person and so does its lead. keel is the command prefix (keel --db
// ...); lead the run to resume. onServer: the lead runs on a team
// server, which goes on with the child once it is decided (keel
// --server URL run --team, [Follow]).
func ChildWaits(w io.Writer, keel, lead string, children []*agent.State, onServer bool) {
	w = Esc(w)
	for _, st := range children {
		who := st.Created.Principal
		if p := st.Created.Parent; p != nil && p.Agent != "" && who == "" {
			who = p.Agent
		}
		pending := st.Pending()
		if len(pending) == 0 {
			msg := ""
			if st.Ended != nil {
				msg = " (" + st.Ended.Reason + ": " + st.Ended.Message + ")"
			}
			fmt.Fprintf(w, "keel: child agent %s (run %s) is paused%s\n", who, st.RunID, msg)
			continue
		}
		for _, p := range pending {
			fmt.Fprintf(w, "\nkeel: child agent %s (run %s) waits for a person to approve call %s (%s):\n", who, st.RunID, p.CallID, p.Tool)
			showPending(w, st.Created, p)
			fmt.Fprintf(w, "  approve: %s approve %s %s [--remember run|agent]%s\n  deny:    %s deny %s %s --reason '...'\n",
				keel, st.RunID, ShellWord(p.CallID), prefixHint(p), keel, st.RunID, ShellWord(p.CallID))
		}
	}
	if onServer {
		fmt.Fprintf(w, "keel: the team waits for that on the server, which goes on with it once decided; follow it with: %s runs show %s --follow\n", keel, lead)
		return
	}
	fmt.Fprintf(w, "keel: the team waits for that; once decided, continue it with: %s runs resume %s\n", keel, lead)
}
