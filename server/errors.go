package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
)

// apiError is an error with its API code, HTTP status and user-safe
// message.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.code + ": " + e.msg }

func badRequest(format string, args ...any) error {
	return &apiError{http.StatusBadRequest, api.CodeInvalidRequest, fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) error {
	return &apiError{http.StatusNotFound, api.CodeNotFound, fmt.Sprintf(format, args...)}
}

func conflict(code, format string, args ...any) error {
	return &apiError{http.StatusConflict, code, fmt.Sprintf(format, args...)}
}

// classify maps an error to its API form. Errors of the runtime and the
// journal that callers can act on keep their message; anything else
// becomes "internal" and the caller logs it.
func classify(err error) (e *apiError, internal bool) {
	var ae *apiError
	var ce *journal.CorruptError
	switch {
	case errors.As(err, &ae):
		return ae, false
	case errors.Is(err, journal.ErrNotFound):
		return &apiError{http.StatusNotFound, api.CodeNotFound, "no such run"}, false
	case errors.As(err, &ce):
		return &apiError{http.StatusInternalServerError, api.CodeCorrupt, ce.Error()}, false
	case errors.Is(err, agent.ErrRunCompleted):
		return &apiError{http.StatusConflict, api.CodeRunCompleted, "the run has completed"}, false
	case errors.Is(err, agent.ErrApprovalExpired):
		return &apiError{http.StatusConflict, api.CodeNoApproval, "too late: the approval's deadline has passed, so its default decision was applied"}, false
	case errors.Is(err, agent.ErrNoApproval):
		return &apiError{http.StatusConflict, api.CodeNoApproval, "this call has no pending approval (it was decided already, or never asked)"}, false
	case errors.Is(err, ErrElsewhere), errors.Is(err, agent.ErrRunBusy):
		// Never the journal's own text (sequence numbers, driver errors).
		return &apiError{http.StatusConflict, api.CodeConflict, "the run is being executed by another process sharing the journal (for example a keel run on the server's machine); stop it there, or try again when it stops"}, false
	case errors.Is(err, errCanceling):
		return &apiError{http.StatusConflict, api.CodeConflict, "the run is being canceled"}, false
	case errors.Is(err, ErrExecuting):
		return &apiError{http.StatusConflict, api.CodeConflict, "the run is executing: wait until it stops (or cancel it)"}, false
	case errors.Is(err, ErrShuttingDown):
		return &apiError{http.StatusServiceUnavailable, api.CodeUnavailable, "the server is shutting down"}, false
	case errors.Is(err, token.ErrBad):
		return &apiError{http.StatusUnauthorized, api.CodeUnauthenticated, "invalid or revoked API token"}, false
	case errors.Is(err, token.ErrNotFound):
		return &apiError{http.StatusNotFound, api.CodeNotFound, err.Error()}, false
	}
	return &apiError{http.StatusInternalServerError, api.CodeInternal, "internal error (see the server log)"}, true
}

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	// Compact: indenting took a third of a loaded server's CPU (run
	// lists polled by dashboards); pipe through jq to read it.
	_ = json.NewEncoder(w).Encode(v)
}

// writeError writes e as the API's error body.
func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, api.ErrorBody{Error: api.Error{Code: e.code, Message: e.msg, Status: e.status}})
}

// maxBody bounds request bodies (1 MiB).
const maxBody = 1 << 20

// decode reads a JSON request body into v. An empty body leaves v as it
// is when optional; unknown fields, trailing data and bodies over maxBody
// are errors.
func decode(r *http.Request, v any, optional bool) error {
	body := http.MaxBytesReader(nil, r.Body, maxBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) && optional {
			return nil
		}
		if errors.Is(err, io.EOF) {
			return badRequest("the request needs a JSON body")
		}
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &apiError{http.StatusRequestEntityTooLarge, api.CodeTooLarge, fmt.Sprintf("request body over %d bytes", maxBody)}
		}
		return badRequest("request body: %v", err)
	}
	if dec.More() {
		return badRequest("request body: trailing data after the JSON value")
	}
	return nil
}
