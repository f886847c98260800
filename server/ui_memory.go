package server

import (
	"net/http"
	"net/url"

	"github.com/keel-run/keel/service"
)

// The web UI's memory pages: the entries the token sees (with their
// labels, provenance and use) and an entry's versions, with the forms
// that edit and forget it. Each form calls the service operation its API
// route calls.

func (h *Handler) uiMemory(w http.ResponseWriter, r *http.Request, who *caller) error {
	q := r.URL.Query()
	list, err := h.svc.Memory(r.Context(), who, &service.MemoryParams{Scopes: q["scope"], All: q.Get("all") == "true"})
	if err != nil {
		return err
	}
	p := h.newPage(r.Context(), who, "Memory", "memory")
	p.Memory, p.MemoryAll = list, q.Get("all") == "true"
	h.render(w, http.StatusOK, "memory", p)
	return nil
}

func (h *Handler) uiMemoryEntry(w http.ResponseWriter, r *http.Request, who *caller) error {
	id := r.PathValue("id")
	hist, err := h.svc.MemoryEntry(r.Context(), who, id)
	if err != nil {
		return err
	}
	p := h.newPage(r.Context(), who, "Memory "+id, "memory")
	p.Memory, p.MemoryID = hist.Versions, id
	h.render(w, http.StatusOK, "memory-entry", p)
	return nil
}

// uiMemoryAction is the entry page's forms: edit (a new version) and
// forget.
func (h *Handler) uiMemoryAction(w http.ResponseWriter, r *http.Request, who *caller) error {
	ctx, id := r.Context(), r.PathValue("id")
	switch r.PathValue("action") {
	case "edit":
		e, err := h.svc.EditMemory(ctx, who, id, r.PostFormValue("text"))
		if err != nil {
			return err
		}
		http.Redirect(w, r, "/ui/memory/"+url.PathEscape(e.ID), http.StatusSeeOther)
	case "forget":
		if err := h.svc.ForgetMemory(ctx, who, id, r.PostFormValue("reason")); err != nil {
			return err
		}
		http.Redirect(w, r, "/ui/memory/"+url.PathEscape(id), http.StatusSeeOther)
	default:
		return notFound("no memory action %q", r.PathValue("action"))
	}
	return nil
}
