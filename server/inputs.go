package server

import (
	"cmp"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/visible"
)

func (h *Handler) listInputs(w http.ResponseWriter, r *http.Request, who *caller) error {
	list, err := h.svc.Inputs(r.Context(), who)
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
	run, err := h.svc.Answer(r.Context(), who, r.PathValue("id"), r.PathValue("input"), &req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, run)
	return nil
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
	if _, err := h.svc.Answer(r.Context(), who, id, input, req); err != nil {
		return err
	}
	http.Redirect(w, r, "/ui/runs/"+url.PathEscape(id), http.StatusSeeOther)
	return nil
}
