package server

import (
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/keel-run/keel/service"
)

// Evaluations (docs/eval.md): the results keel eval run kept on the
// server's machine, with their reports; admins only. Each handler calls
// its service operation.

func (h *Handler) listEvals(w http.ResponseWriter, r *http.Request, who *caller) error {
	list, err := h.svc.Evals(r.Context(), who)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (h *Handler) getEval(w http.ResponseWriter, r *http.Request, who *caller) error {
	k, err := evalK(r)
	if err != nil {
		return err
	}
	rep, err := h.svc.Eval(r.Context(), who, r.PathValue("id"), k)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

// evalK is the k query parameter of pass@k and pass^k (0: the trials).
func evalK(r *http.Request) (int, error) {
	s := r.URL.Query().Get("k")
	if s == "" {
		return 0, nil
	}
	k, err := strconv.Atoi(s)
	if err != nil {
		return 0, badRequest("k %q: want a number >= 0 (0: the trials)", s)
	}
	return k, service.CheckEvalK(k)
}

// The web UI's evaluations pages: the list, one evaluation's report
// (the numbers of GET /v1/evals/{id}) and its static HTML report with
// plots.

func (h *Handler) uiEvals(w http.ResponseWriter, r *http.Request, who *caller) error {
	list, err := h.svc.Evals(r.Context(), who)
	if err != nil {
		return err
	}
	p := h.newPage(r.Context(), who, "Evaluations", "evals")
	p.Evals = &list
	h.render(w, http.StatusOK, "evals", p)
	return nil
}

func (h *Handler) uiEval(w http.ResponseWriter, r *http.Request, who *caller) error {
	k, err := evalK(r)
	if err != nil {
		return err
	}
	rep, err := h.svc.Eval(r.Context(), who, r.PathValue("id"), k)
	if err != nil {
		return err
	}
	p := h.newPage(r.Context(), who, "Evaluation "+rep.Eval.ID, "evals")
	p.EvalReport = &rep
	h.render(w, http.StatusOK, "eval", p)
	return nil
}

// uiEvalHTML serves the evaluation's static report page (inline SVG
// plots and styles, no script).
func (h *Handler) uiEvalHTML(w http.ResponseWriter, r *http.Request, who *caller) error {
	k, err := evalK(r)
	if err != nil {
		return err
	}
	b, err := h.svc.EvalHTML(r.Context(), who, r.PathValue("id"), k)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'")
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(b)
	return err
}

// evalPct shows a fraction as a whole percentage ("-" for NaN).
func evalPct(f float64) string {
	if math.IsNaN(f) {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*f)
}
