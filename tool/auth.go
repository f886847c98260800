package tool

import (
	"fmt"
	"strings"
)

// AuthRequiredError is what a [Tool]'s Authorize returns when a person
// must authorize before the call can have its credential: no grant yet,
// a missing scope, a revoked or unrefreshable grant. The runtime then
// journals an auth.required wait for the call (it does not run, and the
// run pauses as for an approval) and runs it once the wait is resolved,
// which it is when the person connects (keel auth connect). It is never a
// failed call. Its fields name no secret.
type AuthRequiredError struct {
	// Provider and Issuer name the authorization server.
	Provider, Issuer string
	// Agent and User: whose grant is needed (User "" for an employee
	// agent's own).
	Agent, User string
	// Scopes to ask for; Missing those the current grant lacks.
	Scopes, Missing []string
	// Reason is "missing", "scope", "revoked" or "expired"; Grant the
	// grant it is about, if any.
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
		who += " acting for " + e.User
	}
	s := fmt.Sprintf("authorization required (%s): %s needs a grant of provider %s", e.Reason, who, e.Provider)
	if len(e.Scopes) > 0 {
		s += " with scopes " + strings.Join(e.Scopes, " ")
	}
	return s
}
