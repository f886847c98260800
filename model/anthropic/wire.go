package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/keel-run/keel/model"
)

// turn is one wire message being assembled.
type turn struct {
	role   model.Role // RoleUser or RoleAssistant
	blocks []anthropic.ContentBlockParamUnion
}

// params maps a [model.Request] onto the Messages wire shape.
func (m *Model) params(req *model.Request) (anthropic.MessageNewParams, error) {
	p := anthropic.MessageNewParams{Model: m.name, MaxTokens: int64(m.maxTokens)}
	if req == nil {
		return p, fmt.Errorf("anthropic: nil request")
	}
	if req.MaxOutputTokens > 0 {
		p.MaxTokens = int64(req.MaxOutputTokens)
	}
	system := req.System
	var turns []turn
	add := func(role model.Role, b anthropic.ContentBlockParamUnion) {
		if n := len(turns); n > 0 && turns[n-1].role == role {
			turns[n-1].blocks = append(turns[n-1].blocks, b)
			return
		}
		turns = append(turns, turn{role: role, blocks: []anthropic.ContentBlockParamUnion{b}})
	}
	for i, msg := range req.Messages {
		switch msg.Role {
		case model.RoleSystem:
			// Messages should not carry the system prompt; if one does,
			// it joins the system field rather than being lost.
			system = joinText(system, msg.Content)
		case model.RoleUser:
			if msg.Content != "" {
				add(model.RoleUser, anthropic.NewTextBlock(msg.Content))
			}
		case model.RoleAssistant:
			if msg.Content != "" {
				add(model.RoleAssistant, anthropic.NewTextBlock(msg.Content))
			}
			for _, tc := range msg.ToolCalls {
				add(model.RoleAssistant, anthropic.NewToolUseBlock(wireID(tc.ID), input(tc.Arguments), wireName(tc.Name)))
			}
		case model.RoleTool:
			if msg.ToolCallID == "" {
				return p, fmt.Errorf("anthropic: message %d: tool message without tool_call_id", i)
			}
			r := anthropic.ToolResultBlockParam{ToolUseID: wireID(msg.ToolCallID)}
			if msg.Content != "" {
				r.Content = []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: msg.Content}}}
			}
			if msg.IsError {
				r.IsError = anthropic.Bool(true)
			}
			// Tool results must lead their user message: put them before
			// any text already grouped into it.
			b := anthropic.ContentBlockParamUnion{OfToolResult: &r}
			if n := len(turns); n > 0 && turns[n-1].role == model.RoleUser {
				t := &turns[n-1]
				k := 0
				for k < len(t.blocks) && t.blocks[k].OfToolResult != nil {
					k++
				}
				t.blocks = append(t.blocks[:k], append([]anthropic.ContentBlockParamUnion{b}, t.blocks[k:]...)...)
			} else {
				add(model.RoleUser, b)
			}
		default:
			return p, fmt.Errorf("anthropic: message %d: unknown role %q", i, msg.Role)
		}
	}
	for _, t := range turns {
		if t.role == model.RoleUser {
			p.Messages = append(p.Messages, anthropic.NewUserMessage(t.blocks...))
		} else {
			p.Messages = append(p.Messages, anthropic.NewAssistantMessage(t.blocks...))
		}
	}
	if n := len(turns); n > 0 {
		blocks := turns[n-1].blocks
		cacheBlock(blocks[len(blocks)-1])
	}
	if system != "" {
		p.System = []anthropic.TextBlockParam{{Text: system, CacheControl: anthropic.NewCacheControlEphemeralParam()}}
	}
	for i, t := range req.Tools {
		schema, err := inputSchema(t.Parameters)
		if err != nil {
			return p, fmt.Errorf("anthropic: tool %q: %w", t.Name, err)
		}
		tp := anthropic.ToolParam{Name: t.Name, InputSchema: schema}
		if t.Description != "" {
			tp.Description = anthropic.String(t.Description)
		}
		if i == len(req.Tools)-1 {
			tp.CacheControl = anthropic.NewCacheControlEphemeralParam()
		}
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: &tp})
	}
	return p, nil
}

// cacheBlock sets an ephemeral cache breakpoint on b.
func cacheBlock(b anthropic.ContentBlockParamUnion) {
	cc := anthropic.NewCacheControlEphemeralParam()
	switch {
	case b.OfText != nil:
		b.OfText.CacheControl = cc
	case b.OfToolUse != nil:
		b.OfToolUse.CacheControl = cc
	case b.OfToolResult != nil:
		b.OfToolResult.CacheControl = cc
	}
}

func joinText(a, b string) string {
	if a == "" {
		return b
	}
	if b == "" {
		return a
	}
	return a + "\n\n" + b
}

// input returns the tool_use input for raw argument text: the JSON object
// itself, or {} when the text is not a JSON object.
func input(args string) json.RawMessage {
	trimmed := bytes.TrimSpace([]byte(args))
	if len(trimmed) > 0 && trimmed[0] == '{' && json.Valid(trimmed) {
		return json.RawMessage(trimmed)
	}
	return json.RawMessage(`{}`)
}

// inputSchema splits a JSON Schema object into the SDK's fields, keeping
// every value as the raw JSON it was given.
func inputSchema(schema json.RawMessage) (anthropic.ToolInputSchemaParam, error) {
	var s anthropic.ToolInputSchemaParam
	if len(bytes.TrimSpace(schema)) == 0 {
		s.Properties = map[string]any{}
		return s, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(schema, &top); err != nil {
		return s, fmt.Errorf("parameters are not a JSON object: %w", err)
	}
	for k, v := range top {
		switch k {
		case "type":
			var typ string
			if json.Unmarshal(v, &typ) != nil || typ != "object" {
				return s, fmt.Errorf("parameters must be an object schema, got type %s", v)
			}
		case "properties":
			s.Properties = v
		case "required":
			if err := json.Unmarshal(v, &s.Required); err != nil {
				return s, fmt.Errorf("parameters: required: %w", err)
			}
		default:
			if s.ExtraFields == nil {
				s.ExtraFields = map[string]any{}
			}
			s.ExtraFields[k] = v
		}
	}
	return s, nil
}

// wireID maps a tool call id onto the characters the API accepts
// (^[a-zA-Z0-9_-]+$), the same way for a tool_use and its tool_result, so a
// history recorded under another provider still pairs.
func wireID(id string) string { return sanitize(id, "toolu_keel") }

// wireName maps a tool name recorded in the history onto the characters the
// API accepts; the names Keel offers already comply.
func wireName(name string) string { return sanitize(name, "unknown_tool") }

func sanitize(s, empty string) string {
	if s == "" {
		return empty
	}
	var b strings.Builder
	for _, r := range s {
		if r == '-' || r == '_' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// response maps a Messages response onto a [model.Response]: text blocks are
// joined with a blank line, tool_use blocks become tool calls with their
// input, compacted, as the argument text; thinking and server-tool blocks are not
// part of the neutral message.
func response(msg *anthropic.Message) *model.Response {
	out := model.Message{Role: model.RoleAssistant}
	var texts []string
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			if b.Text != "" {
				texts = append(texts, b.Text)
			}
		case "tool_use":
			// The API sends input as a parsed JSON object; its compact
			// text is the argument string, stable whatever the spacing.
			var buf bytes.Buffer
			args := "{}"
			if json.Compact(&buf, b.Input) == nil && buf.Len() > 0 && buf.String() != "null" {
				args = buf.String()
			}
			out.ToolCalls = append(out.ToolCalls, model.ToolCall{ID: b.ID, Name: b.Name, Arguments: args})
		}
	}
	out.Content = strings.Join(texts, "\n\n")
	u := msg.Usage
	return &model.Response{
		Message: out,
		Usage: model.Usage{
			InputTokens:       u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens,
			OutputTokens:      u.OutputTokens,
			CachedInputTokens: u.CacheReadInputTokens,
			CacheWriteTokens:  u.CacheCreationInputTokens,
		},
		Model:      msg.Model,
		ID:         msg.ID,
		StopReason: stopReason(string(msg.StopReason)),
	}
}

// stopReason normalises Anthropic's stop_reason to the [model.Response]
// vocabulary.
func stopReason(s string) string {
	switch s {
	case "end_turn", "stop_sequence":
		return "stop"
	case "tool_use":
		return "tool_calls"
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "refusal":
		return "content_filter"
	default:
		return s
	}
}
