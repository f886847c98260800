// Package policy decides whether a tool call may run: allow, ask a person,
// or deny. It holds the decision types and rule evaluation; it does no I/O
// (DESIGN.md, "Contract — the gate").
package policy

import (
	"context"
	"encoding/json"
)

// Effect is a policy outcome.
type Effect string

// Policy outcomes.
const (
	Allow Effect = "allow"
	Ask   Effect = "ask"
	Deny  Effect = "deny"
)

// Decision is the outcome of evaluating one tool call.
type Decision struct {
	Effect Effect `json:"decision"`
	// Policies are the ids of the rules that determined the outcome.
	Policies []string `json:"policies,omitempty"`
	// Reason is a short, user-safe explanation.
	Reason string `json:"reason,omitempty"`
}

// Call is what a policy sees of one tool call.
type Call struct {
	RunID  string
	CallID string
	// Principal is the agent the run executes as; OnBehalfOf is the user
	// an assistant agent acts for ("" for an employee agent).
	Principal  string
	OnBehalfOf string
	Tool       string
	// Effect is the tool's effect class ("read_only", "workspace_write",
	// "external").
	Effect string
	// Arguments is the validated JSON object.
	Arguments json.RawMessage
	// Paths are the workspace-relative real paths the call touches, as
	// resolved by the runtime (empty when the tool declares none).
	Paths []string
}

// Policy evaluates a call. It must be deterministic and free of I/O, so a
// replayed run yields the same decisions.
type Policy func(ctx context.Context, c *Call) Decision

// AllowAll is the permissive policy: every call is allowed. The runtime
// still validates arguments and confines file tools to the workspace.
func AllowAll(context.Context, *Call) Decision {
	return Decision{Effect: Allow, Policies: []string{"keel.allow_all"}, Reason: "no policy configured: all tool calls allowed"}
}
