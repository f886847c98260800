package server

import (
	"net/http"

	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// Memory across runs (docs/memory.md): each handler decodes, calls its
// service operation and encodes. A token sees only the scopes its
// agents' runs see.

func (h *Handler) listMemory(w http.ResponseWriter, r *http.Request, who *caller) error {
	q := r.URL.Query()
	list, err := h.svc.Memory(r.Context(), who, &service.MemoryParams{Scopes: q["scope"], All: q.Get("all") == "true"})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.MemoryList{Entries: list})
	return nil
}

func (h *Handler) getMemory(w http.ResponseWriter, r *http.Request, who *caller) error {
	hist, err := h.svc.MemoryEntry(r.Context(), who, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, hist)
	return nil
}

func (h *Handler) editMemory(w http.ResponseWriter, r *http.Request, who *caller) error {
	var req api.EditMemory
	if err := decode(r, &req, false); err != nil {
		return err
	}
	e, err := h.svc.EditMemory(r.Context(), who, r.PathValue("id"), req.Text)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, e)
	return nil
}

func (h *Handler) forgetMemory(w http.ResponseWriter, r *http.Request, who *caller) error {
	var req api.ForgetMemory
	if err := decode(r, &req, true); err != nil {
		return err
	}
	if err := h.svc.ForgetMemory(r.Context(), who, r.PathValue("id"), req.Reason); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
