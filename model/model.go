// Package model defines Keel's provider-neutral conversation types and the
// [Model] interface that every provider implements.
//
// The journal stores these types (never a provider's wire shape), so a run
// can resume under another model or provider. Provider packages live below
// this one: [github.com/keel-run/keel/model/openai] (OpenAI and every
// OpenAI-compatible endpoint), [github.com/keel-run/keel/model/anthropic]
// and [github.com/keel-run/keel/model/replay] (recorded trajectories).
//
// Errors returned by a [Model] are classified with [*Error] so that the
// runtime can tell a retryable failure from a rate limit, an authentication
// problem or a context overflow.
package model

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Role is the author of a [Message]. The values match the OpenAI Chat
// Completions roles; other providers map onto them.
type Role string

// The roles Keel uses.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one provider-neutral conversation turn.
//
// An assistant message may carry [ToolCall]s; a tool message answers exactly
// one of them through ToolCallID. Content is plain UTF-8 text.
type Message struct {
	Role    Role   `json:"role"`
	Content string `json:"content,omitempty"`
	// ToolCalls are the function calls of an assistant message, in the
	// order the model emitted them.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID names the call a tool message answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// IsError marks a tool message that reports a failure (Anthropic's
	// tool_result is_error; folded into the text for OpenAI).
	IsError bool `json:"is_error,omitempty"`
}

// ToolCall is a function call requested by the model.
type ToolCall struct {
	// ID is the provider's call id, echoed in the answering tool message.
	ID string `json:"id"`
	// Name is the tool name as the model wrote it (it may be unknown).
	Name string `json:"name"`
	// Arguments is the raw argument text as the model emitted it. It is
	// usually a JSON object but may be malformed; the runtime validates it
	// before anything runs.
	Arguments string `json:"arguments"`
}

// ReplacementCallID returns the id the runtime gives the i-th call (from
// 0) of step (from 1) when the provider's id is missing, repeated or not
// a short run of letters, digits, '_' and '-': "call_keel_STEP_I". The
// journal and every later request carry the replacement.
func ReplacementCallID(step, i int) string { return fmt.Sprintf("call_keel_%d_%d", step, i) }

// IsReplacementCallID reports whether id is a [ReplacementCallID] of the
// i-th call of some step: a recorded trajectory (model/replay) accepts it
// in place of the id it recorded there.
func IsReplacementCallID(id string, i int) bool {
	rest, ok := strings.CutPrefix(id, "call_keel_")
	if !ok {
		return false
	}
	step, idx, ok := strings.Cut(rest, "_")
	if !ok || idx != strconv.Itoa(i) {
		return false
	}
	n, err := strconv.Atoi(step)
	return err == nil && n > 0 && strconv.Itoa(n) == step
}

// ToolSpec describes a tool offered to the model.
type ToolSpec struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Parameters is the JSON Schema (draft 2020-12 subset understood by
	// providers) of the arguments object.
	Parameters json.RawMessage `json:"parameters"`
}

// Request is one model call. Messages never include the system prompt,
// which travels in System so that providers with a separate system field
// (Anthropic) and those with a system message (OpenAI) both map it cleanly.
type Request struct {
	System   string     `json:"system,omitempty"`
	Messages []Message  `json:"messages"`
	Tools    []ToolSpec `json:"tools,omitempty"`
	// MaxOutputTokens bounds the completion; 0 means the provider default
	// (Anthropic requires a value, so its adapter substitutes 8192).
	MaxOutputTokens int `json:"max_output_tokens,omitempty"`
	// Temperature is passed through when non-nil.
	Temperature *float64 `json:"temperature,omitempty"`
	// PriorTurns is the number of assistant turns of the conversation
	// that precede Messages but are not in it, because the runtime
	// compacted them into a summary. Providers ignore it; a replay model
	// adds it to the assistant messages it counts, so that it still
	// answers with the right recorded turn.
	PriorTurns int `json:"prior_turns,omitempty"`
	// Purpose says what the call is for: "" (PurposeTurn) is the next
	// turn of the agent loop, [PurposeSummary] a request to summarise
	// the conversation for compaction. Providers ignore it; a replay
	// model refuses summary requests rather than spend a recorded turn.
	Purpose string `json:"purpose,omitempty"`
}

// Request purposes (see [Request].Purpose).
const (
	// PurposeTurn is a request for the next turn of the agent loop.
	PurposeTurn = ""
	// PurposeSummary is a request to summarise earlier turns so that
	// they can leave the context window.
	PurposeSummary = "summary"
)

// Usage counts the tokens of one model call as reported by the provider.
type Usage struct {
	// InputTokens is every prompt token, including CachedInputTokens.
	InputTokens int64 `json:"input_tokens"`
	// OutputTokens is every completion token (reasoning included).
	OutputTokens int64 `json:"output_tokens"`
	// CachedInputTokens is the part of InputTokens read from the
	// provider's prompt cache.
	CachedInputTokens int64 `json:"cached_input_tokens,omitempty"`
	// CacheWriteTokens is the part of InputTokens written to the cache
	// (Anthropic cache_creation_input_tokens).
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
}

// Add returns the element-wise sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		InputTokens:       u.InputTokens + v.InputTokens,
		OutputTokens:      u.OutputTokens + v.OutputTokens,
		CachedInputTokens: u.CachedInputTokens + v.CachedInputTokens,
		CacheWriteTokens:  u.CacheWriteTokens + v.CacheWriteTokens,
	}
}

// Total is InputTokens + OutputTokens.
func (u Usage) Total() int64 { return u.InputTokens + u.OutputTokens }

// Response is the model's answer to a [Request].
type Response struct {
	// Message is the assistant message (Role is always RoleAssistant).
	Message Message `json:"message"`
	Usage   Usage   `json:"usage"`
	// Model is the model name the provider reports having used.
	Model string `json:"model,omitempty"`
	// ID is the provider's response id, for correlation with its logs.
	ID string `json:"id,omitempty"`
	// StopReason is the provider's finish reason, normalised to one of
	// "stop", "tool_calls", "length", "content_filter" or the raw value.
	StopReason string `json:"stop_reason,omitempty"`
}

// Model generates the next assistant message.
//
// Generate must be safe for concurrent use by several runs. It returns an
// [*Error] for provider failures so callers can branch on [Error.Kind]; it
// honours ctx cancellation. Implementations must never return a partial
// tool call: either the whole response or an error.
type Model interface {
	Generate(ctx context.Context, req *Request) (*Response, error)
}

// Namer is implemented by models that can name themselves in the spec
// syntax of [ParseSpec] (for example "openai:gpt-4o"). It is optional.
type Namer interface {
	Name() string
}
