package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
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

// statusOf is the HTTP status of each error code.
var statusOf = map[string]int{
	api.CodeInvalidRequest:  http.StatusBadRequest,
	api.CodeUnauthenticated: http.StatusUnauthorized,
	api.CodeForbidden:       http.StatusForbidden,
	api.CodeNotFound:        http.StatusNotFound,
	api.CodeConflict:        http.StatusConflict,
	api.CodeRunCompleted:    http.StatusConflict,
	api.CodeNoApproval:      http.StatusConflict,
	api.CodeNoInput:         http.StatusConflict,
	service.CodeRunEnded:    http.StatusConflict,
	api.CodeTooLarge:        http.StatusRequestEntityTooLarge,
	api.CodeCorrupt:         http.StatusInternalServerError,
	api.CodeUnavailable:     http.StatusServiceUnavailable,
	api.CodeInternal:        http.StatusInternalServerError,
}

// classify maps an error to its API form: the handler's own (a request
// that does not decode, authentication), else the service's
// (service.Classify), whose code gives the status. internal errors are
// logged by the caller.
func classify(err error) (e *apiError, internal bool) {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae, false
	}
	se, internal := service.Classify(err)
	status, ok := statusOf[se.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	return &apiError{status, se.Code, se.Message}, internal
}

// asCaller is the caller of an authenticated token.
func asCaller(t *api.Token, err error) (*caller, error) {
	if err != nil {
		return nil, err
	}
	return service.As(t), nil
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
