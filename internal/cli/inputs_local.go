package cli

import (
	"context"

	"github.com/keel-run/keel/agent"
)

func (l *local) Inputs(ctx context.Context, runID string) ([]agent.PendingInput, error) {
	rt := agent.NewRuntime(l.store, nil)
	if runID == "" {
		return rt.InputWaits(ctx)
	}
	st, _, err := rt.Load(ctx, runID)
	if err != nil {
		return nil, err
	}
	return st.PendingInputs(), nil
}

func (l *local) AnswerInput(ctx context.Context, runID, id string, a *agent.InputAnswered) error {
	return agent.NewRuntime(l.store, nil).AnswerInput(ctx, runID, id, a)
}
