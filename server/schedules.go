package server

import (
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
	"github.com/keel-run/keel/trigger"
)

// Schedules, triggers and notifications (docs/schedules.md): each
// handler decodes, calls its service operation and encodes.

func (h *Handler) listSchedules(w http.ResponseWriter, r *http.Request, who *caller) error {
	list, err := h.svc.Schedules(r.Context(), who)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.ScheduleList{Schedules: list})
	return nil
}

func (h *Handler) createSchedule(w http.ResponseWriter, r *http.Request, who *caller) error {
	var req api.CreateSchedule
	if err := decode(r, &req, false); err != nil {
		return err
	}
	s, err := h.svc.CreateSchedule(r.Context(), who, &req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, s)
	return nil
}

func (h *Handler) getSchedule(w http.ResponseWriter, r *http.Request, who *caller) error {
	s, err := h.svc.Schedule(r.Context(), who, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s)
	return nil
}

func (h *Handler) listFires(w http.ResponseWriter, r *http.Request, who *caller) error {
	last, err := lastParam(r)
	if err != nil {
		return err
	}
	fires, err := h.svc.Fires(r.Context(), who, r.PathValue("id"), &service.FiresParams{Outcome: r.URL.Query().Get("outcome"), Last: last})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.FireList{Fires: fires})
	return nil
}

func (h *Handler) pauseSchedule(w http.ResponseWriter, r *http.Request, who *caller) error {
	var req api.PauseSchedule
	if err := decode(r, &req, true); err != nil {
		return err
	}
	s, err := h.svc.PauseSchedule(r.Context(), who, r.PathValue("id"), req.Reason)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s)
	return nil
}

func (h *Handler) resumeSchedule(w http.ResponseWriter, r *http.Request, who *caller) error {
	s, err := h.svc.ResumeSchedule(r.Context(), who, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s)
	return nil
}

func (h *Handler) triggerSchedule(w http.ResponseWriter, r *http.Request, who *caller) error {
	var req api.TriggerSchedule
	if err := decode(r, &req, true); err != nil {
		return err
	}
	f, err := h.svc.TriggerSchedule(r.Context(), who, r.PathValue("id"), &req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, f)
	return nil
}

func (h *Handler) backfillSchedule(w http.ResponseWriter, r *http.Request, who *caller) error {
	var req api.Backfill
	if err := decode(r, &req, false); err != nil {
		return err
	}
	fires, err := h.svc.BackfillSchedule(r.Context(), who, r.PathValue("id"), &req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.FireList{Fires: fires})
	return nil
}

func (h *Handler) deleteSchedule(w http.ResponseWriter, r *http.Request, who *caller) error {
	if err := h.svc.DeleteSchedule(r.Context(), who, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) listTriggers(w http.ResponseWriter, r *http.Request, who *caller) error {
	list, err := h.svc.Triggers(r.Context(), who)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.TriggerList{Triggers: list})
	return nil
}

func (h *Handler) createTrigger(w http.ResponseWriter, r *http.Request, who *caller) error {
	var req api.CreateTrigger
	if err := decode(r, &req, false); err != nil {
		return err
	}
	t, err := h.svc.CreateTrigger(r.Context(), who, &req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, t)
	return nil
}

func (h *Handler) getTrigger(w http.ResponseWriter, r *http.Request, who *caller) error {
	t, err := h.svc.Trigger(r.Context(), who, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}

func (h *Handler) listDeliveries(w http.ResponseWriter, r *http.Request, who *caller) error {
	last, err := lastParam(r)
	if err != nil {
		return err
	}
	list, err := h.svc.Deliveries(r.Context(), who, r.PathValue("id"), last)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.DeliveryList{Deliveries: list})
	return nil
}

func (h *Handler) pauseTrigger(w http.ResponseWriter, r *http.Request, who *caller) error {
	var req api.PauseSchedule
	if err := decode(r, &req, true); err != nil {
		return err
	}
	t, err := h.svc.PauseTrigger(r.Context(), who, r.PathValue("id"), req.Reason)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}

func (h *Handler) resumeTrigger(w http.ResponseWriter, r *http.Request, who *caller) error {
	t, err := h.svc.ResumeTrigger(r.Context(), who, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}

func (h *Handler) deleteTrigger(w http.ResponseWriter, r *http.Request, who *caller) error {
	if err := h.svc.DeleteTrigger(r.Context(), who, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// deliver is POST /v1/triggers/{id}: no API token, the Standard Webhooks
// signature authenticates the sender. Refusals say only their reason.
func (h *Handler) deliver(w http.ResponseWriter, r *http.Request, _ *caller) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, trigger.MaxBody+1))
	if err != nil {
		return badRequest("the body could not be read")
	}
	ans, dup, err := h.svc.Deliver(r.Context(), r.PathValue("id"), r.Header, body, r.RemoteAddr)
	if err != nil {
		var se *service.Error
		if errors.As(err, &se) && se.Code == api.CodeUnavailable {
			w.Header().Set("Retry-After", "30")
		}
		return err
	}
	status := http.StatusAccepted
	if dup {
		status = http.StatusOK
	}
	writeJSON(w, status, ans)
	return nil
}

func (h *Handler) listSinks(w http.ResponseWriter, r *http.Request, who *caller) error {
	writeJSON(w, http.StatusOK, api.SinkList{Sinks: h.svc.Sinks(r.Context(), who)})
	return nil
}

func (h *Handler) listNotifications(w http.ResponseWriter, r *http.Request, who *caller) error {
	last, err := lastParam(r)
	if err != nil {
		return err
	}
	list, err := h.svc.Notifications(r.Context(), who, r.URL.Query().Get("run"), last)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.NotificationList{Notifications: list})
	return nil
}

// lastParam reads the query parameter last (0 when absent).
func lastParam(r *http.Request) (int, error) {
	s := r.URL.Query().Get("last")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, badRequest("last %q: want a number >= 0", s)
	}
	return n, nil
}
