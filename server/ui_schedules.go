package server

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// The web UI's schedule pages: the list (with the triggers and a form
// for a new schedule) and a schedule with its fire records. Each form
// calls the service operation its API route calls.

func (h *Handler) uiSchedules(w http.ResponseWriter, r *http.Request, who *caller) error {
	p := h.newPage(r.Context(), who, "Schedules", "schedules")
	var err error
	if p.Schedules, err = h.svc.Schedules(r.Context(), who); err != nil {
		return err
	}
	if p.Triggers, err = h.svc.Triggers(r.Context(), who); err != nil {
		return err
	}
	p.Sinks = h.svc.Sinks(r.Context(), who)
	if p.CanWrite {
		p.Choices = h.svc.NewRunChoices(r.Context(), who)
	}
	h.render(w, http.StatusOK, "schedules", p)
	return nil
}

func (h *Handler) uiCreateSchedule(w http.ResponseWriter, r *http.Request, who *caller) error {
	f := r.PostFormValue
	req := &api.CreateSchedule{Name: strings.TrimSpace(f("name")), TimeZone: f("time_zone"), Overlap: f("overlap"), CatchupWindow: f("catchup_window"),
		Run: api.CreateRun{Task: f("task"), Model: f("model"), Workspace: f("workspace"), Agent: f("agent")}}
	switch when := strings.TrimSpace(f("when")); {
	case strings.HasPrefix(when, "every "):
		req.Every = strings.TrimSpace(strings.TrimPrefix(when, "every "))
	default:
		req.Cron = when
	}
	for _, s := range r.PostForm["notify"] {
		if s != "" {
			req.Notify = append(req.Notify, s)
		}
	}
	if s := f("max_steps"); s != "" {
		// Not a number is the form's to say (as the New-run form says
		// it); a negative one the service's, in every front end's words.
		n, err := strconv.Atoi(s)
		if err != nil {
			return badRequest("max steps %q: want a number (0: no limit)", s)
		}
		req.Run.Limits.MaxSteps = &n
	}
	s, err := h.svc.CreateSchedule(r.Context(), who, req)
	if err != nil {
		return err
	}
	http.Redirect(w, r, "/ui/schedules/"+url.PathEscape(s.Name), http.StatusSeeOther)
	return nil
}

func (h *Handler) uiSchedule(w http.ResponseWriter, r *http.Request, who *caller) error {
	s, err := h.svc.Schedule(r.Context(), who, r.PathValue("id"))
	if err != nil {
		return err
	}
	fires, err := h.svc.Fires(r.Context(), who, s.ID, &service.FiresParams{Last: 200})
	if err != nil {
		return err
	}
	p := h.newPage(r.Context(), who, "Schedule "+s.Name, "schedules")
	p.Schedule, p.Fires = &s, fires
	h.render(w, http.StatusOK, "schedule", p)
	return nil
}

// uiScheduleAction is the schedule page's buttons: pause, resume,
// trigger now and delete.
func (h *Handler) uiScheduleAction(w http.ResponseWriter, r *http.Request, who *caller) error {
	ctx, id := r.Context(), r.PathValue("id")
	var err error
	switch r.PathValue("action") {
	case "pause":
		_, err = h.svc.PauseSchedule(ctx, who, id, r.PostFormValue("reason"))
	case "resume":
		_, err = h.svc.ResumeSchedule(ctx, who, id)
	case "trigger":
		_, err = h.svc.TriggerSchedule(ctx, who, id, nil)
	case "delete":
		if err = h.svc.DeleteSchedule(ctx, who, id); err == nil {
			http.Redirect(w, r, "/ui/schedules", http.StatusSeeOther)
			return nil
		}
	default:
		return notFound("no schedule action %q", r.PathValue("action"))
	}
	if err != nil {
		return err
	}
	http.Redirect(w, r, "/ui/schedules/"+url.PathEscape(id), http.StatusSeeOther)
	return nil
}
