package tui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/tool/builtin/fs"
	"github.com/keel-run/keel/visible"
)

// Command is a command of a conversation typed at the prompt (/diff),
// done in place of sending a message to the model.
type Command struct {
	// Name is the command without its slash; Usage its arguments, Help
	// what it does (for /help).
	Name, Usage, Help string
	// Do does it, with what follows the name (trimmed).
	Do func(ctx context.Context, arg string) error
}

// Command runs the command line m typed at the prompt (it starts with
// "/", not "//"), among cmds and /help, saying on pr.Err what it did. A
// command whose Do is nil is listed by /help but cannot run yet (keel
// chat before its first message: there is no run).
func (pr *Prompt) Command(ctx context.Context, m string, cmds []Command) {
	name, arg, _ := strings.Cut(strings.TrimSpace(m)[1:], " ")
	arg = strings.TrimSpace(arg)
	if name == "help" || name == "?" {
		fmt.Fprintln(pr.Err, "keel: commands (anything else is sent to the model; start a message with // to send one that starts with /):")
		for _, c := range cmds {
			fmt.Fprintf(pr.Err, "  /%-22s %s\n", strings.TrimSpace(c.Name+" "+c.Usage), c.Help)
		}
		fmt.Fprintf(pr.Err, "  /%-22s %s\n  /%-22s %s\n", "help", "this list", "exit", "end the conversation (also Ctrl-D); the run stays in the journal")
		return
	}
	for _, c := range cmds {
		if c.Name == name {
			if c.Do == nil {
				fmt.Fprintf(pr.Err, "keel: /%s needs the run, which starts with your first message: type the task first (a task starting with / is typed as //)\n", name)
				return
			}
			if err := c.Do(ctx, arg); err != nil {
				fmt.Fprintf(pr.Err, "keel: /%s: %v\n", name, err)
			}
			return
		}
	}
	fmt.Fprintf(pr.Err, "keel: no command /%s (nothing was sent to the model); /help lists the commands, and a message starting with // is sent with one /\n", visible.String(name))
}

// Converse goes on with runID after each answer: it reads the person's
// next message and executes the run with it, until the input ends, the
// person types /exit or presses Ctrl-C twice at the prompt, or the run
// stops in a way a message cannot go on from (paused for a person who
// left, canceled). A turn the person interrupted (Ctrl-C, see
// prompt.go) goes on with the next message. err is the outcome of the
// execution so far, interrupted whether the person interrupted it; the
// last one's is returned. goesOn says whether the outcome err of an
// execution (not interrupted) lets the next message go on; exec executes
// the run with a message; keel is how hints start a command. A line
// starting with "/" is one of cmds (or /help, /exit), never sent to the
// model; "//" sends the rest of the line after one "/".
func (pr *Prompt) Converse(ctx context.Context, runID, keel string, err error, interrupted bool, goesOn func(error) bool, cmds []Command, exec func(ctx context.Context, message string) error) error {
	fmt.Fprintf(pr.Err, "keel: chat: your next message for run %s (empty line: nothing; /help lists commands; Ctrl-D or /exit ends; Ctrl-C interrupts a turn)\n", runID)
	defer pr.intr.set(nil)
	told := false // the interruption was said (once, not at every prompt)
	for ctx.Err() == nil {
		if err != nil && !interrupted && !goesOn(err) {
			return err // paused, canceled, or the runtime failed
		}
		if interrupted && !told {
			fmt.Fprintln(pr.Err, "keel: interrupted; the model is told when your next message goes on")
			pr.dropAhead()
			told = true
		}
		pr.AtPrompt()
		m, ok := pr.Message(ctx, "you> ")
		if !ok || strings.TrimSpace(m) == "/exit" {
			if interrupted {
				fmt.Fprintf(pr.Err, "keel: run %s stays paused (interrupted); %s runs resume %s --message TEXT goes on\n", runID, keel, runID)
			}
			return err
		}
		if strings.TrimSpace(m) == "" {
			continue
		}
		if t := strings.TrimSpace(m); strings.HasPrefix(t, "//") {
			m = t[1:]
		} else if strings.HasPrefix(t, "/") {
			pr.Command(ctx, t, cmds)
			continue
		}
		interrupted, err = pr.Turn(ctx, func(ctx context.Context) error { return exec(ctx, m) })
		told = false
	}
	return err
}

// Decide records a decision on a call of a run, as keel approve and
// keel deny do. An error wrapping [ErrDecided] says that someone else
// decided the call meanwhile.
type Decide func(ctx context.Context, runID, callID string, res *agent.ApprovalResolved) error

// ErrDecided is wrapped by a [Decide] error when the call no longer
// waits: someone else decided it first. The question moves on.
var ErrDecided = errors.New("decided meanwhile by someone else")

// Asking says how [Prompt.DecideInline] shows the calls of a run and
// records the answers. It is the same prompt for a run executed in this
// process and for one on a team server (keel --server URL run or demo at
// a terminal): only Decide (the service here, the API there) and Diff
// differ.
type Asking struct {
	// Created is the run's creation.
	Created *agent.RunCreated
	// By is who decides at this terminal (a server records its token's
	// person instead).
	By string
	// Decide records each answer.
	Decide Decide
	// Diff is what an edit waiting for approval would change, as the
	// prompt shows it ("" for other calls; see [ProposedDiff]); nil reads
	// the file from Created's workspace on this machine.
	Diff func(ctx context.Context, p agent.PendingApproval) string
	// Keel starts the commands of the hints ("keel" when empty; keel
	// --server URL).
	Keel string
}

// DecideInline asks the person about each pending approval and records
// each answer as keel approve / keel deny would. It returns false when
// the input ended before every call was decided (the run then waits for
// a decision from elsewhere, as without a terminal), or ctx ended (the
// person pressed Ctrl-C, or the call was decided elsewhere).
func (pr *Prompt) DecideInline(ctx context.Context, a *Asking, pending []agent.PendingApproval) bool {
	created, by, decide := a.Created, a.By, a.Decide
	keel := a.Keel
	if keel == "" {
		keel = "keel"
	}
	for _, p := range pending {
		fmt.Fprintf(pr.Err, "\nkeel: call %s (%s) needs your approval:\n", visible.String(p.CallID), p.Tool)
		showCall(pr.Err, p)
		if a.Diff != nil {
			fmt.Fprint(pr.Err, a.Diff(ctx, p))
		} else {
			fmt.Fprint(pr.Err, pendingDiff(created, p.Tool, p.Arguments))
		}
		// Only the answers the gate accepts are offered: [r] and [a]
		// when the call can be remembered at all, [p] when its prefix
		// can.
		remember := Remembers(p, nil) == nil
		pre := PrefixFor(p)
		q, hint := "  approve? [y]es, [n]o: ", "  answer y or n"
		switch {
		case pre != "":
			q = "  approve? [y]es, [n]o, [r] always for this run, [p] every command starting '" + pre + "' for this run, [a] always for this agent: "
			hint = "  answer y, n, r, p or a"
		case remember:
			q = "  approve? [y]es, [n]o, [r] always for this run, [a] always for this agent: "
			hint = "  answer y, n, r or a"
		}
		for decided := false; !decided; {
			ans, ok := pr.Ask(ctx, q)
			if !ok && ctx.Err() != nil {
				return false // interrupted (Ctrl-C): the run stops, nothing to decide
			}
			if !ok {
				fmt.Fprintf(pr.Err, "keel: no answer; decide with: %s approve %s %s   or   %s deny %s %s --reason TEXT\n", keel, p.RunID, ShellWord(p.CallID), keel, p.RunID, ShellWord(p.CallID))
				return false
			}
			res := &agent.ApprovalResolved{Decision: policy.Allow, By: by}
			switch a := strings.ToLower(strings.TrimSpace(ans)); a {
			case "y", "yes":
			case "r", "run", "a", "agent":
				if !remember {
					fmt.Fprintln(pr.Err, hint)
					continue
				}
				res.Remember = policy.ScopeRun
				if a == "a" || a == "agent" {
					res.Remember = policy.ScopeAgent
				}
			case "p", "prefix":
				if pre == "" {
					fmt.Fprintln(pr.Err, hint)
					continue
				}
				res.Remember, res.Prefix = policy.ScopeRun, strings.Fields(pre)
			case "n", "no":
				reason, ok := pr.Ask(ctx, "  why (the model is told): ")
				if !ok {
					return false
				}
				if strings.TrimSpace(reason) == "" {
					reason = "denied at the terminal"
				}
				res.Decision, res.Reason = policy.Deny, reason
			default:
				fmt.Fprintln(pr.Err, hint)
				continue
			}
			if err := decide(ctx, p.RunID, p.CallID, res); errors.Is(err, ErrDecided) {
				fmt.Fprintf(pr.Err, "keel: call %s was %v\n", visible.String(p.CallID), ErrDecided)
				break
			} else if errors.Is(err, agent.ErrApprovalExpired) {
				fmt.Fprintf(pr.Err, "keel: call %s: %s\n", visible.String(p.CallID), notRecorded(err))
				break
			} else if err != nil {
				// A call the gate will not remember after all is still
				// asked about: say why, in its words, and ask again.
				fmt.Fprintf(pr.Err, "  keel: %s\n", notRecorded(err))
				continue
			}
			decided = true
			if res.Decision == policy.Deny {
				continue // the call's denied result says so, with the reason
			}
			verb := "approved"
			switch res.Remember {
			case policy.ScopeRun:
				verb += ", and matching calls from now on in this run"
				if len(res.Prefix) > 0 {
					verb += " (commands starting '" + strings.Join(res.Prefix, " ") + "')"
				}
			case policy.ScopeAgent:
				verb += ", and matching calls from now on in every run of agent " + created.Principal
			}
			fmt.Fprintf(pr.Err, "keel: %s\n", verb)
		}
	}
	return true
}

// showPending prints what a call waiting for approval would do: its
// action, the parts that asked and why, and, for a file edit, its diff.
func showPending(w io.Writer, created *agent.RunCreated, p agent.PendingApproval) {
	showCall(w, p)
	fmt.Fprint(w, pendingDiff(created, p.Tool, p.Arguments))
}

// showCall prints a call waiting for approval: its action, and the parts
// that asked and why.
func showCall(w io.Writer, p agent.PendingApproval) {
	for _, line := range strings.Split(visible.String(p.Action), "\n") {
		fmt.Fprintf(w, "    │ %s\n", line)
	}
	for _, part := range p.Parts {
		fmt.Fprintf(w, "  asks: %s — %s\n", clip(oneLine(visible.String(part.Text)), 160), visible.String(part.Reason))
		if part.Detail != "" {
			fmt.Fprintf(w, "        (%s)\n", clip(visible.String(part.Detail), 160))
		}
	}
}

// ApproveAsStandIn approves each pending call as standIn, for a run
// whose approvals nobody can answer here but that must show its gate
// (keel demo with stdin not a terminal): each call is shown as a person
// would see it, with its diff, and the approval says who gave it. It
// returns false when a decision could not be recorded.
func ApproveAsStandIn(ctx context.Context, w io.Writer, created *agent.RunCreated, pending []agent.PendingApproval, standIn string, decide Decide) bool {
	for _, p := range pending {
		fmt.Fprintf(w, "\nkeel: call %s (%s) needs a person's approval:\n", visible.String(p.CallID), p.Tool)
		showPending(w, created, p)
		fmt.Fprintf(w, "keel: stdin is not a terminal, so nobody can answer here: approved by %s (--no-wait stops at the approval instead; keel approve/deny decide from any process)\n", standIn)
		res := &agent.ApprovalResolved{Decision: policy.Allow, By: standIn, Reason: "stdin was not a terminal"}
		if err := decide(ctx, p.RunID, p.CallID, res); err != nil {
			fmt.Fprintf(w, "keel: %v\n", err)
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
	return editDiff(created, toolName, args, maxDiffLines, true)
}

// editDiff is the unified diff a file-writing call would make, indented,
// at most limit lines, or "" for other calls. The file is read inside
// the workspace only. With notes, a call that cannot be shown as a diff
// says why; without, it is "".
func editDiff(created *agent.RunCreated, toolName string, args json.RawMessage, limit int, notes bool) string {
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
	return showEdit(checkpoint.FileDiff(rel, old, cur), msg, limit, notes)
}

// ProposedDiff is the diff a team server says an edit waiting for
// approval would make, as the prompt shows a local one ("" for a call
// that edits no file).
func ProposedDiff(pe *api.ProposedEdit) string {
	if pe == nil || pe.Diff == nil && pe.Problem == "" {
		return ""
	}
	var c checkpoint.Change
	if f := pe.Diff; f != nil {
		c = checkpoint.Change{Path: f.Path, Status: checkpoint.Status(f.Status), Binary: f.Binary, Patch: f.Patch, Added: f.Added, Removed: f.Removed, Denied: f.Denied}
	}
	if c.Denied {
		return "  (no diff: " + deniedNote + ")\n"
	}
	return showEdit(c, pe.Problem, maxDiffLines, true)
}

// showEdit is editDiff's text of the change c an edit would make, or of
// msg, why it cannot be made.
func showEdit(c checkpoint.Change, msg string, limit int, notes bool) string {
	switch {
	case !notes && (msg != "" || c.Binary || c.Patch == ""):
		return ""
	case msg != "":
		return "  (no diff: " + visible.String(msg) + ")\n"
	case c.Binary:
		return "  (binary or large file: no line diff)\n"
	case c.Patch == "":
		return "  (the file would not change)\n"
	}
	lines := strings.Split(strings.TrimRight(visible.String(c.Patch), "\n"), "\n")
	var b strings.Builder
	if notes {
		fmt.Fprintf(&b, "  the edit (+%d −%d):\n", c.Added, c.Removed)
	}
	for i, l := range lines {
		if i == limit {
			fmt.Fprintf(&b, "    … %d more lines\n", len(lines)-i)
			break
		}
		b.WriteString("    " + l + "\n")
	}
	return b.String()
}

// Waiting prints what runs wait for and how to decide it, as keel run
// prints it while it waits: server is the team server's URL the run is
// on ("keel --server URL approve ..."), or "" for the local journal.
func Waiting(w io.Writer, pending []agent.PendingApproval, server string) {
	w = Esc(w)
	keel := "keel"
	if server != "" {
		keel = "keel --server " + server
	}
	for _, p := range pending {
		fmt.Fprintf(w, "\nkeel: run %s waits for a person to approve call %s (%s):\n", p.RunID, visible.String(p.CallID), p.Tool)
		for _, line := range strings.Split(visible.String(p.Action), "\n") {
			fmt.Fprintf(w, "    │ %s\n", line)
		}
		for _, part := range p.Parts {
			fmt.Fprintf(w, "  asks: %s — %s\n", clip(oneLine(visible.String(part.Text)), 80), visible.String(part.Reason))
			if part.Detail != "" {
				fmt.Fprintf(w, "        (%s)\n", clip(visible.String(part.Detail), 160))
			}
		}
		if p.Expires != nil {
			fmt.Fprintf(w, "  deadline %s, then: %s\n", p.Expires.Local().Format("2006-01-02 15:04:05"), p.Default)
		}
		fmt.Fprintf(w, "  approve: %s approve %s %s [--remember run|agent]%s\n  deny:    %s deny %s %s --reason '...'\n",
			keel, p.RunID, ShellWord(p.CallID), prefixHint(p), keel, p.RunID, ShellWord(p.CallID))
	}
	if server == "" {
		fmt.Fprintln(w, "keel: waiting (any process sharing the journal may decide; Ctrl-C leaves the run paused)")
		return
	}
	fmt.Fprintf(w, "keel: or in the web UI: %s/ui/approvals\n", server)
	fmt.Fprintln(w, "keel: waiting (anyone with an approvals:write token for this server may decide; Ctrl-C leaves the run paused)")
}

// subcommandRunners are programs whose second word says what they run
// (pip install, npm run): a suggested prefix keeps both.
var subcommandRunners = map[string]bool{"pip": true, "pip3": true, "npm": true, "yarn": true, "pnpm": true, "go": true,
	"cargo": true, "uv": true, "poetry": true, "git": true, "bundle": true, "gradle": true, "mvn": true}

// PrefixFor suggests a word prefix to remember for a bash call waiting
// for approval, when every part that asked runs the same program with
// more words than the prefix (python x.py, pip install pytz): a run
// holding a secret with a host allowed asks about each script it runs,
// and a person who trusts the program for this run says so once. The
// prefix is the program, with its subcommand for package managers;
// Keel still refuses to remember it when later words would run code the
// program does not name (docs/approvals.md). "" when there is none.
func PrefixFor(p agent.PendingApproval) string {
	if p.Tool != "bash" || len(p.Parts) == 0 {
		return ""
	}
	pre := ""
	for _, part := range p.Parts {
		// The literal words the gate matches (none for a part only known
		// at run time), never the text as written.
		w := part.Words
		if len(w) < 2 || part.Clipped {
			return ""
		}
		// A wrapper (timeout, env, nice, xargs...) is not the program:
		// no offer.
		if len(part.Via) > 0 {
			return ""
		}
		n := 1
		if subcommandRunners[w[0]] && len(w) > 2 && !strings.HasPrefix(w[1], "-") {
			n = 2
		}
		this := strings.Join(w[:n], " ")
		if pre != "" && this != pre {
			return ""
		}
		pre = this
	}
	// Offered only when the gate would remember it: the same function
	// that refuses a grant (a part that redirects, sets variables or
	// reads its arguments from a pipe) decides the offer.
	if Remembers(p, strings.Fields(pre)) != nil {
		return ""
	}
	return pre
}

// Remembers returns nil when an approval of p can be remembered for the
// run (with prefix, when non-empty), and otherwise the gate's reason, as
// [policy.GrantsFor] gives it when the decision is recorded: a terminal
// offers only the answers the gate then accepts.
func Remembers(p agent.PendingApproval, prefix []string) error {
	_, err := policy.GrantsFor(p.RunID+"/"+p.CallID, policy.ScopeRun, p.Tool, &policy.Decision{Parts: p.Parts}, prefix)
	return err
}

// notRecorded says why an answer was not recorded, in a person's words:
// the gate's reason without the chain of operations around it (run and
// call ids, package prefixes).
func notRecorded(err error) string {
	for _, sentinel := range []error{policy.ErrNotRememberable, policy.ErrBadPrefix, agent.ErrApprovalExpired} {
		if !errors.Is(err, sentinel) {
			continue
		}
		msg := err.Error()
		i := strings.Index(msg, sentinel.Error())
		if i < 0 {
			break
		}
		return strings.TrimPrefix(strings.TrimPrefix(msg[i:], "policy: "), "agent: ")
	}
	return "the answer was not recorded: " + err.Error()
}

// prefixHint is the --prefix of the approve line PrintPending shows.
func prefixHint(p agent.PendingApproval) string {
	if pre := PrefixFor(p); pre != "" {
		return " [--prefix " + ShellWord(pre) + "]"
	}
	return ""
}
