package trigger

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"

	"github.com/keel-run/keel/server/api"
)

// Answer is the answer to a delivery that has a run.
type Answer struct {
	RunID   string  `json:"run_id"`
	Outcome Outcome `json:"outcome"`
}

// Handler serves POST .../{id} for a mux pattern with an {id} wildcard
// ("POST /v1/triggers/{id}"): it needs no API token (the Standard
// Webhooks signature authenticates the sender) and answers 202 with the
// run of an accepted message, 200 for a duplicate, and the API's error
// shape otherwise: 401 for a bad signature or a timestamp out of
// tolerance, 400 for missing headers, 409 for a replayed id or a paused
// trigger, 413 for a body over [MaxBody], 404 for no such trigger, 503
// when the run cannot be created now (the sender retries). Refusals say
// only their reason; nothing about the trigger.
func (h *Hub) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
		if err != nil {
			writeError(w, http.StatusBadRequest, api.CodeInvalidRequest, "the body could not be read")
			return
		}
		d, err := h.Deliver(r.Context(), r.PathValue("id"), r.Header, body, r.RemoteAddr)
		var re *RefusedError
		switch {
		case err == nil && d.Outcome == Duplicate:
			writeJSON(w, http.StatusOK, &Answer{RunID: d.RunID, Outcome: d.Outcome})
		case err == nil:
			writeJSON(w, http.StatusAccepted, &Answer{RunID: d.RunID, Outcome: d.Outcome})
		case errors.As(err, &re):
			status, code := refusal(re.Reason)
			writeError(w, status, code, "delivery refused: "+re.Reason)
		case errors.Is(err, ErrNotFound):
			writeError(w, http.StatusNotFound, api.CodeNotFound, "no such trigger")
		case errors.Is(err, ErrUnavailable):
			w.Header().Set("Retry-After", "30")
			writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, "the run cannot be created now; retry later")
		default:
			h.logger.Error("trigger: delivery", slog.Any("err", err))
			writeError(w, http.StatusInternalServerError, api.CodeInternal, "internal error")
		}
	})
}

// refusal maps a refusal reason to its HTTP status and error code.
func refusal(reason string) (int, string) {
	switch reason {
	case ReasonSignature, ReasonTooOld, ReasonTooNew:
		return http.StatusUnauthorized, api.CodeUnauthenticated
	case ReasonReplayed, ReasonPaused:
		return http.StatusConflict, api.CodeConflict
	case ReasonTooLarge:
		return http.StatusRequestEntityTooLarge, api.CodeTooLarge
	}
	return http.StatusBadRequest, api.CodeInvalidRequest
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]*api.Error{"error": {Code: code, Message: msg, Status: status}})
}
