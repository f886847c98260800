// Package replay answers model requests from a recorded trajectory, so that
// a run can be repeated offline with real tools, sandbox and journal and
// only the model recorded.
//
// A trajectory is the JSON file format of the evaluation runs in the
// repository's testdata/trajectories (mini-swe-agent's trajectory_format
// "mini-swe-agent-1.1"):
// a messages list of system, user (the task), then alternating assistant and
// tool messages in OpenAI chat format, then an exit message; each assistant
// message keeps the provider's raw chat.completion in extra.response, each
// tool message the raw result in extra.returncode and extra.raw_output, and
// info.submission the final patch.
//
// [Model] answers the k-th request with the k-th recorded assistant message,
// where k is the number of assistant messages already in the request. It
// keeps no state, so a run resumed after a crash gets the turn it needs.
// [NewHandler] serves the same turns over an OpenAI-compatible HTTP API,
// byte for byte as recorded, for `keel model serve-replay` and for testing
// the OpenAI adapter end to end.
//
// A run whose history was compacted (assistant turns replaced by a
// summary) says how many turns it left out in [model.Request].PriorTurns,
// and [Model] adds them to k. The HTTP handler has no such field, so a
// compacting run cannot be served by `keel model serve-replay`. Summary
// requests ([model.PurposeSummary]) are refused: the runtime then writes a
// mechanical summary instead of consuming a recorded turn.
package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/keel-run/keel/model"
)

// Trajectory is a loaded recording. It is immutable and safe for concurrent
// use; accessors return copies.
type Trajectory struct {
	path       string
	format     string
	instanceID string
	system     string
	task       string
	submission string
	exitStatus string
	modelName  string
	turns      []Turn
	results    []ToolResult
	byCall     map[string]int // call id → index in results
}

// Turn is one recorded assistant turn.
type Turn struct {
	// Index is the turn's position among the assistant turns, from 0.
	Index int
	// Message is the assistant message with its recorded content and tool
	// calls (recorded ids, names and raw argument strings).
	Message model.Message
	// Usage is the recorded usage of extra.response.usage.
	Usage model.Usage
	// ResponseID, Model and StopReason come from extra.response (id,
	// model, choices[0].finish_reason).
	ResponseID string
	Model      string
	StopReason string
	// Response is extra.response exactly as it appears in the file, or
	// nil when the turn has none.
	Response json.RawMessage
}

// ToolResult is one recorded tool result.
type ToolResult struct {
	// CallID is the tool call this result answers.
	CallID string
	// Turn is the index of the assistant turn that made the call, or -1
	// when no recorded turn made it.
	Turn int
	// Content is the observation the model saw (for mini-swe-agent,
	// "<returncode>N</returncode>" then "<output>...</output>", outputs
	// over 10,000 characters shown as head and tail).
	Content string
	// ExitCode is extra.returncode, or -1 when none was recorded.
	ExitCode int
	// RawOutput is extra.raw_output, the command's whole output.
	RawOutput string
	// ExceptionInfo is extra.exception_info (a timeout or a crash of the
	// recording harness), usually empty.
	ExceptionInfo string
}

// wire shapes of the file.
type (
	fileTrajectory struct {
		Format     string        `json:"trajectory_format"`
		InstanceID string        `json:"instance_id"`
		Info       fileInfo      `json:"info"`
		Messages   []fileMessage `json:"messages"`
	}
	fileInfo struct {
		ExitStatus string `json:"exit_status"`
		Submission string `json:"submission"`
		Config     struct {
			Model struct {
				ModelName string `json:"model_name"`
			} `json:"model"`
		} `json:"config"`
	}
	fileMessage struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		ToolCalls  []fileToolCall  `json:"tool_calls"`
		ToolCallID string          `json:"tool_call_id"`
		Extra      struct {
			Response      json.RawMessage `json:"response"`
			ReturnCode    *int            `json:"returncode"`
			RawOutput     string          `json:"raw_output"`
			ExceptionInfo string          `json:"exception_info"`
		} `json:"extra"`
	}
	fileToolCall struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	// fileResponse is the part of a chat.completion a replay reads.
	fileResponse struct {
		ID      string `json:"id"`
		Model   string `json:"model"`
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage *struct {
			PromptTokens        int64 `json:"prompt_tokens"`
			CompletionTokens    int64 `json:"completion_tokens"`
			PromptTokensDetails *struct {
				CachedTokens *int64 `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
			PromptCacheHitTokens *int64 `json:"prompt_cache_hit_tokens"`
		} `json:"usage"`
	}
)

// Load reads the trajectory file at path. It returns an error naming the
// file and the message when the JSON is malformed, a message has an unknown
// role, content that is neither a string nor text parts, or a tool call
// without an id or a name, or a tool message without tool_call_id.
func Load(path string) (*Trajectory, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("replay: load: %w", err)
	}
	tr, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("replay: load %s: %w", path, err)
	}
	tr.path = path
	return tr, nil
}

// Parse reads a trajectory from data; see [Load] for its errors. The
// result's [Trajectory.Path] is empty.
func Parse(data []byte) (*Trajectory, error) {
	var f fileTrajectory
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("bad JSON: %w", err)
	}
	if f.Messages == nil {
		return nil, fmt.Errorf("no messages list")
	}
	tr := &Trajectory{
		format:     f.Format,
		instanceID: f.InstanceID,
		submission: f.Info.Submission,
		exitStatus: f.Info.ExitStatus,
		modelName:  f.Info.Config.Model.ModelName,
		byCall:     map[string]int{},
	}
	callTurn := map[string]int{}
	seenUser := false
	for i, m := range f.Messages {
		content, err := text(m.Content)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		switch m.Role {
		case "system":
			if tr.system == "" {
				tr.system = content
			}
		case "user":
			if !seenUser {
				tr.task, seenUser = content, true
			}
		case "assistant":
			t, err := turn(len(tr.turns), m, content)
			if err != nil {
				return nil, fmt.Errorf("message %d: %w", i, err)
			}
			for _, c := range t.Message.ToolCalls {
				callTurn[c.ID] = t.Index
			}
			tr.turns = append(tr.turns, t)
		case "tool":
			if m.ToolCallID == "" {
				return nil, fmt.Errorf("message %d: tool message without tool_call_id", i)
			}
			r := ToolResult{CallID: m.ToolCallID, Turn: -1, Content: content, ExitCode: -1, RawOutput: m.Extra.RawOutput, ExceptionInfo: m.Extra.ExceptionInfo}
			if k, ok := callTurn[m.ToolCallID]; ok {
				r.Turn = k
			}
			if m.Extra.ReturnCode != nil {
				r.ExitCode = *m.Extra.ReturnCode
			}
			tr.byCall[r.CallID] = len(tr.results)
			tr.results = append(tr.results, r)
		case "exit":
			if tr.submission == "" {
				tr.submission = content
			}
		default:
			return nil, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	for _, t := range tr.turns {
		if t.Model != "" {
			tr.modelName = t.Model
			break
		}
	}
	return tr, nil
}

// turn builds the k-th recorded assistant turn.
func turn(k int, m fileMessage, content string) (Turn, error) {
	t := Turn{Index: k, Message: model.Message{Role: model.RoleAssistant, Content: content}}
	for j, c := range m.ToolCalls {
		if c.ID == "" || c.Function.Name == "" {
			return t, fmt.Errorf("tool call %d has no id or no function name", j)
		}
		t.Message.ToolCalls = append(t.Message.ToolCalls, model.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
	}
	raw := bytes.TrimSpace(m.Extra.Response)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return t, nil
	}
	t.Response = m.Extra.Response
	var r fileResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		return t, fmt.Errorf("extra.response: %w", err)
	}
	t.ResponseID, t.Model = r.ID, r.Model
	if len(r.Choices) > 0 {
		t.StopReason = r.Choices[0].FinishReason
	}
	if t.StopReason == "" && len(t.Message.ToolCalls) > 0 {
		t.StopReason = "tool_calls"
	}
	if u := r.Usage; u != nil {
		t.Usage = model.Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens}
		switch {
		case u.PromptTokensDetails != nil && u.PromptTokensDetails.CachedTokens != nil:
			t.Usage.CachedInputTokens = *u.PromptTokensDetails.CachedTokens
		case u.PromptCacheHitTokens != nil:
			t.Usage.CachedInputTokens = *u.PromptCacheHitTokens
		}
	}
	return t, nil
}

// text decodes message content: a string, null, or a list of OpenAI content
// parts whose text parts are joined.
func text(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("content is neither a string nor a list of parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

// Path returns the file the trajectory was loaded from ("" after [Parse]).
func (tr *Trajectory) Path() string { return tr.path }

// Format returns the recorded trajectory_format ("mini-swe-agent-1.1").
func (tr *Trajectory) Format() string { return tr.format }

// InstanceID returns the recorded task instance id.
func (tr *Trajectory) InstanceID() string { return tr.instanceID }

// System returns the recorded system prompt (the first system message).
func (tr *Trajectory) System() string { return tr.system }

// Task returns the task text, the first user message.
func (tr *Trajectory) Task() string { return tr.task }

// Submission returns info.submission (the final patch), or the exit
// message's content when info has none.
func (tr *Trajectory) Submission() string { return tr.submission }

// ExitStatus returns info.exit_status ("Submitted").
func (tr *Trajectory) ExitStatus() string { return tr.exitStatus }

// Model returns the recorded model name: the model the provider reported in
// the first recorded response ("deepseek-chat"), else the configured
// info.config.model.model_name.
func (tr *Trajectory) Model() string { return tr.modelName }

// Len returns the number of recorded assistant turns.
func (tr *Trajectory) Len() int { return len(tr.turns) }

// Turn returns the k-th recorded assistant turn (from 0) and whether it
// exists.
func (tr *Trajectory) Turn(k int) (Turn, bool) {
	if k < 0 || k >= len(tr.turns) {
		return Turn{}, false
	}
	return copyTurn(tr.turns[k]), true
}

// Turns returns every recorded assistant turn in order.
func (tr *Trajectory) Turns() []Turn {
	out := make([]Turn, len(tr.turns))
	for i, t := range tr.turns {
		out[i] = copyTurn(t)
	}
	return out
}

// ToolResult returns the recorded result of the tool call callID and
// whether there is one. The call that ends a run (its output is the
// submission) has none.
func (tr *Trajectory) ToolResult(callID string) (ToolResult, bool) {
	i, ok := tr.byCall[callID]
	if !ok {
		return ToolResult{}, false
	}
	return tr.results[i], true
}

// ToolResults returns every recorded tool result in recorded order.
func (tr *Trajectory) ToolResults() []ToolResult {
	return append([]ToolResult(nil), tr.results...)
}

func copyTurn(t Turn) Turn {
	t.Message.ToolCalls = append([]model.ToolCall(nil), t.Message.ToolCalls...)
	t.Response = append(json.RawMessage(nil), t.Response...)
	return t
}
