// Package tool defines what a Keel agent can do: a [Tool] (name,
// description, JSON Schema of its arguments, effect class), its [Handler],
// and the [Registry] that validates a model's tool call before anything
// runs.
//
// Errors have two channels, as in MCP's tool handlers: a tool failure is a
// [Result] with IsError set, which the model sees and can correct; a Go
// error from a [Handler] means the runtime itself failed and the step
// aborts.
//
// Built-in tools live in [github.com/keel-run/keel/tool/builtin].
package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/sandbox"
)

// Effect classifies what a tool may change. The gate uses it for risk, the
// executor for concurrency, and resume for deciding whether an interrupted
// call may run again (docs/architecture.md, "Contract — side effects").
// It is a property of the tool, fixed when it is registered; the gate's
// outcome for one call (allow, ask, deny) is policy.Effect, Cedar's word
// for a policy's outcome.
type Effect int

// Effect classes, from least to most dangerous.
const (
	// ReadOnly tools change nothing; an interrupted call is re-run.
	ReadOnly Effect = iota
	// WorkspaceWrite tools change files in the workspace only.
	WorkspaceWrite
	// External tools may change anything the sandbox allows, including
	// the outside world (a shell, a network request).
	External
)

// String returns "read_only", "workspace_write" or "external".
func (e Effect) String() string {
	switch e {
	case ReadOnly:
		return "read_only"
	case WorkspaceWrite:
		return "workspace_write"
	default:
		return "external"
	}
}

// Tool describes one tool offered to the model.
type Tool struct {
	// Name is what the model calls; unique in a [Registry].
	Name string
	// Description tells the model what the tool does and when to use it.
	Description string
	// InputSchema is the JSON Schema of the arguments object. It must
	// have "type": "object".
	InputSchema json.RawMessage
	// Effect is the tool's effect class.
	Effect Effect
	// Unlisted keeps a retired tool working for the runs that were
	// offered it (their run.created lists it, their journals call it)
	// while no new run is: [Registry.Specs] and [Registry.Names] leave
	// it out, [Registry.Tool], Validate and Run still find it.
	Unlisted bool
	// Idempotent declares that running a call twice has the same effect
	// as running it once, so an interrupted call may be re-run on resume
	// even when Effect is not ReadOnly.
	Idempotent bool
	// Scope returns the workspace paths (as the model wrote them) that a
	// call reads or, unless Effect is ReadOnly, writes. The executor runs
	// calls of one turn concurrently unless their scopes conflict. A nil
	// Scope means the call may touch the whole workspace; a Scope that
	// returns an empty list touches none of it.
	Scope func(args json.RawMessage) []string
	// Authorize, when set, is called after the gate allowed a call and
	// before it starts, to obtain what the call needs from a person
	// first: it returns an [*AuthRequiredError] (possibly wrapped) when
	// someone must authorize, and the runtime then waits durably instead
	// of running the call. Any other error is ignored here (the handler
	// meets it again and reports it as a result). Nil: nothing to
	// authorize.
	Authorize func(ctx context.Context, req *Request) error
	// Credential, when set, describes the credential a call would use
	// (nil: none), for the gate: the policy sees it, and gate.decided
	// records it. It must not fetch a token.
	Credential func(ctx context.Context, req *Request) *policy.CredentialUse
	// Server names the MCP server or connector that provides the tool
	// ("" for built-ins). The gate shows it to the policy as the call's
	// resource.
	Server string
	// Pin, for a tool from outside Keel, is the SHA-256 of its definition
	// as its server gave it; it is journaled with the run's tools.
	Pin string
	// Facts, when set, returns what the gate shows the policy about a
	// call beyond its arguments: a connector's statement kind and tables,
	// an MCP tool's annotations (as hints). Values are strings, booleans,
	// integers and lists of strings.
	Facts func(args json.RawMessage) map[string]any
	// Exclusive makes a call of the tool run apart from every call of
	// its turn that writes (as a tool without Scope does), whatever its
	// Scope says: a stdio MCP server's tool, which may start the server
	// from workspace files that must not change while it starts.
	Exclusive bool
	// Hold, when set, is asked by the gate before every call: a non-empty
	// answer (why, with what changed) makes the call wait for a person's
	// approval whatever the policy allows. MCP tools use it for a tool
	// whose definition changed since it was pinned.
	Hold func() string
	// State, when set, returns a digest of what a call would change as
	// it is now (a file write: the file's content, or that it does not
	// exist), "" when it cannot tell. A call that waits for a person's
	// approval records it when the approval is asked, and the approved
	// call does not run if it changed meanwhile (a person edited the
	// file): the approval was given for a diff that no longer applies.
	State func(req *Request) string
	// Check, when set, is asked by the gate before a call waits for a
	// person: a non-empty answer is the error the call would end with as
	// things are now (an edit whose old_string is not in the file), and
	// the call fails with it at once, as the tool would, instead of
	// asking a person to approve what cannot happen.
	Check func(req *Request) string
}

// Handler runs one validated call. It returns a [Result] for anything the
// model should see (including failures) and an error only when the
// runtime cannot continue.
type Handler func(ctx context.Context, req *Request) (*Result, error)

// Request is one validated tool call.
type Request struct {
	// RunID and CallID identify the call (for artifacts and logs).
	RunID  string
	CallID string
	// Arguments is the validated JSON object.
	Arguments json.RawMessage
	// Principal is the agent the run executes as; OnBehalfOf the user an
	// assistant agent acts for ("" for an employee agent). Tools that
	// obtain credentials ask for them as this pair.
	Principal, OnBehalfOf string
	// MaxScopes, when set, bounds the credentials the call may use: per
	// provider, the scopes at most (a child agent's bound; nil: none).
	// Tools pass it to the vault with the principal.
	MaxScopes map[string][]string
	// Env is the run's environment; never nil.
	Env *Env
	// Approved is the [Tool].State recorded when a person was asked to
	// approve this call, when a person approved it ("" when the policy
	// allowed the call, a remembered approval did, or the approval's
	// deadline passed): what the person saw and agreed to.
	Approved string
	// Untrusted is set when the run had seen untrusted input (a fetched
	// page, an external tool's result, an untrusted memory entry) when
	// the call was decided: what the call writes derives from it.
	Untrusted bool
}

// Env is what a tool may use during a run. Its fields are owned by the
// runtime and shared by concurrent calls; tools must not modify them.
type Env struct {
	// Sandbox runs commands; nil when the run has none (file tools still
	// work, shell tools return an error result).
	Sandbox sandbox.Sandbox
	// Workspace resolves and guards paths; never nil in a run.
	Workspace *Workspace
	// Network is the run's egress policy; the zero value allows nothing.
	Network sandbox.Network
	// CommandTimeout is the default wall time of a shell command; 0 means
	// 60 seconds.
	CommandTimeout time.Duration
	// MaxResultChars bounds [Result.Content]; 0 means
	// [DefaultMaxResultChars].
	MaxResultChars int
}

// DefaultMaxResultChars is the default bound of what the model sees of one
// tool result: about 10,000 characters, head and tail, as mini-swe-agent
// shows them.
const DefaultMaxResultChars = 10000

// Result is the outcome of one tool call as the model sees it.
type Result struct {
	// Content is the text the model sees: bounded, valid UTF-8.
	Content string `json:"content"`
	// IsError marks a failed call.
	IsError bool `json:"is_error,omitempty"`
	// ExitCode is set by tools that run a command.
	ExitCode *int `json:"exit_code,omitempty"`
	// TimedOut is set when a time limit ended the call.
	TimedOut bool `json:"timed_out,omitempty"`
	// Artifact is the workspace-relative path of the whole output when
	// Content shows only part of it.
	Artifact string `json:"artifact,omitempty"`
	// OutputBytes is the size of the whole output before bounding.
	OutputBytes int64 `json:"output_bytes,omitempty"`
	// Untrusted marks content the tool knows to be derived from
	// untrusted input (memory_search returning an untrusted entry):
	// the run counts it as untrusted input.
	Untrusted bool `json:"untrusted,omitempty"`
}

type liveKey struct{}

// WithLive returns a context whose tool runs give each chunk of their
// command's output to fn as it arrives (tools that run commands call
// [Output.Tee] with [LiveOf] of their context). It is for a person
// watching: fn must copy what it keeps and must not block.
func WithLive(ctx context.Context, fn func(p []byte)) context.Context {
	return context.WithValue(ctx, liveKey{}, fn)
}

// maxLiveLine bounds how much of an unfinished line [WithLiveHidden]
// holds back.
const maxLiveLine = 4096

// WithLiveHidden returns ctx with its [WithLive] function (if any) given
// each chunk through hide (a run's secret redaction), by whole lines: a
// secret split over two chunks is hidden too. A line longer than 4 KiB
// is passed on in pieces; an unfinished last line is not passed on (the
// call's result shows it).
func WithLiveHidden(ctx context.Context, hide func(string) string) context.Context {
	fn := LiveOf(ctx)
	if fn == nil || hide == nil {
		return ctx
	}
	var mu sync.Mutex
	var pending []byte
	return WithLive(ctx, func(p []byte) {
		mu.Lock()
		defer mu.Unlock()
		pending = append(pending, p...)
		cut := bytes.LastIndexByte(pending, '\n') + 1
		if cut == 0 {
			if len(pending) < maxLiveLine {
				return
			}
			cut = len(pending)
		}
		fn([]byte(hide(string(pending[:cut]))))
		pending = append(pending[:0], pending[cut:]...)
	})
}

// LiveOf returns the function of [WithLive] in ctx, or nil.
func LiveOf(ctx context.Context) func(p []byte) {
	fn, _ := ctx.Value(liveKey{}).(func([]byte))
	return fn
}

// Errorf returns an error [Result] with the formatted message.
func Errorf(format string, args ...any) *Result {
	return &Result{Content: sprintf(format, args...), IsError: true}
}

// Text returns a successful [Result] with content s.
func Text(s string) *Result { return &Result{Content: s} }
