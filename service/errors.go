package service

import (
	"errors"
	"fmt"
	"strings"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
)

// Error is the failure of an operation that its caller can act on: a
// code (one of the api.Code constants) and a message safe to show them,
// naming no secret and no internal detail. Front ends map the code to
// their own form (an HTTP status, an exit status, a tool error).
type Error struct {
	Code    string
	Message string
	// cause, if set, is the refusal in a form a front end may word in
	// its own terms (SecretHostError).
	cause error
}

// Error returns the message alone: it is what a person reads, in every
// front end; programs branch on Code.
func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Message
}

// Unwrap returns the refusal a front end may word in its own terms, if
// any.
func (e *Error) Unwrap() error { return e.cause }

// CodeRunEnded is the code of a cancel that came too late: the run ended
// otherwise before the cancel reached it.
const CodeRunEnded = "run_ended"

func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) error {
	return errorf(api.CodeInvalidRequest, format, args...)
}

func notFound(format string, args ...any) error { return errorf(api.CodeNotFound, format, args...) }

func forbidden(format string, args ...any) error { return errorf(api.CodeForbidden, format, args...) }

func unavailable(format string, args ...any) error {
	return errorf(api.CodeUnavailable, format, args...)
}

func conflict(code, format string, args ...any) error { return errorf(code, format, args...) }

// NeedScope refuses token tok what needs scope, in the words of every
// front end that checks scopes (the API, the web UI, Keel's MCP tools
// at /mcp); nil when tok has scope (an admin token has every scope).
func NeedScope(tok *api.Token, scope string) error {
	if token.HasScope(tok, scope) {
		return nil
	}
	return forbidden("this needs the %s scope; token %s (%s) has %s", scope, tok.ID, tok.Name, strings.Join(tok.Scopes, ", "))
}

// plain is the text of err, a refusal by one of Keel's libraries, as a
// person reads it: from sentinel's text on when err wraps it (the
// operation's own wrapping names internals: "agent: resolve approval of
// run ..."), without the package names that start it ("policy: ").
func plain(err, sentinel error) string {
	s := err.Error()
	if sentinel != nil {
		if i := strings.Index(s, sentinel.Error()); i >= 0 {
			s = s[i:]
		}
	}
	for {
		i := strings.Index(s, ": ")
		if i < 0 || !libraries[s[:i]] {
			return s
		}
		s = s[i+2:]
	}
}

// libraries are the names Keel's libraries start their errors with.
var libraries = map[string]bool{"agent": true, "policy": true, "telemetry": true, "cost": true, "token": true, "identity": true,
	"schedule": true, "trigger": true, "journal": true, "memory": true, "server": true}

// Executing is the refusal of a resume (with or without a person's
// message) of run id while an execution holds it, in every front end.
// by names the process that executes it when that is another than the
// one asked ("another process (pid 4999 on vm)"): stopping that process
// (Ctrl-C there) cancels the run; a server cancels a run it executes.
// message says the resume brought a message, which is not journaled.
func Executing(id, by string, message bool) *Error {
	s := fmt.Sprintf("run %s is executing; wait for it to pause or end (runs list shows it), or cancel it (runs cancel)", id)
	if by != "" {
		s = fmt.Sprintf("run %s is being executed by %s; wait for it to pause or end (runs list shows it), or stop that process (Ctrl-C or SIGTERM there cancels the run)", id, by)
	}
	if message {
		s += "; your message was NOT delivered: give it again then"
	}
	return &Error{Code: api.CodeConflict, Message: s}
}

// Classify maps an error of the service to its *Error. Errors of the
// runtime and the journal that callers can act on keep their meaning;
// anything else becomes "internal" (internal is true), and the caller
// logs it.
func Classify(err error) (e *Error, internal bool) {
	var se *Error
	var ce *journal.CorruptError
	switch {
	case errors.As(err, &se):
		return se, false
	case errors.Is(err, journal.ErrNotFound):
		return &Error{Code: api.CodeNotFound, Message: "no such run"}, false
	case errors.As(err, &ce):
		return &Error{Code: api.CodeCorrupt, Message: ce.Error()}, false
	case errors.Is(err, agent.ErrChildEnded):
		var ce *agent.ChildEndedError
		if errors.As(err, &ce) {
			return &Error{Code: api.CodeConflict, Message: ce.Error()}, false
		}
		return &Error{Code: api.CodeConflict, Message: "the run is a child agent that has ended: its result belongs to its parent; resume or follow up the parent instead"}, false
	case errors.Is(err, agent.ErrRunCompleted):
		return &Error{Code: api.CodeRunCompleted, Message: "the run has completed"}, false
	case errors.Is(err, agent.ErrApprovalExpired):
		return &Error{Code: api.CodeNoApproval, Message: "too late: the approval's deadline has passed, so its default decision was applied"}, false
	case errors.Is(err, agent.ErrNoApproval):
		return &Error{Code: api.CodeNoApproval, Message: "this call has no pending approval (it was decided already, or never asked)"}, false
	case errors.Is(err, ErrElsewhere), errors.Is(err, agent.ErrRunBusy):
		// Never the journal's own text (sequence numbers, driver errors).
		return &Error{Code: api.CodeConflict, Message: "the run is being executed by another process sharing the journal (for example a keel run on the server's machine); stop it there, or try again when it stops"}, false
	case errors.Is(err, errCanceling):
		return &Error{Code: api.CodeConflict, Message: "the run is being canceled"}, false
	case errors.Is(err, ErrExecuting):
		return &Error{Code: api.CodeConflict, Message: "the run is executing: wait until it stops (or cancel it)"}, false
	case errors.Is(err, ErrShuttingDown):
		return &Error{Code: api.CodeUnavailable, Message: "the server is shutting down"}, false
	case errors.Is(err, token.ErrBad):
		return &Error{Code: api.CodeUnauthenticated, Message: "invalid or revoked API token"}, false
	case errors.Is(err, token.ErrNotFound):
		return &Error{Code: api.CodeNotFound, Message: err.Error()}, false
	}
	return &Error{Code: api.CodeInternal, Message: "internal error (see the server log)"}, true
}
