package cli

import (
	"context"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/server/api"
)

func (r *remote) Inputs(ctx context.Context, runID string) ([]agent.PendingInput, error) {
	list, err := r.Client.Inputs(ctx)
	if err != nil {
		return nil, err
	}
	var out []agent.PendingInput
	for _, in := range list {
		if runID != "" && in.RunID != runID {
			continue
		}
		out = append(out, agent.PendingInput{RunID: in.RunID, Seq: in.Seq, Time: in.Requested, Task: in.Task,
			InputRequested: agent.InputRequested{ID: in.ID, CallID: in.CallID, Tool: in.Tool, Server: in.Server, Mode: in.Mode, Message: in.Message, Schema: in.Schema, URL: in.URL}})
	}
	return out, nil
}

// AnswerInput answers through the server, which records the token's
// person as who answered.
func (r *remote) AnswerInput(ctx context.Context, runID, id string, a *agent.InputAnswered) error {
	_, err := r.Client.AnswerInput(ctx, runID, id, &api.AnswerInput{Action: a.Action, Content: a.Content})
	return err
}
