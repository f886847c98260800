package replay

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/keel-run/keel/model"
)

const provider = "replay"

// Options configures [New]. The zero value checks everything.
type Options struct {
	// IgnoreHistory turns off the check that the assistant messages
	// already in a request carry the recorded tool call ids, in order.
	// That check catches a run resumed against the wrong trajectory.
	IgnoreHistory bool
	// IgnoreTools turns off the check that the request offers every tool
	// the recorded turn calls.
	IgnoreTools bool
}

// Model is a [model.Model] answering from a [Trajectory]. It is stateless
// and safe for concurrent use.
type Model struct {
	tr   *Trajectory
	opts Options
}

var (
	_ model.Model = (*Model)(nil)
	_ model.Namer = (*Model)(nil)
)

// New returns a [Model] replaying tr with opts (nil means defaults).
func New(tr *Trajectory, opts *Options) *Model {
	m := &Model{tr: tr}
	if opts != nil {
		m.opts = *opts
	}
	return m
}

// Name returns "replay:PATH".
func (m *Model) Name() string { return model.Spec{Provider: provider, Name: m.tr.Path()}.String() }

// Trajectory returns the trajectory m replays.
func (m *Model) Trajectory() *Trajectory { return m.tr }

// Generate answers req with recorded turn k, k being the number of assistant
// messages in req plus req.PriorTurns (turns compacted out of the
// request). A request whose Purpose is [model.PurposeSummary] gets a
// KindInvalidRequest error: a recording cannot summarise, and the
// runtime falls back to a mechanical summary without consuming a turn. The response carries the recorded content, tool call ids,
// names and argument strings, usage, model name, response id and finish
// reason. Errors are [*model.Error]: KindExhausted when the trajectory has
// no turn k ("trajectory has N assistant turns; request asks for turn
// N+1"), KindMismatch when the recorded turn calls a tool req does not offer
// or req's history differs from the recording, KindUnknown wrapping the
// cause when ctx is done.
func (m *Model) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	if err := ctx.Err(); err != nil {
		cause := context.Cause(ctx)
		return nil, &model.Error{Kind: model.KindUnknown, Provider: provider, Message: "request canceled: " + cause.Error(), Err: cause}
	}
	if req == nil {
		return nil, &model.Error{Kind: model.KindInvalidRequest, Provider: provider, Message: "nil request"}
	}
	if req.Purpose == model.PurposeSummary {
		// A recording holds only the agent's turns: writing a summary
		// would need new text, and answering with a recorded turn would
		// shift every later turn.
		return nil, &model.Error{Kind: model.KindInvalidRequest, Provider: provider, Message: "a replay cannot write a summary: the trajectory records only the agent's turns"}
	}
	var history [][]string
	for _, msg := range req.Messages {
		if msg.Role != model.RoleAssistant {
			continue
		}
		ids := make([]string, len(msg.ToolCalls))
		for i, c := range msg.ToolCalls {
			ids[i] = c.ID
		}
		history = append(history, ids)
	}
	offered := make([]string, len(req.Tools))
	for i, t := range req.Tools {
		offered[i] = t.Name
	}
	if req.PriorTurns < 0 {
		return nil, &model.Error{Kind: model.KindInvalidRequest, Provider: provider, Message: fmt.Sprintf("negative prior turns %d", req.PriorTurns)}
	}
	t, err := m.tr.answer(req.PriorTurns, history, offered, m.opts)
	if err != nil {
		return nil, err
	}
	return &model.Response{
		Message:    t.Message,
		Usage:      t.Usage,
		Model:      t.Model,
		ID:         t.ResponseID,
		StopReason: stopReason(t.StopReason),
	}, nil
}

// answer returns the turn for a request whose assistant messages carry the
// tool call ids in history, preceded by prior compacted turns, and which
// offers the tools named in offered.
func (tr *Trajectory) answer(prior int, history [][]string, offered []string, opts Options) (Turn, *model.Error) {
	k := prior + len(history)
	if k >= len(tr.turns) {
		return Turn{}, &model.Error{Kind: model.KindExhausted, Provider: provider,
			Message: fmt.Sprintf("trajectory has %d assistant turns; request asks for turn %d", len(tr.turns), k+1)}
	}
	if !opts.IgnoreHistory {
		for i, ids := range history {
			if prior+i >= len(tr.turns) {
				break
			}
			want := tr.turns[prior+i].Message.ToolCalls
			got := make([]string, len(want))
			for j, c := range want {
				got[j] = c.ID
			}
			same := len(ids) == len(got)
			for j := 0; same && j < len(ids); j++ {
				// The runtime replaces ids that are unsafe or repeated
				// (model.ReplacementCallID); the recording keeps them.
				same = ids[j] == got[j] || model.IsReplacementCallID(ids[j], j)
			}
			if !same {
				return Turn{}, &model.Error{Kind: model.KindMismatch, Provider: provider,
					Message: fmt.Sprintf("request's assistant turn %d has tool call ids [%s] but the trajectory recorded [%s]", prior+i+1, strings.Join(ids, ", "), strings.Join(got, ", "))}
			}
		}
	}
	t := copyTurn(tr.turns[k])
	if !opts.IgnoreTools {
		for _, c := range t.Message.ToolCalls {
			if !slices.Contains(offered, c.Name) {
				list := "none"
				if len(offered) > 0 {
					list = strings.Join(offered, ", ")
				}
				return Turn{}, &model.Error{Kind: model.KindMismatch, Provider: provider,
					Message: fmt.Sprintf("recorded turn %d calls tool %q, which the request does not offer (offered: %s)", k+1, c.Name, list)}
			}
		}
	}
	return t, nil
}

// stopReason normalises a recorded finish_reason the way the OpenAI adapter
// does.
func stopReason(s string) string {
	if s == "function_call" {
		return "tool_calls"
	}
	return s
}
