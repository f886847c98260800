// Package codeact lets models without function calling act through code
// (CodeAct): fenced ```bash and ```python blocks in the assistant's text
// are its actions.
//
// [Model] decorates a [model.Model]. On the way in it removes the
// request's tool schemas, describes the actions in the system prompt,
// turns earlier assistant tool calls back into their text and tool
// results into user messages. On the way out it parses the reply's
// fenced blocks whose language names an offered action (bash, sh or
// shell for the "bash" tool; python or py for the "python" tool) into
// tool calls, in order, so that the runtime gates, runs and journals
// them like any other call. Blocks in other languages (```diff,
// ```text) are not actions.
//
// A reply without any action has no tool calls; a run in text-action
// mode (agent.RunCreated.FormatError, set from [FormatError]) treats it
// as a format error and sends the message back, and stops after a few in
// a row. Such a run completes through its completion marker, which the
// instructions state from the first request ([Options].CompletionMarker):
// a ```bash block whose output starts with that line.
package codeact

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/keel-run/keel/model"
)

// Action maps a fence language to a tool.
type Action struct {
	// Languages are the fence info words (lowercase) that select it.
	Languages []string
	// Tool is the tool the block calls; Arg is the name of the string
	// argument that receives the block's text.
	Tool, Arg string
	// Description is one line telling the model what the block does.
	Description string
}

// DefaultActions are bash and python blocks.
var DefaultActions = []Action{
	{Languages: []string{"bash", "sh", "shell"}, Tool: "bash", Arg: "command", Description: "runs the script with bash in the workspace (a fresh shell for each block)"},
	{Languages: []string{"python", "py", "python3"}, Tool: "python", Arg: "code", Description: "runs the code in a persistent Python interpreter (variables survive between blocks)"},
}

// Options configures [New]. The zero value uses [DefaultActions].
type Options struct {
	// Actions replaces DefaultActions when non-empty.
	Actions []Action
	// CompletionMarker is the run's completion marker
	// (agent.RunCreated.CompletionMarker): the instructions tell the model
	// from the first request to finish with a ```bash block that echoes
	// it. "" leaves the finishing rule out.
	CompletionMarker string
}

// Model is a [model.Model] that turns code blocks into tool calls. It is
// safe for concurrent use if the model it wraps is.
type Model struct {
	inner   model.Model
	actions []Action
	marker  string
}

var (
	_ model.Model = (*Model)(nil)
	_ model.Namer = (*Model)(nil)
)

// New returns inner decorated for text actions. opts may be nil.
func New(inner model.Model, opts *Options) *Model {
	m := &Model{inner: inner, actions: DefaultActions}
	if opts != nil && len(opts.Actions) > 0 {
		m.actions = opts.Actions
	}
	if opts != nil {
		m.marker = opts.CompletionMarker
	}
	return m
}

// Name returns the wrapped model's name, if it has one.
func (m *Model) Name() string {
	if n, ok := m.inner.(model.Namer); ok {
		return n.Name()
	}
	return ""
}

// Generate rewrites req for a model without tools, calls the wrapped
// model and returns its reply with one tool call per action block. A
// summary request ([model.PurposeSummary]) passes through with its
// messages flattened the same way and no parsing. Errors are the wrapped
// model's.
func (m *Model) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	offered := m.offered(req.Tools)
	out := *req
	out.Tools = nil
	out.Messages = flatten(req.Messages)
	if req.Purpose != model.PurposeSummary {
		out.System = joinText(req.System, Instructions(offered, m.marker))
	}
	resp, err := m.inner.Generate(ctx, &out)
	if err != nil || req.Purpose == model.PurposeSummary {
		return resp, err
	}
	r := *resp
	r.Message.ToolCalls = untilMarker(Parse(r.Message.Content, offered), m.marker)
	if len(r.Message.ToolCalls) > 0 && r.StopReason != "length" {
		// A reply cut at the output-token limit stays cut: the runtime
		// runs none of its blocks, even the closed ones.
		r.StopReason = "tool_calls"
	}
	return &r, nil
}

// offered returns the actions whose tools the request offers.
func (m *Model) offered(tools []model.ToolSpec) []Action {
	var out []Action
	for _, a := range m.actions {
		for _, t := range tools {
			if t.Name == a.Tool {
				out = append(out, a)
				break
			}
		}
	}
	return out
}

// Instructions returns the system prompt section that teaches the model
// the action format for actions and, when marker is not empty, how to
// finish: a ```bash block whose output starts with the line marker. Only
// a bash block finishes a run (the runtime matches the marker against a
// command's output; a ```python block's result has a header before its
// output), and the text says so.
func Instructions(actions []Action, marker string) string {
	if len(actions) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("# How to act\n\nYou have no function-calling tools. You act by writing fenced code blocks in your reply:\n")
	for _, a := range actions {
		fmt.Fprintf(&b, "- a ```%s block %s;\n", a.Languages[0], a.Description)
	}
	b.WriteString("Every such block in your reply runs, in order, and you see the results in the next message. Blocks in other languages (```text, ```diff) do not run. Explain your reasoning in plain text, then give at least one action block. A reply without an action block is a format error, even when the task is done.")
	if marker != "" && hasTool(actions, "bash") {
		fmt.Fprintf(&b, "\n\n# How to finish\n\nWhen the task is done, finish with a ```bash block whose first line of output is %[1]s; everything the block prints after that line is your final output. For example:\n\n```bash\necho %[1]s\n```\n\nor, to submit your changes, `echo %[1]s && git diff`. The run ends once that reply's blocks have run.", marker)
		if hasTool(actions, "python") {
			b.WriteString(" Only a ```bash block finishes the run: a ```python block that prints the marker does not.")
		}
	}
	return b.String()
}

func hasTool(actions []Action, name string) bool {
	for _, a := range actions {
		if a.Tool == name {
			return true
		}
	}
	return false
}

// FormatError returns the message a text-action run sends back when a
// reply has no action block; marker is the run's completion marker ("" if
// none).
func FormatError(actions []Action, marker string) string {
	if len(actions) == 0 {
		actions = DefaultActions
	}
	var langs []string
	for _, a := range actions {
		langs = append(langs, "```"+a.Languages[0])
	}
	msg := fmt.Sprintf("Format error: your reply has no action. Every reply must contain at least one fenced %s block; for example:\n\n```%s\nls -la\n```", strings.Join(langs, " or "), actions[0].Languages[0])
	if marker != "" {
		msg += fmt.Sprintf("\n\nWhen the task is done, finish with a ```bash block (not ```python) whose output starts with the line %s, for example:\n\n```bash\necho %s\n```", marker, marker)
	}
	return msg
}

// Parse returns one tool call per fenced block of text whose language
// names one of actions, in order. Calls have no id (the runtime assigns
// them). An unterminated block is not an action.
func Parse(text string, actions []Action) []model.ToolCall {
	var calls []model.ToolCall
	lines := strings.SplitAfter(text, "\n")
	for i := 0; i < len(lines); i++ {
		fence, info, ok := openFence(lines[i])
		if !ok {
			continue
		}
		var body strings.Builder
		closed := false
		j := i + 1
		for ; j < len(lines); j++ {
			if closesFence(lines[j], fence) {
				closed = true
				break
			}
			body.WriteString(lines[j])
		}
		if !closed {
			break
		}
		i = j
		a := actionFor(info, actions)
		if a == nil {
			continue
		}
		code := strings.TrimRight(body.String(), "\n")
		if strings.TrimSpace(code) == "" {
			continue
		}
		args, _ := json.Marshal(map[string]string{a.Arg: code})
		calls = append(calls, model.ToolCall{Name: a.Tool, Arguments: string(args)})
	}
	return calls
}

// openFence reports whether line opens a fenced block (at most three
// spaces of indentation, three or more backticks or tildes) and returns
// the fence and the first word of its info string, lowercased.
func openFence(line string) (string, string, bool) {
	s := strings.TrimRight(line, "\r\n")
	trimmed := strings.TrimLeft(s, " ")
	if len(s)-len(trimmed) > 3 || len(trimmed) < 3 {
		return "", "", false
	}
	c := trimmed[0]
	if c != '`' && c != '~' {
		return "", "", false
	}
	n := 0
	for n < len(trimmed) && trimmed[n] == c {
		n++
	}
	if n < 3 {
		return "", "", false
	}
	info := strings.TrimSpace(trimmed[n:])
	if c == '`' && strings.Contains(info, "`") {
		return "", "", false
	}
	word, _, _ := strings.Cut(info, " ")
	word, _, _ = strings.Cut(word, "{")
	return trimmed[:n], strings.ToLower(word), true
}

// closesFence reports whether line closes a block opened by fence.
func closesFence(line, fence string) bool {
	s := strings.TrimSpace(line)
	if len(s) < len(fence) || s[0] != fence[0] {
		return false
	}
	return strings.Trim(s, string(fence[0])) == ""
}

func actionFor(lang string, actions []Action) *Action {
	for i := range actions {
		for _, l := range actions[i].Languages {
			if l == lang {
				return &actions[i]
			}
		}
	}
	return nil
}

// flatten rewrites a conversation for a model without tools: assistant
// messages keep only their text, tool results become user messages
// ("Result of action N (tool):"), and consecutive user messages merge.
func flatten(msgs []model.Message) []model.Message {
	out := make([]model.Message, 0, len(msgs))
	calls := map[string]string{}
	n := 0
	add := func(m model.Message) {
		if k := len(out); k > 0 && m.Role == model.RoleUser && out[k-1].Role == model.RoleUser {
			out[k-1].Content = joinText(out[k-1].Content, m.Content)
			return
		}
		out = append(out, m)
	}
	for _, m := range msgs {
		switch m.Role {
		case model.RoleAssistant:
			n = 0
			for _, c := range m.ToolCalls {
				calls[c.ID] = c.Name
			}
			text := m.Content
			if strings.TrimSpace(text) == "" {
				text = "(no text)"
			}
			add(model.Message{Role: model.RoleAssistant, Content: text})
		case model.RoleTool:
			n++
			status := ""
			if m.IsError {
				status = ", failed"
			}
			add(model.Message{Role: model.RoleUser, Content: fmt.Sprintf("Result of action %d (%s%s):\n%s", n, calls[m.ToolCallID], status, m.Content)})
		default:
			add(model.Message{Role: m.Role, Content: m.Content})
		}
	}
	return out
}

func joinText(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "\n\n" + b
}

// untilMarker drops the blocks after the first bash block that names the
// completion marker: that block finishes the run, and a block after it
// would change the workspace after the submission was printed (a diff
// that no longer matches). If the marker block does not finish the run
// after all, the results show the model which blocks ran.
func untilMarker(calls []model.ToolCall, marker string) []model.ToolCall {
	if marker == "" {
		return calls
	}
	for i, c := range calls {
		if c.Name == "bash" && strings.Contains(c.Arguments, marker) {
			return calls[:i+1]
		}
	}
	return calls
}
