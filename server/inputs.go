package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/visible"
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

// uiInput is an input request as the run page shows it: its form's
// fields from the schema.
type uiInput struct {
	api.Input
	Fields []uiField
}

type uiField struct {
	Name, Title, Type, Description, Default string
	Required                                bool
}

// inputSchema is the part of a form's schema the page uses.
type inputSchema struct {
	Properties map[string]struct {
		Type        string `json:"type"`
		Title       string `json:"title"`
		Description string `json:"description"`
		Default     any    `json:"default"`
	} `json:"properties"`
	Required []string `json:"required"`
}

func newUIInput(in api.Input) uiInput {
	out := uiInput{Input: in}
	var s inputSchema
	if json.Unmarshal(in.Schema, &s) != nil {
		return out
	}
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := s.Properties[n]
		f := uiField{Name: n, Title: cmp.Or(p.Title, n), Type: p.Type, Description: p.Description, Required: slices.Contains(s.Required, n)}
		if p.Default != nil {
			b, _ := json.Marshal(p.Default)
			f.Default = string(b)
		}
		out.Fields = append(out.Fields, f)
	}
	return out
}

// uiAnswer answers an input request from the run page's form: each
// non-empty field typed by the schema (booleans, numbers, and arrays or
// objects as JSON).
func (h *Handler) uiAnswer(w http.ResponseWriter, r *http.Request, who *caller) error {
	id, input := r.PathValue("id"), r.PathValue("input")
	if f := r.PostFormValue("input"); f != input {
		return badRequest("the form is for input %q but was posted for %q; reload the page", visible.String(f), visible.String(input))
	}
	req := &api.AnswerInput{Action: r.PostFormValue("action")}
	if req.Action == "accept" {
		st, _, err := h.rt.Load(r.Context(), id)
		if err != nil {
			return err
		}
		var schema inputSchema
		for _, in := range st.PendingInputs() {
			if in.ID == input {
				_ = json.Unmarshal(in.Schema, &schema)
			}
		}
		content := map[string]any{}
		for name, p := range schema.Properties {
			v := strings.TrimSpace(r.PostFormValue("field." + name))
			if v == "" {
				continue
			}
			switch p.Type {
			case "boolean", "number", "integer", "array", "object":
				var x any
				if err := json.Unmarshal([]byte(v), &x); err != nil {
					return badRequest("field %s: want a %s (JSON)", visible.String(name), p.Type)
				}
				content[name] = x
			default:
				content[name] = v
			}
		}
		b, _ := json.Marshal(content)
		req.Content = b
	}
	if _, err := h.answer(r.Context(), id, input, req, who); err != nil {
		return err
	}
	http.Redirect(w, r, "/ui/runs/"+url.PathEscape(id), http.StatusSeeOther)
	return nil
}
