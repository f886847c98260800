package tool

import (
	"errors"
	"fmt"
	"strings"
)

// Reasons of an [AuthRequiredError].
const (
	AuthMissing = "missing" // no grant for (agent, user, provider)
	AuthScope   = "scope"   // the grant lacks a requested scope
	AuthRevoked = "revoked" // the grant was revoked
	AuthExpired = "expired" // the token expired and cannot be refreshed
)

// AuthRequiredError means a person must authorize before a call can have
// its credential: no grant yet, a missing scope, a revoked or
// unrefreshable grant. The credential vault returns it, and a [Tool]'s
// Authorize passes it on; the runtime then journals an auth.required wait
// for the call (it does not run, and the run pauses as for an approval)
// and runs it once the wait is resolved, which it is when the person
// connects (keel auth connect). It is never a failed call. Its fields name
// no secret; it is journaled as it is (the payload of auth.required).
type AuthRequiredError struct {
	// Provider and Issuer name the authorization server.
	Provider, Issuer string
	// Agent and User: whose grant is needed (User "" for an employee
	// agent's own).
	Agent, User string
	// Scopes to ask for; Missing those the current grant lacks (for
	// [AuthScope]).
	Scopes, Missing []string
	// Reason is one of the Auth* constants; Grant the grant it is about,
	// if any.
	Reason, Grant string
	// Resource is the URL the call wanted to reach (without its query).
	Resource string
	// Hint is the command that ends the wait.
	Hint string
}

// Error implements error.
func (e *AuthRequiredError) Error() string {
	who := e.Agent
	if e.User != "" {
		who += " for " + e.User
	}
	msg := fmt.Sprintf("authorization required: %s needs a grant of provider %s", who, e.Provider)
	switch e.Reason {
	case AuthScope:
		msg += fmt.Sprintf(" with scopes %s (grant %s lacks %s)", strings.Join(e.Scopes, " "), e.Grant, strings.Join(e.Missing, " "))
	case AuthRevoked:
		msg += fmt.Sprintf(" (grant %s was revoked)", e.Grant)
	case AuthExpired:
		msg += fmt.Sprintf(" (grant %s expired and cannot be refreshed)", e.Grant)
	default:
		if len(e.Scopes) > 0 {
			msg += " with scopes " + strings.Join(e.Scopes, " ")
		}
	}
	return msg
}

// AuthRequired returns the [*AuthRequiredError] in err's chain, or nil:
// what an Authorize hook returns of the error of a credential lookup.
func AuthRequired(err error) *AuthRequiredError {
	var ar *AuthRequiredError
	if errors.As(err, &ar) {
		return ar
	}
	return nil
}
