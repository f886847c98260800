package eval

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
)

// ATIFVersion is the version of the Agent Trajectory Interchange Format
// [ATIF] writes.
const ATIFVersion = "ATIF-v1.4"

// ATIF returns the run of events (all of them, from 1) in the Agent
// Trajectory Interchange Format (Harbor's RFC 0001): the system prompt and
// the task as system and user steps, each model answer as an agent step
// with its tool calls, the observations of those calls (their results
// as the model saw them) and the step's token and cost metrics, people's
// messages as user steps, and the totals in final_metrics. Gate
// decisions and approvals go in each step's extra.
func ATIF(events []journal.Event, version string) ([]byte, error) {
	if len(events) == 0 || events[0].Type != journal.RunCreated {
		return nil, fmt.Errorf("eval: ATIF: the events do not start with run.created")
	}
	type toolCall struct {
		ID        string          `json:"tool_call_id"`
		Function  string          `json:"function_name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	type result struct {
		Source  string `json:"source_call_id"`
		Content string `json:"content"`
	}
	type observation struct {
		Results []result `json:"results"`
	}
	type metrics struct {
		Prompt     int64   `json:"prompt_tokens"`
		Completion int64   `json:"completion_tokens"`
		Cached     int64   `json:"cached_tokens,omitempty"`
		Cost       float64 `json:"cost_usd"`
	}
	type step struct {
		ID          int            `json:"step_id"`
		Timestamp   string         `json:"timestamp"`
		Source      string         `json:"source"`
		Model       string         `json:"model_name,omitempty"`
		Message     string         `json:"message"`
		ToolCalls   []toolCall     `json:"tool_calls,omitempty"`
		Observation *observation   `json:"observation,omitempty"`
		Metrics     *metrics       `json:"metrics,omitempty"`
		Extra       map[string]any `json:"extra,omitempty"`
	}
	var (
		steps   []*step
		byCall  = map[string]*step{}
		total   metrics
		created *agent.RunCreated
		final   map[string]any
		gates   = map[*step][]any{}
	)
	add := func(e *journal.Event, s *step) *step {
		s.ID = len(steps) + 1
		s.Timestamp = e.Time.UTC().Format(time.RFC3339Nano)
		steps = append(steps, s)
		return s
	}
	for i := range events {
		e := &events[i]
		v, err := agent.Decode(e)
		if err != nil {
			return nil, err
		}
		switch p := v.(type) {
		case *agent.RunCreated:
			created = p
			if p.System != "" {
				add(e, &step{Source: "system", Message: p.System})
			}
			add(e, &step{Source: "user", Message: p.Task})
		case *agent.UserMessage:
			add(e, &step{Source: "user", Message: p.Content})
		case *agent.ModelResponded:
			s := add(e, &step{Source: "agent", Model: p.Model, Message: p.Message.Content,
				Metrics: &metrics{Prompt: p.Usage.InputTokens, Completion: p.Usage.OutputTokens, Cached: p.Usage.CachedInputTokens, Cost: p.Cost}})
			for _, c := range p.Message.ToolCalls {
				args := json.RawMessage(c.Arguments)
				if !json.Valid(args) {
					b, _ := json.Marshal(c.Arguments)
					args = b
				}
				s.ToolCalls = append(s.ToolCalls, toolCall{ID: c.ID, Function: c.Name, Arguments: args})
				byCall[c.ID] = s
			}
			total.Prompt += p.Usage.InputTokens
			total.Completion += p.Usage.OutputTokens
			total.Cached += p.Usage.CachedInputTokens
			total.Cost += p.Cost
		case *agent.GateDecided:
			if s := byCall[p.CallID]; s != nil {
				gates[s] = append(gates[s], map[string]any{"call_id": p.CallID, "decision": p.Effect, "policies": p.Policies, "reason": p.Reason})
			}
		case *agent.ToolFinished:
			if s := byCall[p.CallID]; s != nil {
				if s.Observation == nil {
					s.Observation = &observation{}
				}
				s.Observation.Results = append(s.Observation.Results, result{Source: p.CallID, Content: p.Content})
			}
		case *agent.RunEnded:
			if e.Type != journal.RunPaused {
				final = map[string]any{"status": string(e.Type), "reason": p.Reason, "output": p.Output}
			}
		}
	}
	for _, s := range steps {
		if g := gates[s]; g != nil {
			if s.Extra == nil {
				s.Extra = map[string]any{}
			}
			s.Extra["gate"] = g
		}
	}
	return json.MarshalIndent(map[string]any{
		"schema_version": ATIFVersion,
		"session_id":     events[0].RunID,
		"agent":          map[string]any{"name": "keel", "version": version, "model_name": created.Model},
		"steps":          steps,
		"final_metrics": map[string]any{"total_prompt_tokens": total.Prompt, "total_completion_tokens": total.Completion,
			"total_cached_tokens": total.Cached, "total_cost_usd": total.Cost, "total_steps": len(steps)},
		"extra": map[string]any{"task": created.Task, "labels": created.Labels, "end": final},
	}, "", " ")
}
