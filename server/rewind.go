package server

import (
	"net/http"

	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

func (h *Handler) rewindRun(w http.ResponseWriter, r *http.Request, who *caller) error {
	// to is read apart to tell absent from 0 (service.CheckSeqGiven).
	var body struct {
		api.RewindRun
		To *int64 `json:"to"`
	}
	if err := decode(r, &body, false); err != nil {
		return err
	}
	if err := service.CheckSeqGiven("to", body.To); err != nil {
		return err
	}
	req := body.RewindRun
	req.To = *body.To
	out, err := h.svc.Rewind(r.Context(), who, r.PathValue("id"), &req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
