package server

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

func (h *Handler) whoami(w http.ResponseWriter, _ *http.Request, who *caller) error {
	writeJSON(w, http.StatusOK, api.Whoami{Token: who.Token})
	return nil
}

func (h *Handler) listRuns(w http.ResponseWriter, r *http.Request, who *caller) error {
	q := r.URL.Query()
	var status []journal.Status
	for _, s := range q["status"] {
		for _, v := range strings.Split(s, ",") {
			status = append(status, journal.Status(strings.TrimSpace(v))) // checked by the service
		}
	}
	limit := 0
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return badRequest("limit %q: want a number >= 0", s)
		}
		limit = n
	}
	runs, err := h.svc.Runs(r.Context(), who, &service.ListRuns{Status: status, Limit: limit})
	if err != nil {
		return err
	}
	// The body is api.RunList, each run's JSON from the summaries'
	// cache: encoding the same runs' tasks again for every poll of a
	// dashboard was most of a server's CPU.
	body := []byte(`{"runs":[`)
	for i := range runs {
		if i > 0 {
			body = append(body, ',')
		}
		b, err := h.svc.EncodeRun(&runs[i])
		if err != nil {
			return err
		}
		body = append(body, b...)
	}
	body = append(body, "]}\n"...)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
	return nil
}

func (h *Handler) getRun(w http.ResponseWriter, r *http.Request, who *caller) error {
	run, err := h.svc.Run(r.Context(), who, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, run)
	return nil
}

// runTree is GET /v1/runs/{id}/tree: the run and its child runs.
func (h *Handler) runTree(w http.ResponseWriter, r *http.Request, who *caller) error {
	t, err := h.svc.Tree(r.Context(), who, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}

func (h *Handler) createRun(w http.ResponseWriter, r *http.Request, who *caller) error {
	var req api.CreateRun
	if err := decode(r, &req, false); err != nil {
		return err
	}
	run, err := h.svc.Create(r.Context(), who, &service.CreateRun{CreateRun: req})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, run)
	return nil
}

func (h *Handler) cancelRun(w http.ResponseWriter, r *http.Request, who *caller) error {
	run, err := h.svc.Cancel(r.Context(), who, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, run)
	return nil
}

func (h *Handler) resumeRun(w http.ResponseWriter, r *http.Request, who *caller) error {
	ctx := r.Context()
	id := r.PathValue("id")
	var req api.ResumeRun
	if err := decode(r, &req, true); err != nil {
		return err
	}
	run, err := h.svc.Resume(ctx, who, id, &req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, run)
	return nil
}

func (h *Handler) forkRun(w http.ResponseWriter, r *http.Request, who *caller) error {
	ctx := r.Context()
	// seq is read apart to tell absent from 0 (service.CheckSeqGiven).
	var body struct {
		api.ForkRun
		Seq *int64 `json:"seq"`
	}
	if err := decode(r, &body, true); err != nil {
		return err
	}
	if err := service.CheckSeqGiven("seq", body.Seq); err != nil {
		return err
	}
	req := body.ForkRun
	req.Seq = *body.Seq
	run, err := h.svc.Fork(ctx, who, r.PathValue("id"), &req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, run)
	return nil
}

func (h *Handler) artifact(w http.ResponseWriter, r *http.Request, who *caller) error {
	id, rel := r.PathValue("id"), r.PathValue("path")
	b, err := h.svc.Artifact(r.Context(), who, id, rel)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "sandbox")
	_, _ = w.Write(b)
	return nil
}
