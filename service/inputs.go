package service

import (
	"context"
	"errors"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// InputView converts a pending input request to its API form.
func InputView(p agent.PendingInput) api.Input {
	return api.Input{RunID: p.RunID, ID: p.ID, CallID: p.CallID, Tool: p.Tool, Server: p.Server, Mode: p.Mode, Message: p.Message,
		Schema: p.Schema, URL: p.URL, Seq: p.Seq, Requested: p.Time, Task: p.Task}
}

// inputs returns the input requests every run that has not ended waits
// for, oldest first.
func (s *Service) inputs(ctx context.Context) ([]api.Input, error) {
	list, err := s.rt.InputWaits(ctx)
	if err != nil {
		return nil, err
	}
	out := []api.Input{}
	for _, p := range list {
		out = append(out, InputView(p))
	}
	return out, nil
}

// answer journals a person's answer to an input request (input.answered
// names them). The execution waiting for it delivers it; a run that no
// process executes (its server stopped while it waited) is submitted, and
// its call runs again and gets the answer.
func (s *Service) answer(ctx context.Context, runID, id string, req *api.AnswerInput, who *Caller) (api.Run, error) {
	if _, err := s.run(ctx, runID, 0); err != nil {
		return api.Run{}, err
	}
	a := &agent.InputAnswered{Action: req.Action, Content: req.Content, By: who.Name}
	err := s.rt.AnswerInput(ctx, runID, id, a)
	switch {
	case errors.Is(err, agent.ErrNoInput):
		return api.Run{}, conflict(api.CodeNoInput, "run %s does not wait for input %s (it was answered already, or never asked)", runID, id)
	case errors.Is(err, agent.ErrBadAnswer):
		return api.Run{}, badRequest("%s", plain(err, agent.ErrBadAnswer))
	case err != nil:
		return api.Run{}, err
	}
	rerr := s.record(ctx, who, action{Action: "input." + req.Action, RunID: runID, Target: id})
	run, err := s.run(ctx, runID, 0)
	if err != nil {
		return run, err
	}
	if !run.Executing && !journal.Status(run.Status).Terminal() {
		switch err := s.pool.submit(runID); {
		case errors.Is(err, errCanceling):
		case err != nil:
			return run, err
		default:
			run.Queued = true
		}
	}
	return run, rerr
}

// Inputs returns the input requests (MCP elicitations) every run that
// has not ended waits for, oldest first.
func (s *Service) Inputs(ctx context.Context, who *Caller) ([]api.Input, error) { return s.inputs(ctx) }

// Answer journals who's answer to input request id of run runID
// (input.answered names them); see [Service.answer].
func (s *Service) Answer(ctx context.Context, who *Caller, runID, id string, req *api.AnswerInput) (api.Run, error) {
	return s.answer(ctx, runID, id, req, who)
}
