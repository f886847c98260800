package openai

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/keel-run/keel/model"
)

// params maps a [model.Request] onto the Chat Completions wire shape.
func (m *Model) params(req *model.Request) (openai.ChatCompletionNewParams, error) {
	p := openai.ChatCompletionNewParams{Model: m.name}
	if req == nil {
		return p, fmt.Errorf("openai: nil request")
	}
	if req.System != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(req.System))
	}
	for i, msg := range req.Messages {
		w, err := message(msg)
		if err != nil {
			return p, fmt.Errorf("openai: message %d: %w", i, err)
		}
		p.Messages = append(p.Messages, w)
	}
	for _, t := range req.Tools {
		params, err := parameters(t.Parameters)
		if err != nil {
			return p, fmt.Errorf("openai: tool %q: %w", t.Name, err)
		}
		fn := shared.FunctionDefinitionParam{Name: t.Name, Parameters: params}
		if t.Description != "" {
			fn.Description = openai.String(t.Description)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fn))
	}
	if req.MaxOutputTokens > 0 {
		// OpenAI's newer models accept only max_completion_tokens; many
		// compatible servers know only the older max_tokens.
		if m.compatible {
			p.MaxTokens = openai.Int(int64(req.MaxOutputTokens))
		} else {
			p.MaxCompletionTokens = openai.Int(int64(req.MaxOutputTokens))
		}
	}
	if req.Temperature != nil {
		p.Temperature = openai.Float(*req.Temperature)
	}
	return p, nil
}

// message maps one Keel message.
func message(msg model.Message) (openai.ChatCompletionMessageParamUnion, error) {
	switch msg.Role {
	case model.RoleSystem:
		return openai.SystemMessage(msg.Content), nil
	case model.RoleUser:
		return openai.UserMessage(msg.Content), nil
	case model.RoleTool:
		if msg.ToolCallID == "" {
			return openai.ChatCompletionMessageParamUnion{}, fmt.Errorf("tool message without tool_call_id")
		}
		return openai.ToolMessage(msg.Content, msg.ToolCallID), nil
	case model.RoleAssistant:
		a := openai.ChatCompletionAssistantMessageParam{}
		// content may be omitted (null) only when tool calls are present.
		if msg.Content != "" || len(msg.ToolCalls) == 0 {
			a.Content.OfString = openai.String(msg.Content)
		}
		for _, tc := range msg.ToolCalls {
			args := tc.Arguments
			if !json.Valid([]byte(args)) {
				args = "{}"
			}
			a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID:       tc.ID,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: args},
				},
			})
		}
		return openai.ChatCompletionMessageParamUnion{OfAssistant: &a}, nil
	default:
		return openai.ChatCompletionMessageParamUnion{}, fmt.Errorf("unknown role %q", msg.Role)
	}
}

// parameters turns a JSON Schema into the SDK's map, keeping every nested
// value as the raw JSON it was given. An empty schema is an object schema
// without properties.
func parameters(schema json.RawMessage) (shared.FunctionParameters, error) {
	if len(strings.TrimSpace(string(schema))) == 0 {
		return shared.FunctionParameters{"type": "object", "properties": map[string]any{}}, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(schema, &top); err != nil {
		return nil, fmt.Errorf("parameters are not a JSON object: %w", err)
	}
	out := make(shared.FunctionParameters, len(top))
	for k, v := range top {
		out[k] = v
	}
	return out, nil
}

// response maps a chat completion onto a [model.Response]. A response
// without choices is KindRetryable: the provider answered, but with nothing
// the runtime could use.
func response(cc *openai.ChatCompletion) (*model.Response, error) {
	if cc == nil {
		// The body was JSON null.
		return nil, &model.Error{Kind: model.KindRetryable, Provider: provider, StatusCode: 200, Message: "the answer is null, not a chat completion"}
	}
	if len(cc.Choices) > 0 && !hasMessage(cc.RawJSON()) {
		// choices: [null], [{"index": 0}], [{"message": null}]: the
		// decoder leaves a zero message, which would read as an empty
		// answer.
		return nil, &model.Error{Kind: model.KindRetryable, Provider: provider, StatusCode: 200, Message: "the answer's first choice has no message"}
	}
	if len(cc.Choices) == 0 {
		msg := "response has no choices"
		// Some OpenAI-compatible servers answer HTTP 200 with an error
		// object: keep the provider's words.
		var body struct {
			Error json.RawMessage `json:"error"`
		}
		if json.Unmarshal([]byte(cc.RawJSON()), &body) == nil && len(body.Error) > 0 && string(body.Error) != "null" {
			var e struct {
				Message string `json:"message"`
			}
			if json.Unmarshal(body.Error, &e) == nil && e.Message != "" {
				msg += ": error: " + e.Message
			} else {
				msg += ": error: " + clipText(string(body.Error), 500)
			}
		}
		return nil, &model.Error{Kind: model.KindRetryable, Provider: provider, StatusCode: 200, Message: msg}
	}
	ch := cc.Choices[0]
	msg := model.Message{Role: model.RoleAssistant, Content: ch.Message.Content}
	if msg.Content == "" && ch.Message.Refusal != "" {
		msg.Content = ch.Message.Refusal
	}
	for i, tc := range ch.Message.ToolCalls {
		call := model.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments}
		if tc.Type == "custom" {
			call.Name, call.Arguments = tc.Custom.Name, tc.Custom.Input
		}
		if call.ID == "" {
			// Some compatible servers omit ids; the runtime needs one to
			// pair the result, and it must be stable for this response.
			call.ID = fmt.Sprintf("call_%s_%d", idSafe(cc.ID), i)
		}
		msg.ToolCalls = append(msg.ToolCalls, call)
	}
	stop := ch.FinishReason
	switch stop {
	case "function_call":
		stop = "tool_calls"
	case "":
		if len(msg.ToolCalls) > 0 {
			stop = "tool_calls"
		}
	}
	return &model.Response{
		Message:    msg,
		Usage:      usage(cc.Usage),
		Model:      cc.Model,
		ID:         cc.ID,
		StopReason: stop,
	}, nil
}

// usage maps token counts; see the package documentation.
func usage(u openai.CompletionUsage) model.Usage {
	out := model.Usage{
		InputTokens:       u.PromptTokens,
		OutputTokens:      u.CompletionTokens,
		CachedInputTokens: u.PromptTokensDetails.CachedTokens,
	}
	if !u.PromptTokensDetails.JSON.CachedTokens.Valid() {
		// DeepSeek reports prompt_cache_hit_tokens (and, in newer
		// versions, also the OpenAI field).
		if f, ok := u.JSON.ExtraFields["prompt_cache_hit_tokens"]; ok {
			var n int64
			if json.Unmarshal([]byte(f.Raw()), &n) == nil {
				out.CachedInputTokens = n
			}
		}
	}
	return out
}

// idSafe keeps the characters every provider accepts in a tool call id.
func idSafe(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == '-' || r == '_' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "keel"
	}
	return b.String()
}

// clipText cuts s to at most n bytes, on a rune boundary, marking the cut.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// hasMessage reports whether the raw chat completion's first choice holds
// a message object. An answer whose raw text is not kept (built in code,
// not decoded) is taken as it is.
func hasMessage(raw string) bool {
	if raw == "" {
		return true
	}
	var body struct {
		Choices []struct {
			Message json.RawMessage `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(raw), &body); err != nil || len(body.Choices) == 0 {
		return false
	}
	m := strings.TrimSpace(string(body.Choices[0].Message))
	return strings.HasPrefix(m, "{")
}
