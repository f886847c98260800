package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// inputView converts a pending input request to its API form.
func inputView(p agent.PendingInput) api.Input {
	return api.Input{RunID: p.RunID, ID: p.ID, CallID: p.CallID, Tool: p.Tool, Server: p.Server, Mode: p.Mode, Message: p.Message,
		Schema: p.Schema, URL: p.URL, Seq: p.Seq, Requested: p.Time, Task: p.Task}
}

// inputs returns the input requests every run that has not ended waits
// for, oldest first.
func (h *Handler) inputs(ctx context.Context) ([]api.Input, error) {
	list, err := h.rt.InputWaits(ctx)
	if err != nil {
		return nil, err
	}
	out := []api.Input{}
	for _, p := range list {
		out = append(out, inputView(p))
	}
	return out, nil
}

func (h *Handler) listInputs(w http.ResponseWriter, r *http.Request, _ *caller) error {
	list, err := h.inputs(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.InputList{Inputs: list})
	return nil
}

func (h *Handler) answerInput(w http.ResponseWriter, r *http.Request, who *caller) error {
	var req api.AnswerInput
	if err := decode(r, &req, false); err != nil {
		return err
	}
	run, err := h.answer(r.Context(), r.PathValue("id"), r.PathValue("input"), &req, who)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, run)
	return nil
}

// answer journals a person's answer to an input request (input.answered
// names them). The execution waiting for it delivers it; a run that no
// process executes (its server stopped while it waited) is submitted, and
// its call runs again and gets the answer.
func (h *Handler) answer(ctx context.Context, runID, id string, req *api.AnswerInput, who *caller) (api.Run, error) {
	if _, err := h.run(ctx, runID, 0); err != nil {
		return api.Run{}, err
	}
	a := &agent.InputAnswered{Action: req.Action, Content: req.Content, By: who.Name}
	err := h.rt.AnswerInput(ctx, runID, id, a)
	switch {
	case errors.Is(err, agent.ErrNoInput):
		return api.Run{}, conflict(api.CodeNoApproval, "run %s does not wait for input %s (see GET /v1/inputs)", runID, id)
	case errors.Is(err, agent.ErrBadAnswer):
		return api.Run{}, badRequest("%v", err)
	case err != nil:
		return api.Run{}, err
	}
	rerr := h.record(ctx, who, action{Action: "input." + req.Action, RunID: runID, Target: id})
	run, err := h.run(ctx, runID, 0)
	if err != nil {
		return run, err
	}
	if !run.Executing && !journal.Status(run.Status).Terminal() {
		switch err := h.pool.submit(runID); {
		case errors.Is(err, errCanceling):
		case err != nil:
			return run, err
		default:
			run.Queued = true
		}
	}
	return run, rerr
}
