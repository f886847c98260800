package server

import (
	"net/http"
	"net/url"

	"github.com/keel-run/keel/server/api"
)

// The web UI's skills pages: the skills a run in a workspace would be
// offered (verified; what was refused, for admins), the agent-written
// candidates with their evidence, a skill's files and instructions, and
// an admin's install form. Each calls the service operation its API
// route calls.

func (h *Handler) uiSkills(w http.ResponseWriter, r *http.Request, who *caller) error {
	ctx, ws := r.Context(), r.URL.Query().Get("workspace")
	list, err := h.svc.Skills(ctx, who, ws)
	if err != nil {
		return err
	}
	cands, err := h.svc.SkillCandidates(ctx, who)
	if err != nil {
		return err
	}
	p := h.newPage(ctx, who, "Skills", "skills")
	p.Skills, p.SkillWorkspace, p.Candidates = &list, ws, cands
	h.render(w, http.StatusOK, "skills", p)
	return nil
}

func (h *Handler) uiSkill(w http.ResponseWriter, r *http.Request, who *caller) error {
	ctx, ws, name := r.Context(), r.URL.Query().Get("workspace"), r.PathValue("name")
	d, err := h.svc.Skill(ctx, who, ws, name)
	if err != nil {
		return err
	}
	p := h.newPage(ctx, who, "Skill "+name, "skills")
	p.Skill, p.SkillWorkspace = &d, ws
	h.render(w, http.StatusOK, "skill", p)
	return nil
}

// uiInstallSkill is the skills page's install form (admins).
func (h *Handler) uiInstallSkill(w http.ResponseWriter, r *http.Request, who *caller) error {
	req := &api.InstallSkill{URL: r.PostFormValue("url"), Name: r.PostFormValue("name"), Workspace: r.PostFormValue("workspace"),
		AllowScripts: r.PostFormValue("allow_scripts") == "on"}
	if _, err := h.svc.InstallSkill(r.Context(), who, req); err != nil {
		return err
	}
	http.Redirect(w, r, "/ui/skills/"+url.PathEscape(req.Name)+"?workspace="+url.QueryEscape(req.Workspace), http.StatusSeeOther)
	return nil
}
