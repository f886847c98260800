package server

import (
	"net/http"

	"github.com/keel-run/keel/server/api"
)

// Skills (docs/skills.md): each handler decodes, calls its service
// operation and encodes. A token sees the skills runs of its agents
// would be offered, in workspaces under the roots; only an admin
// installs.

func (h *Handler) listSkills(w http.ResponseWriter, r *http.Request, who *caller) error {
	list, err := h.svc.Skills(r.Context(), who, r.URL.Query().Get("workspace"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (h *Handler) getSkill(w http.ResponseWriter, r *http.Request, who *caller) error {
	d, err := h.svc.Skill(r.Context(), who, r.URL.Query().Get("workspace"), r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

func (h *Handler) installSkill(w http.ResponseWriter, r *http.Request, who *caller) error {
	var req api.InstallSkill
	if err := decode(r, &req, false); err != nil {
		return err
	}
	sk, err := h.svc.InstallSkill(r.Context(), who, &req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, sk)
	return nil
}

func (h *Handler) listSkillCandidates(w http.ResponseWriter, r *http.Request, who *caller) error {
	list, err := h.svc.SkillCandidates(r.Context(), who)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.SkillCandidateList{Candidates: list})
	return nil
}
