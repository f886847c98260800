package server

import (
	"net/http"

	"github.com/keel-run/keel/server/api"
)

func (h *Handler) rewindRun(w http.ResponseWriter, r *http.Request, who *caller) error {
	var req api.RewindRun
	if err := decode(r, &req, false); err != nil {
		return err
	}
	out, err := h.svc.Rewind(r.Context(), who, r.PathValue("id"), &req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
