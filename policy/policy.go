// Package policy decides whether a tool call may run: allow, ask a person,
// or deny (docs/architecture.md, "Contract — the gate"). It holds the decision types
// and an [Engine] that evaluates Cedar policies
// (github.com/cedar-policy/cedar-go) over each part of a call; the
// analysis of a bash command line into the simple commands it would run,
// with the paths and hosts each reaches, is package policy/bash.
//
// # Decisions
//
// A call is decided part by part: one part per simple command of a bash
// command line (pipes, lists, subshells, command substitutions, nested
// "bash -c" scripts), one per path of a file tool, one for any other tool.
// The call's decision is the strictest of its parts (deny over ask over
// allow), so approving one part never approves another, and the journaled
// [Decision] lists every part's own decision.
//
// # Purity
//
// Nothing here does I/O: a policy is compiled from bytes the caller read
// ([Parse]), and [Engine.Decide] reads only its [Call] (and, for a call
// without a sandbox, where the workspace's symbolic links lead: see
// policy/bash), so that a replayed run yields the same decisions. Standing approvals ([Grant]) and
// revocation ([ErrRevoked]) reach the gate through the [Call] and through
// the caller's [PrincipalCheck].
package policy

import (
	"context"
	"encoding/json"
	"errors"
)

// Effect is a policy outcome for one call: allow, ask or deny (Cedar's
// word for what a policy decides). What a tool may change, fixed when it
// is registered, is tool.Effect, its effect class.
type Effect string

// Policy outcomes.
const (
	Allow Effect = "allow"
	Ask   Effect = "ask"
	Deny  Effect = "deny"
)

// rank orders effects by strictness.
func (e Effect) rank() int {
	switch e {
	case Allow:
		return 0
	case Ask:
		return 1
	}
	return 2 // deny, and anything unknown: fail closed
}

// Stricter returns the stricter of a and b: deny over ask over allow. An
// unknown effect counts as deny.
func Stricter(a, b Effect) Effect {
	if b.rank() > a.rank() {
		return b
	}
	return a
}

// Decision is the outcome of evaluating one tool call.
type Decision struct {
	Effect Effect `json:"decision"`
	// Policies are the ids of the rules that determined the outcome.
	Policies []string `json:"policies,omitempty"`
	// Reason is a short, user-safe explanation.
	Reason string `json:"reason,omitempty"`
	// Parts are the per-part decisions the outcome is the strictest of
	// (see the package documentation); empty for decisions that did not
	// look inside the call (a malformed call, [AllowAll]).
	Parts []Part `json:"parts,omitempty"`
	// PartsOmitted counts the parts beyond [MaxParts] that were neither
	// decided nor listed; the call then asks (policy "keel.limit").
	PartsOmitted int `json:"parts_omitted,omitempty"`
}

// Part is the decision on one part of a call: one simple command of a
// bash command line, one path of a file tool, or the whole call of any
// other tool.
type Part struct {
	// Index is the part's 0-based position in the call.
	Index int `json:"index"`
	// Text is the part as the model wrote it: for bash, the source text
	// of the simple command and its redirections, followed by those of
	// the compound commands around it, or the whole pipeline for a
	// command that reads its arguments or script from a pipe, or the
	// whole find command for a command find -exec runs (see
	// [Command].Text). A remembered approval matches it exactly.
	Text string `json:"text"`
	// Clipped is set when Text was cut to [MaxPartText] bytes in the
	// journaled decision (the decision itself saw all of it); such a
	// part cannot be remembered.
	Clipped bool `json:"clipped,omitempty"`
	// Command is the program a bash part runs (argv[0] as written, after
	// wrappers such as env, timeout or xargs); empty for other tools.
	Command string `json:"command,omitempty"`
	// Words are the part's literal argument words, unquoted, for bash
	// parts whose every word is a literal; a remembered approval can only
	// match such a part.
	Words []string `json:"words,omitempty"`
	// Redirects are the file redirections that apply to a bash part, its
	// own and those around it, as written ("> out.log"); Input is set when
	// it takes its arguments or script from a pipe or from the files find
	// finds. A remembered prefix matches neither.
	Redirects []string `json:"redirects,omitempty"`
	Input     bool     `json:"input,omitempty"`
	// Assigns are the environment variables the part sets for its
	// program ("GIT_SSH_COMMAND=... git push"); a remembered prefix never
	// matches such a part.
	Assigns []string `json:"assigns,omitempty"`
	// Via lists what wraps the command, outermost first ("bash -c",
	// "$(...)", "xargs", "env"...).
	Via []string `json:"via,omitempty"`
	// Written are the workspace files a bash part writes, as far as its
	// text shows them (redirections, the file arguments of programs
	// known to write), absolute under the mount path. An approved call
	// compares them with what they were when its approval was asked.
	Written []string `json:"written,omitempty"`
	Effect  Effect   `json:"decision"`
	// Policies are the ids of the rules that determined this part.
	Policies []string `json:"policies,omitempty"`
	Reason   string   `json:"reason,omitempty"`
	// Detail says what the analysis could not know about the part (why
	// it is dynamic, what code it runs), for people; empty when nothing.
	Detail string `json:"detail,omitempty"`
	// Grant is the id of the remembered approval that turned an ask into
	// an allow, if any.
	Grant string `json:"grant,omitempty"`
}

// Call is what a policy sees of one tool call.
type Call struct {
	RunID  string
	CallID string
	// Principal is the agent the run executes as; OnBehalfOf is the user
	// an assistant agent acts for ("" for an employee agent).
	Principal  string
	OnBehalfOf string
	// Actors are the principals Principal acts for in turn, nearest
	// first: a child agent's parent's principal, then its parent's (empty
	// for a root run). Cedar sees them as the principal's parents
	// (principal in Keel::Agent::"PARENT") and as context.actors; the
	// runtime also decides a child's call as each of them, and keeps the
	// strictest decision.
	Actors []string
	Tool   string
	// Effect is the tool's effect class ("read_only", "workspace_write",
	// "external").
	Effect string
	// Arguments is the validated JSON object.
	Arguments json.RawMessage
	// Paths are the workspace-relative real paths the call touches, as
	// resolved by the runtime (empty when the tool declares none).
	Paths []string
	// Workspace is the host directory of the workspace; MountPath is where
	// commands see it (default "/workspace"), against which the absolute
	// paths in a command line are classified.
	Workspace string
	MountPath string
	// Sandbox names the run's sandbox backend ("linux", "none"); with
	// "none", nothing but the policy stands between a command and the
	// host.
	Sandbox string
	// Network lists the hosts the run's sandbox may reach (empty: none).
	Network []string
	// ReadOnly are extra absolute paths the sandbox shows read-only (Keel's
	// state directory of the run, whose whole outputs a result names):
	// commands may read them without asking, like the policy's system
	// directories, never write them.
	ReadOnly []string
	// Grants are the standing approvals in force for this call: those
	// remembered in the run and those of the principal.
	Grants []Grant
	// Credential is the credential the call would use if allowed (nil:
	// none), as its tool describes it before the gate decides.
	Credential *CredentialUse
	// Server names the MCP server or connector that provides the tool
	// ("" for built-ins); it is the resource of the call
	// (Keel::Server::"NAME").
	Server string
	// Facts are what the tool tells the policy about the call beyond its
	// arguments (context.facts): a connector's statement kind and tables,
	// an MCP tool's annotations as hints.
	Facts map[string]any
	// Flow is what the call may carry out and what the run's data has
	// been so far (nil: nothing known); see [Flow].
	Flow *Flow
	// Autorun are workspace files (absolute, as commands see them under
	// MountPath) that the run's own machinery runs on its own, such as
	// the scripts of its stdio MCP servers: writing one counts as writing
	// a file that runs on its own (context.autorun). An entry
	// "DIR/**/GLOB" names every file under DIR whose name matches GLOB
	// (path.Match), such as the modules a server's script may import
	// from its directory (DIR/**/*.py).
	Autorun []string
}

// CredentialUse describes the credential a call would be given: which
// provider's grant (for [Call].Principal acting for OnBehalfOf), for
// which resource URL, with which scopes and HTTP method. Cedar policies
// see it in the context as provider, resource_url, scopes, method and
// credential (whether any is used), so that they can ask for writes
// (POST, PUT, PATCH, DELETE) or for chosen scopes.
type CredentialUse struct {
	Provider string   `json:"provider"`
	Resource string   `json:"resource,omitempty"`
	Method   string   `json:"method,omitempty"`
	Scopes   []string `json:"scopes,omitempty"`
}

// Policy evaluates a call. It must be deterministic and free of I/O, so a
// replayed run yields the same decisions.
type Policy func(ctx context.Context, c *Call) Decision

// AllowAll is the permissive policy: every call is allowed. The runtime
// still validates arguments and confines file tools to the workspace.
func AllowAll(context.Context, *Call) Decision {
	return Decision{Effect: Allow, Policies: []string{"keel.allow_all"}, Reason: "no policy configured: all tool calls allowed"}
}

// ErrRevoked is wrapped by a [PrincipalCheck]'s error when the principal
// may not act: revoked, or not known. The runtime then pauses the run with
// reason "revoked" instead of deciding its calls.
var ErrRevoked = errors.New("policy: principal is revoked or unknown")

// PrincipalCheck is called by the gate before each decision with the run's
// principal and the user it acts for. It returns the principal's standing
// approvals ([Grant] with Scope "agent") when it may act, an error
// wrapping [ErrRevoked] when it may not, or another error when the check
// itself failed (the runtime then stops without running anything: fail
// closed). identity.Directory.Check is the implementation Keel wires.
type PrincipalCheck func(ctx context.Context, principal, onBehalfOf string) ([]Grant, error)
