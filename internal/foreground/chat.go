package foreground

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/visible"
)

// ChatParams are what keel chat's commands need beyond the execution:
// the run's diff printed (keel runs diff), and its files put back as
// they were at an event (keel runs rewind, through the service).
type ChatParams struct {
	Diff func(ctx context.Context, stat bool) error
	// Rewind rewinds the run's files to event to (service.Service.Rewind),
	// forced or not.
	Rewind func(ctx context.Context, to int64, force bool) (*api.Rewound, error)
}

// chatCommands are keel chat's commands, as /help lists them (/help and
// /exit are the prompt's own).
var chatCommands = []tui.Command{
	{Name: "diff", Usage: "[--stat]", Help: "the files this run changed, with their diff (keel runs diff)"},
	{Name: "undo", Usage: "[--force]", Help: "put the files the run changed back as they were before your last message, leaving your own edits; again: one message further back (the model is told); --force: also files both you and the run changed"},
	{Name: "cost", Help: "the steps, tokens and cost of this run so far"},
	{Name: "model", Help: "the model of this run"},
	{Name: "limit", Usage: "--max-steps N | --max-tokens N | --max-cost USD | --max-tool-calls N | --timeout DURATION", Help: "raise a limit of this run from your next message on (as keel runs resume --max-steps N does)"},
}

// ChatCommands are keel chat's commands before its run exists (before
// the first message): /help lists them; none can do anything yet.
func ChatCommands() []tui.Command { return slices.Clone(chatCommands) }

// undoNote starts the note the model is told with the next message
// after an /undo that changed files.
const undoNote = "[The person undid the file changes made since "

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
	// undone is the event of the turn the last /undo put the files back
	// to (0: none), newest the newest turn then: while no message is
	// typed, /undo goes one turn further back each time; redo is the
	// event whose files the first /undo of such a series replaced, and
	// tookAway whether one of the series changed a file (else there is
	// nothing to put back).
	var undone, newest, redo int64
	var tookAway bool
	do := map[string]func(ctx context.Context, arg string) error{
		"diff": func(ctx context.Context, arg string) error {
			return cp.Diff(ctx, arg == "--stat")
		},
		"undo": func(ctx context.Context, arg string) error {
			force := arg == "--force"
			if arg != "" && !force {
				return fmt.Errorf("/undo takes no argument but --force (got %q)", visible.String(arg))
			}
			st, events, err := state(ctx)
			if err != nil {
				return err
			}
			if st.Checkpoint == nil {
				return errors.New("this run has no workspace checkpoints (--no-checkpoints, or a workspace Keel cannot snapshot): nothing to undo")
			}
			// The points a person started a turn at, oldest first: the
			// run's start (its first checkpoint) and each message typed.
			type turn struct {
				seq  int64
				what string
			}
			var turns []turn
			for _, e := range events {
				switch {
				case e.Type == journal.WorkspaceCheckpoint && len(turns) == 0:
					turns = append(turns, turn{e.Seq, "when the run started"})
				case e.Type == journal.UserMessage && len(turns) > 0:
					if v, err := agent.Decode(&e); err == nil && v.(*agent.UserMessage).Source == "" {
						turns = append(turns, turn{e.Seq, "your message " + quoteMessage(v.(*agent.UserMessage).Content)})
					}
				}
			}
			if len(turns) == 0 {
				return errors.New("the run has no checkpoint of its start: nothing to undo")
			}
			i := len(turns) - 1
			series := undone > 0 && turns[i].seq == newest
			newest = turns[i].seq
			if series {
				// Nothing typed since the last /undo: one message further back.
				for i >= 0 && turns[i].seq >= undone {
					i--
				}
				if i < 0 {
					fmt.Fprintf(x.Stderr, "keel: /undo: nothing more to undo: the files are as they were when the run started%s\n", putBack(tookAway, "; ", x.Keel, id, redo))
					return nil
				}
			}
			r, err := cp.Rewind(ctx, turns[i].seq, force)
			if err != nil {
				if !force && strings.Contains(err.Error(), "--force") {
					return fmt.Errorf("%v\n(here: /undo --force)", err)
				}
				return err
			}
			if !series {
				redo, tookAway = tui.RewindUndo(r), false
			}
			tookAway = tookAway || len(r.Files) > 0 || r.MoreFiles > 0
			tui.RewoundKept(x.Stderr, r.Kept)
			undone = turns[i].seq
			before := turns[i].what
			if i > 0 {
				before = "before " + before
			}
			if len(r.Files) == 0 && r.MoreFiles == 0 {
				fmt.Fprintf(x.Stderr, "keel: /undo: no file changed: the files were already as they were %s\n", before)
			} else {
				fmt.Fprintf(x.Stderr, "keel: /undo: files put back as they were %s:\n", before)
				for _, f := range r.Files {
					fmt.Fprintf(x.Stderr, "  %s %s\n", f.Status, visible.String(f.Path))
				}
				if r.MoreFiles > 0 {
					fmt.Fprintf(x.Stderr, "  ... and %d more\n", r.MoreFiles)
				}
				since := "the run started"
				if i > 0 {
					since = "their " + strings.TrimPrefix(turns[i].what, "your ")
				}
				tell(undoNote + since + " (keel runs rewind): the workspace's files are as they were then; read them again before relying on what you saw.]")
			}
			if r.Missing > 0 {
				fmt.Fprintf(x.Stderr, "keel: /undo: the newest checkpoint before that is older: the effects of %d earlier call(s) are undone too\n", r.Missing)
			}
			if i > 0 {
				fmt.Fprintf(x.Stderr, "keel: /undo again goes one message further back%s\n", putBack(tookAway, "; ", x.Keel, id, redo))
			} else if tookAway {
				fmt.Fprintf(x.Stderr, "keel: %s\n", putBack(true, "", x.Keel, id, redo))
			}
			return nil
		},
		"cost": func(ctx context.Context, _ string) error {
			st, _, err := state(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(x.Stderr, "keel: run %s · %d steps · %s tok (%s in, %s out) · $%.4f · model %s\n", id, st.Steps,
				agent.Num(st.Usage.Total()), agent.Num(st.Usage.InputTokens), agent.Num(st.Usage.OutputTokens), st.Cost, st.Created.Model)
			return nil
		},
		"model": func(ctx context.Context, arg string) error {
			st, _, err := state(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(x.Stderr, "keel: run %s uses model %s\n", id, st.Created.Model)
			if arg != "" {
				fmt.Fprintf(x.Stderr, "keel: a run keeps its model (its resumes and forks use it too); for %s, /exit and start another: %s chat --model %s\n", arg, x.Keel, tui.ShellWord(arg))
			}
			return nil
		},
	}
	do["limit"] = func(ctx context.Context, arg string) error {
		st, _, err := state(ctx)
		if err != nil {
			return err
		}
		l := st.Limits
		if x.Limits != nil {
			l = *x.Limits // an earlier /limit not used yet
		}
		what, err := setLimit(&l, arg)
		if err != nil {
			return err
		}
		x.Limits = &l
		fmt.Fprintf(x.Stderr, "keel: /limit: %s from your next message on (the run made %d model call(s), %s tokens, $%.4f so far)\n", what, st.Steps, agent.Num(st.Usage.Total()), st.Cost)
		return nil
	}
	cmds := ChatCommands()
	for i := range cmds {
		cmds[i].Do = do[cmds[i].Name]
	}
	return cmds
}

// setLimit sets in l the limit arg names ("--max-steps 10"; also
// "max-steps 10", "--max-steps=10"), and says what it set.
func setLimit(l *agent.Limits, arg string) (string, error) {
	name, value, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(arg), "--"), "=")
	if !ok {
		f := strings.Fields(arg)
		if len(f) != 2 {
			return "", errors.New("/limit takes one limit and its value: /limit --max-steps N, --max-tokens N, --max-cost USD or --timeout DURATION")
		}
		name, value = strings.TrimPrefix(f[0], "--"), f[1]
	}
	bad := func(want string) error { return fmt.Errorf("/limit --%s %q: want %s", name, value, want) }
	switch name {
	case "max-steps":
		n, err := strconv.Atoi(value)
		if err != nil || n <= 0 {
			return "", bad("a number of model calls above 0")
		}
		l.MaxSteps = n
	case "max-tool-calls":
		n, err := strconv.Atoi(value)
		if err != nil || n <= 0 {
			return "", bad("a number of tool calls above 0")
		}
		l.MaxToolCalls = n
	case "max-tokens":
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil || n <= 0 {
			return "", bad("a number of tokens above 0")
		}
		l.MaxTokens = n
	case "max-cost":
		c, err := strconv.ParseFloat(strings.TrimPrefix(value, "$"), 64)
		if err != nil || c <= 0 || math.IsInf(c, 0) || math.IsNaN(c) {
			return "", bad("US dollars above 0, such as 2.50")
		}
		l.MaxCost = c
	case "timeout":
		d, err := time.ParseDuration(value)
		if err != nil || d <= 0 {
			return "", bad("a duration above 0, such as 30m")
		}
		l.Timeout = agent.Duration(d)
	default:
		return "", fmt.Errorf("/limit: no limit %q: --max-steps, --max-tokens, --max-cost, --max-tool-calls or --timeout", "--"+name)
	}
	return "--" + name + " " + value, nil
}

// AtLimit says why a message cannot go on with run id now, "" when it
// can: the run stopped at its step, token or cost limit and no /limit
// raised it (the message would be journaled, and the run stop again at
// once).
func (x *Execution) AtLimit(ctx context.Context, id string) string {
	if x.Limits != nil {
		return ""
	}
	events, err := x.Runtime.Store().Read(ctx, id, 1)
	if err != nil {
		return ""
	}
	st, err := agent.Fold(id, events)
	if err != nil || st.Status != journal.StatusFailed || st.Ended == nil {
		return ""
	}
	switch st.Ended.Reason {
	case agent.ReasonMaxSteps, agent.ReasonMaxTokens, agent.ReasonMaxCost, agent.ReasonMaxToolCalls:
		return fmt.Sprintf("not sent: run %s stopped at its limit (%s); %s", id, st.Ended.Message, tui.ChatLimitHint(st.Ended.Reason, st))
	}
	return ""
}

// quoteMessage is a person's message as /undo names it: its first line,
// clipped, quoted, without the note an earlier /undo put before it.
func quoteMessage(m string) string {
	if strings.HasPrefix(m, undoNote) {
		if _, rest, ok := strings.Cut(m, "]\n\n"); ok {
			m = rest
		}
	}
	return strconv.Quote(agent.Clip(agent.OneLine(visible.String(m)), 60))
}

// putBack is /undo's hint to put back what a series of /undo took away
// (after sep), or nothing when the series changed no file.
func putBack(tookAway bool, sep, keel, run string, redo int64) string {
	if !tookAway {
		return ""
	}
	return fmt.Sprintf("%sto put back what /undo took away: %s runs rewind %s --to %d", sep, keel, run, redo)
}
