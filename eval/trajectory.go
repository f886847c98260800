package eval

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// Trajectory returns the run of events (all of them, from 1) as a
// recording in the trajectory format the replay model reads
// (mini-swe-agent-1.1: system, user, then each model answer with its
// usage and each tool result with its exit code and whole output), so
// that the run's model answers can be served again (keel eval freeze,
// keel runs replay). artifact, if not nil, reads the whole output of a
// result the model saw only in part (a path relative to the run's state
// directory); otherwise the bounded view is recorded.
func Trajectory(events []journal.Event, artifact func(rel string) ([]byte, error)) ([]byte, error) {
	if len(events) == 0 || events[0].Type != journal.RunCreated {
		return nil, fmt.Errorf("eval: trajectory: the events do not start with run.created")
	}
	type fn struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type call struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	type msg struct {
		Role       string         `json:"role"`
		Content    string         `json:"content"`
		ToolCalls  []call         `json:"tool_calls,omitempty"`
		ToolCallID string         `json:"tool_call_id,omitempty"`
		Extra      map[string]any `json:"extra,omitempty"`
	}
	var (
		msgs       []msg
		submission string
		modelName  string
		exit       string
	)
	for i := range events {
		e := &events[i]
		v, err := agent.Decode(e)
		if err != nil {
			return nil, err
		}
		switch p := v.(type) {
		case *agent.RunCreated:
			msgs = append(msgs, msg{Role: "system", Content: p.System}, msg{Role: "user", Content: p.Task})
		case *agent.UserMessage:
			msgs = append(msgs, msg{Role: "user", Content: p.Content})
		case *agent.ModelResponded:
			m := msg{Role: "assistant", Content: p.Message.Content}
			for _, c := range p.Message.ToolCalls {
				m.ToolCalls = append(m.ToolCalls, call{ID: c.ID, Type: "function", Function: fn{Name: c.Name, Arguments: c.Arguments}})
			}
			if modelName == "" {
				modelName = p.Model
			}
			finish := "stop"
			if len(m.ToolCalls) > 0 {
				finish = "tool_calls"
			}
			// The provider's own response is not journaled: this is the
			// chat.completion it amounts to, with the recorded usage.
			m.Extra = map[string]any{"response": map[string]any{
				"id": p.ResponseID, "object": "chat.completion", "model": p.Model,
				"choices": []any{map[string]any{"index": 0, "finish_reason": finish,
					"message": map[string]any{"role": "assistant", "content": p.Message.Content, "tool_calls": m.ToolCalls}}},
				"usage": map[string]any{"prompt_tokens": p.Usage.InputTokens, "completion_tokens": p.Usage.OutputTokens,
					"total_tokens":          p.Usage.InputTokens + p.Usage.OutputTokens,
					"prompt_tokens_details": map[string]any{"cached_tokens": p.Usage.CachedInputTokens}},
			}}
			msgs = append(msgs, m)
		case *agent.ToolFinished:
			raw := agent.ResultOutput(&p.Result)
			if p.Artifact != "" && artifact != nil {
				if b, err := artifact(p.Artifact); err == nil {
					raw = string(b)
				}
			}
			code := -1
			if p.ExitCode != nil {
				code = *p.ExitCode
			}
			msgs = append(msgs, msg{Role: "tool", ToolCallID: p.CallID, Content: p.Content,
				Extra: map[string]any{"returncode": code, "raw_output": raw}})
		case *agent.RunEnded:
			if e.Type != journal.RunPaused {
				exit = strings.TrimPrefix(string(e.Type), "run.") + ": " + p.Reason
				submission = p.Output
			}
		}
	}
	msgs = append(msgs, msg{Role: "exit", Content: submission})
	return json.MarshalIndent(map[string]any{
		"trajectory_format": "mini-swe-agent-1.1",
		"instance_id":       events[0].RunID,
		"info": map[string]any{"exit_status": exit, "submission": submission,
			"config": map[string]any{"model": map[string]any{"model_name": modelName}, "source": "keel journal of run " + events[0].RunID}},
		"messages": msgs,
	}, "", " ")
}
