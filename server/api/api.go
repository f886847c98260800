// Package api holds the JSON types of Keel's HTTP API (/v1), shared by
// the server (package server) and the Go client (package client). They
// are a wire format: fields may be added, never renamed or removed.
//
// The OpenAPI document served at /v1/openapi.json describes the same
// shapes; a test in package server keeps the two in step.
package api

import (
	"encoding/json"
	"time"

	"github.com/keel-run/keel/policy"
)

// Version is the API's path prefix.
const Version = "/v1"

// Error codes of [Error.Code]. They are stable: clients branch on them.
const (
	// CodeInvalidRequest: the request body, a parameter or a path value is
	// malformed or inconsistent (HTTP 400).
	CodeInvalidRequest = "invalid_request"
	// CodeUnauthenticated: no token, or an unknown or revoked one (401).
	CodeUnauthenticated = "unauthenticated"
	// CodeForbidden: the token lacks the scope the action needs (403).
	CodeForbidden = "forbidden"
	// CodeNotFound: no such run, approval, agent, token or route (404).
	CodeNotFound = "not_found"
	// CodeConflict: the action does not fit the run's state, for example
	// resuming a run that is executing (409).
	CodeConflict = "conflict"
	// CodeRunCompleted: the run completed; it cannot be resumed or
	// canceled (409).
	CodeRunCompleted = "run_completed"
	// CodeNoApproval: the call has no pending approval (409).
	CodeNoApproval = "no_approval"
	// CodeNoInput: the run does not wait for that input (409).
	CodeNoInput = "no_input"
	// CodeCorrupt: the run's journal fails its hash chain or does not
	// fold (500); the journal is reported, never repaired.
	CodeCorrupt = "journal_corrupt"
	// CodeUnavailable: the server is shutting down or the feature is not
	// configured (503).
	CodeUnavailable = "unavailable"
	// CodeTooLarge: the request body is over the server's limit of
	// 1 MiB (413).
	CodeTooLarge = "too_large"
	// CodeInternal: anything else (500); details are in the server log.
	CodeInternal = "internal"
)

// ErrorBody is the body of every error response:
// {"error": {"code": "...", "message": "..."}}.
type ErrorBody struct {
	Error Error `json:"error"`
}

// Error is an API error. Message is safe to show to a person; Code is one
// of the Code constants.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Status is the HTTP status code of the response (set by the client
	// from the response when decoding).
	Status int `json:"status"`
}

// Error implements error with the message alone (the code when there is
// none): the message is what a person reads; programs branch on Code
// (errors.As).
func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Message
}

// Limits stop a run (see agent.Limits).
//
// One meaning everywhere (docs/limits.md): a field left out is absent
// (a new run gets Keel's default, a resumed run keeps its own), zero
// means no limit, and a negative value is refused.
type Limits struct {
	// MaxSteps bounds the model calls (default 500).
	MaxSteps *int `json:"max_steps,omitempty"`
	// MaxTokens bounds the input and output tokens summed over all model
	// calls (default 100,000,000).
	MaxTokens *int64 `json:"max_tokens,omitempty"`
	// MaxCost bounds the model cost in US dollars, for models with a
	// known price (default 50).
	MaxCost *float64 `json:"max_cost,omitempty"`
	// Timeout is a Go duration string ("30m") bounding one execution
	// (default 12h; "0s": no limit).
	Timeout string `json:"timeout,omitempty"`
	// MaxToolCalls bounds the tool calls; MaxChildren the child runs of
	// the whole tree; MaxDepth its levels below the run (default: no
	// limit; see docs/teams.md).
	MaxToolCalls *int `json:"max_tool_calls,omitempty"`
	MaxChildren  *int `json:"max_children,omitempty"`
	MaxDepth     *int `json:"max_depth,omitempty"`
}

// SecretHost is a secret for one host of a run (CreateRun.SecretHosts):
// the name of the variable, and the host as an allowlist entry (in a
// request, empty for the host the server's operator bound it to). Body
// lets the egress proxy put the value in request bodies too (as keel
// run --secret-in-body NAME).
type SecretHost struct {
	Name string `json:"name"`
	Host string `json:"host"`
	Body bool   `json:"body,omitempty"`
}

// CreateRun is the body of POST /v1/runs.
type CreateRun struct {
	// Task is what the agent should do; required unless Demo is set or
	// the model is a replay (which brings its recorded task).
	Task string `json:"task,omitempty"`
	// Model is a model spec ("openai:gpt-4o", "replay:PATH",
	// "scripted:demo"); default: the server's.
	Model string `json:"model,omitempty"`
	// Agent is the principal the run executes as: one of the agents the
	// token is bound to (default: its only one), or any agent for an
	// admin token. OnBehalfOf is the user an assistant agent acts for:
	// the token's person (the default), or anyone for an admin token.
	Agent      string `json:"agent,omitempty"`
	OnBehalfOf string `json:"on_behalf_of,omitempty"`
	// Workspace is a directory on the server's machine, under one of the
	// server's workspace roots; MountPath where the sandbox sees it
	// (default /workspace).
	Workspace string `json:"workspace,omitempty"`
	MountPath string `json:"mount_path,omitempty"`
	// Sandbox is the server's ("linux", the default); "none" needs an
	// admin token on a server that allows it.
	Sandbox string   `json:"sandbox,omitempty"`
	Env     []string `json:"env,omitempty"`
	// SecretEnv names variables of the server's environment passed into
	// the sandbox as secrets (as keel run --secret-env): only names the
	// server offers (keel serve --secret-env NAME); the values never
	// travel in a request, and the journal holds the names.
	SecretEnv []string `json:"secret_env,omitempty"`
	// SecretHosts are secrets the sandbox never holds (as keel run
	// --secret-for-host NAME=HOST): the sandbox's NAME is a placeholder
	// the egress proxy replaces by the value of the server's variable
	// NAME in requests to HOST only. NAME must be offered for HOST by
	// the operator (keel serve --secret-for-host NAME=HOST; an empty
	// Host is the operator's), Body allowed by the operator (keel serve
	// --secret-in-body NAME), HOST allowed by Network.
	SecretHosts []SecretHost `json:"secret_hosts,omitempty"`
	Setup       string       `json:"setup,omitempty"`
	Network     []string     `json:"network,omitempty"`
	System      string       `json:"system,omitempty"`
	Limits      Limits       `json:"limits,omitempty"`
	// Policy names or holds the run's tool-call policy (empty or
	// "server": the server's). Any other policy needs an admin token.
	Policy string `json:"policy,omitempty"`
	// PolicyFile names the file whose text Policy holds (a client's
	// --policy FILE): refusals and the run's record name it, and it
	// says the format as keel run --policy FILE reads a file (a name
	// ending in .cedar: bare Cedar rules; any other: Keel's TOML policy
	// format). Empty: the text is named api:policy and read as TOML,
	// else as Cedar.
	PolicyFile string `json:"policy_file,omitempty"`
	// CompletionMarker overrides the default completion marker line; nil
	// keeps the default, "" disables it.
	CompletionMarker *string `json:"completion_marker,omitempty"`
	// Demo creates the bundled demonstration run: a fresh copy of the
	// demo project and the scripted demo model, with a policy that asks a
	// person before the agent edits a file. It takes no other field but
	// Labels (a request that sets one is refused).
	Demo bool `json:"demo,omitempty"`
	// Labels are free-form annotations; keys starting with "keel." (in
	// any case) are the server's and refused.
	Labels map[string]string `json:"labels,omitempty"`
	// Connectors narrow the run's MCP servers, databases and APIs: each
	// non-empty list to those names, among the ones its agent may use
	// (the agent's connectors, else the server's); by default the run
	// offers all of them. NoConnectors leaves them all out.
	Connectors   *Connectors `json:"connectors,omitempty"`
	NoConnectors bool        `json:"no_connectors,omitempty"`
	// NoCheckpoints takes no workspace checkpoints for the run (also the
	// default of a server started with keel serve --no-checkpoints): it
	// cannot be rewound or forked with its files.
	NoCheckpoints bool `json:"no_checkpoints,omitempty"`
	// NoMemory offers the run no memory: no entries of the memory
	// stores, no memory tools, no AGENTS.md or KEEL.md memory files.
	// NoSkills offers it no skills (docs/skills.md).
	NoMemory bool `json:"no_memory,omitempty"`
	NoSkills bool `json:"no_skills,omitempty"`
	// ProposeSkills offers the run propose_skill and promote_skill (keel
	// run --propose-skills): it may propose skills from its work, tested
	// in its sandbox, and ask a person to promote one (docs/skills.md).
	ProposeSkills bool `json:"propose_skills,omitempty"`
	// ContextWindow is the run's context window in tokens (keel run
	// --context-window): absent or 0 the model family's, negative never
	// compacts; one too small for the run's fixed part (system prompt,
	// memory, tool schemas, task) is refused.
	ContextWindow *int `json:"context_window,omitempty"`
	// Team lets the run start child agents (spawn_agent, wait_agents,
	// handoff) from the workspace's trusted agent definitions
	// (.keel/agents/NAME.md) or inline ones, under its budget (keel run
	// --team; docs/teams.md).
	Team bool `json:"team,omitempty"`
}

// RunTreeSpend is one node's amounts on each axis of a budget.
type RunTreeSpend struct {
	Steps     int     `json:"steps"`
	Tokens    int64   `json:"tokens"`
	Cost      float64 `json:"cost"`
	ToolCalls int     `json:"tool_calls"`
	Children  int     `json:"children"`
}

// RunTreeLeft is what is left of a node's limits: an axis without a
// limit is absent (nil), so that 0 always means nothing is left.
type RunTreeLeft struct {
	Steps     *int     `json:"steps,omitempty"`
	Tokens    *int64   `json:"tokens,omitempty"`
	Cost      *float64 `json:"cost,omitempty"`
	ToolCalls *int     `json:"tool_calls,omitempty"`
	Children  *int     `json:"children,omitempty"`
}

// RunTree is a run and its child runs (GET /v1/runs/{id}/tree, keel runs
// show's tree): each node's status, what it spent itself (Own) and with
// its children (Used: a child not yet delivered counts its whole slice),
// its limits (a child's: the slice of its parent's budget reserved for
// it; 0: no limit) and what is left of them (Left: limited axes only,
// an axis with no limit is absent there).
type RunTree struct {
	ID     string `json:"id"`
	Agent  string `json:"agent,omitempty"`
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	// Parent and Root, on the node asked for, link a child run to the
	// run that spawned it and to the top of its tree.
	Parent   string       `json:"parent,omitempty"`
	Root     string       `json:"root,omitempty"`
	Limits   RunTreeSpend `json:"limits"`
	Own      RunTreeSpend `json:"own"`
	Used     RunTreeSpend `json:"used"`
	Left     RunTreeLeft  `json:"left"`
	Children []RunTree    `json:"children"`
}

// Run is a run as the API shows it: its summary folded from the journal,
// plus what the server knows about its execution.
type Run struct {
	ID         string    `json:"id"`
	Status     string    `json:"status"`
	Task       string    `json:"task"`
	Model      string    `json:"model"`
	Agent      string    `json:"agent,omitempty"`
	OnBehalfOf string    `json:"on_behalf_of,omitempty"`
	Workspace  string    `json:"workspace"`
	Sandbox    string    `json:"sandbox,omitempty"`
	Created    time.Time `json:"created"`
	Updated    time.Time `json:"updated"`
	// Events is the sequence number of the newest event; LastType its
	// type.
	Events   int64  `json:"events"`
	LastType string `json:"last_type"`
	// Steps counts model responses; Tokens sums the input and output
	// tokens of the run's model calls, the summary calls of context
	// compaction included; Cost their cost in US dollars.
	Steps  int     `json:"steps"`
	Tokens int64   `json:"tokens"`
	Cost   float64 `json:"cost"`
	// DurationMS is the run's working time: from its start, and from
	// each resume, to the event that paused or ended it (or its newest
	// event while it runs). Time paused or ended does not count, nor do
	// events journaled then (decisions, rewinds). For a fork, from its
	// own first event (after those it copied from its source, whose
	// times are the source's).
	DurationMS int64 `json:"duration_ms"`
	// Reason, Message and Output come from the terminal or pause event.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	Output  string `json:"output,omitempty"`
	// Pending lists the approvals the run waits for.
	Pending []Approval `json:"pending,omitempty"`
	// AuthWaits lists the calls that wait for an authorization
	// (auth.required).
	AuthWaits []AuthWait `json:"auth_waits,omitempty"`
	// Executing is true while the server runs it; Queued while it waits
	// for a worker.
	Executing bool `json:"executing,omitempty"`
	Queued    bool `json:"queued,omitempty"`
	// Idle is set on a run whose journal says running but that nothing
	// executes (no process holds its lease, and this server neither
	// executes nor queues it): "queued" when it has not started (a run
	// that a schedule fired on a journal no keel scheduler or server
	// executes yet), "interrupted" when its execution stopped without
	// journaling it (a crash, a kill: keel runs resume continues it).
	// keel runs list shows it as the run's status, and the status
	// filter of GET /v1/runs takes it.
	Idle string `json:"idle,omitempty"`
	// Error is the server's last failure to execute the run (for
	// example a missing API key), if any.
	Error string `json:"error,omitempty"`
	// Elsewhere, in the answer to a decision, says why this server does
	// not continue the run and where it goes on (a keel run started it
	// on the server's journal with another policy or sandbox): the
	// decision is recorded, and nothing here executes the run.
	Elsewhere string `json:"elsewhere,omitempty"`
	// ForkOf is "RUN@SEQ" for a run forked from another.
	ForkOf string `json:"fork_of,omitempty"`
	// Parent is the run that spawned this one, for a child agent
	// (docs/teams.md).
	Parent string `json:"parent,omitempty"`
	// CreatedBy is the person whose token created the run (or the fork)
	// through the API; empty for runs made on the server's machine.
	CreatedBy string `json:"created_by,omitempty"`
	// Origin is what started the run when no person did: "schedule
	// NAME" or "trigger NAME".
	Origin string `json:"origin,omitempty"`
}

// RunsParams are the query of GET /v1/runs. The zero value lists every
// run.
type RunsParams struct {
	// Status keeps runs whose status is one of these: running, queued,
	// interrupted, paused, completed, failed, canceled (a run that is
	// Idle has that status instead of running).
	Status []string
	// Limit caps the number of runs; 0 means all.
	Limit int
}

// RunList is the body of GET /v1/runs.
type RunList struct {
	Runs []Run `json:"runs"`
}

// ResumeRun is the body of POST /v1/runs/{id}/resume; it may be empty.
type ResumeRun struct {
	// Message, if set, is added as a user message before continuing.
	Message string `json:"message,omitempty"`
	// Limits, if set, replace the run's limits from now on: each field
	// given replaces that limit (zero: no limit), a field left out keeps
	// the run's own (as `keel runs resume --max-steps N` does). Journaled
	// in run.resumed.
	Limits *Limits `json:"limits,omitempty"`
	// Settings, if set, replace the run's execution settings given in
	// it from now on; a field left out keeps the run's own. Journaled in
	// run.resumed.
	Settings *Settings `json:"settings,omitempty"`
	// ContextWindow, if positive, replaces the run's context window (in
	// tokens) from now on.
	ContextWindow int `json:"context_window,omitempty"`
}

// Settings are a run's execution settings (see agent.Settings), each
// optional: a field left out (null) is not changed. Durations are Go
// duration strings ("90s").
type Settings struct {
	// CommandTimeout is the default wall time of one shell command.
	CommandTimeout string `json:"command_timeout,omitempty"`
	// CommandIdleTimeout ends a shell command that prints nothing for
	// this long; negative: never.
	CommandIdleTimeout string `json:"command_idle_timeout,omitempty"`
	// Concurrency bounds the tool calls of one turn that run at once.
	Concurrency *int `json:"concurrency,omitempty"`
	// MaxResultChars bounds what the model sees of one tool result.
	MaxResultChars *int `json:"max_result_chars,omitempty"`
	// MaxOutputTokens is the completion token limit of one model call;
	// 0: the provider's default.
	MaxOutputTokens *int `json:"max_output_tokens,omitempty"`
	// ModelIdleTimeout abandons a model response that sends no bytes
	// for this long; ModelStallRetries retries such a response.
	ModelIdleTimeout  string `json:"model_idle_timeout,omitempty"`
	ModelStallRetries *int   `json:"model_stall_retries,omitempty"`
	// ModelRetries is how often a failed model request is retried.
	ModelRetries *int `json:"model_retries,omitempty"`
}

// ForkRun is the body of POST /v1/runs/{id}/fork.
type ForkRun struct {
	// Seq is the last event of the source run copied into the fork
	// (required: 1 or more, as keel runs fork --at).
	Seq int64 `json:"seq"`
	// Workspace, if set, replaces the source's workspace directory: the
	// source's own, or a new or empty one for the fork's files (the
	// fork makes it, not its parents; one holding files is refused when
	// the fork point has a checkpoint). Otherwise a demo run's fork gets a fresh
	// copy of the demo project, and another run's fork works in the
	// source's workspace, which only the person who started the source
	// run may leave implicit (anyone else names it to share it).
	Workspace string `json:"workspace,omitempty"`
	// Start executes the fork at once (with Message, if set; a fork at
	// the event that completes its source starts only with one). Without
	// it the fork is journaled paused (reason "forked", not started)
	// and waits for a resume; a restart does not execute it.
	Start bool `json:"start,omitempty"`
	// Message is a user message sent when the fork starts (needs Start).
	Message string `json:"message,omitempty"`
	// Limits, if set, replace the fork's limits (those its source had at
	// the fork point) when it starts (needs Start), as ResumeRun.Limits
	// does: each field given replaces that limit (zero: no limit), a
	// negative one is refused before anything is made. Journaled in the
	// fork's run.resumed.
	Limits *Limits `json:"limits,omitempty"`
}

// RewindRun is the body of POST /v1/runs/{id}/rewind.
type RewindRun struct {
	// To is an event of the run: its files are restored as the newest
	// workspace checkpoint at or before it recorded them.
	To int64 `json:"to"`
	// Force puts back also the files changed since that checkpoint both
	// by the run and outside it (by hand, by another run): without it
	// such a rewind is refused (409), naming them. Files changed only
	// outside the run are left as they are either way.
	Force bool `json:"force,omitempty"`
}

// Rewound is the answer to POST /v1/runs/{id}/rewind.
type Rewound struct {
	// Seq is the workspace.restored event journaled; To the event of the
	// checkpoint restored; Tree its snapshot and Before the snapshot of
	// the files it replaced.
	Seq    int64  `json:"seq"`
	To     int64  `json:"to"`
	Tree   string `json:"tree"`
	Before string `json:"before,omitempty"`
	// Files are the files the rewind changed ("A", "M" or "D" each);
	// MoreFiles counts those beyond the list.
	Files     []FileChange `json:"files,omitempty"`
	MoreFiles int          `json:"more_files,omitempty"`
	// Asked is the event asked for when the checkpoint restored is
	// another: the one at the end of its step, which also has the
	// effects of Later calls of that step, or the newest before it,
	// which lacks the effects of Missing calls.
	Asked   int64 `json:"asked,omitempty"`
	Later   int   `json:"later,omitempty"`
	Missing int   `json:"missing,omitempty"`
	// Undo is the event whose files are those the rewind replaced:
	// rewinding to it undoes the rewind.
	Undo int64 `json:"undo,omitempty"`
	// Kept are the files the rewind left as they were, though the
	// checkpoint has them otherwise: only hands outside the run (a
	// person, another run) changed them since it.
	Kept []string `json:"kept,omitempty"`
	// Note says what became of the run: it keeps its status and its
	// conversation; only its files went back (service.RewindNote).
	Note string `json:"note,omitempty"`
}

// RewindPlan is what a rewind to an event would change, before it is
// made: To, Asked, Later and Missing as [Rewound] would have them, and
// the files.
type RewindPlan struct {
	To      int64           `json:"to"`
	Asked   int64           `json:"asked,omitempty"`
	Later   int             `json:"later,omitempty"`
	Missing int             `json:"missing,omitempty"`
	Files   []PlannedChange `json:"files,omitempty"`
	// Kept are the files that differ from the checkpoint but that only
	// hands outside the run changed since it: the rewind leaves them.
	Kept []PlannedChange `json:"kept,omitempty"`
}

// PlannedChange is one file a rewind would change ("A", "M" or "D");
// Both is set when the run and hands outside it (a person, another run)
// both changed it since the checkpoint: the rewind puts it back only
// when forced, undoing both.
type PlannedChange struct {
	Path   string `json:"path"`
	Status string `json:"status"`
	Both   bool   `json:"both,omitempty"`
}

// FileChange is one file a rewind changed.
type FileChange struct {
	Path   string `json:"path"`
	Status string `json:"status"`
}

// RunDiff is the answer to GET /v1/runs/{id}/diff: the files a run
// changed, as keel runs diff prints them. Without at, the run's
// workspace now against the git commit it started on; with at, its
// first workspace checkpoint against its newest checkpoint at or before
// event at, events From and To. NoCheckpoint says the run has no
// checkpoint at or before at (Files is then empty).
type RunDiff struct {
	// From is the event of the run's first checkpoint compared (without
	// at: 0 when the run has none and is compared with its start commit
	// alone); To, with at, the newest checkpoint at or before it.
	From         int64      `json:"from,omitempty"`
	To           int64      `json:"to,omitempty"`
	NoCheckpoint bool       `json:"no_checkpoint,omitempty"`
	Files        []FileDiff `json:"files"`
	// Damaged, when set, says why the run's workspace cannot be compared
	// with its start commit (git cannot read it: the repository's
	// history was damaged, by the run say): Files are then what the run
	// changed by its own checkpoints, from event From to event To.
	Damaged string `json:"damaged,omitempty"`
	// Checkpoint, without at, is the event of the run's newest
	// checkpoint when the run was compared as it left its files there
	// (no process executes it); 0: its workspace as it is now.
	Checkpoint int64 `json:"checkpoint,omitempty"`
	// Later, without at, names the files that changed after the run (by
	// another run, by hand): Files show those the run changed as it left
	// them and leave out the others.
	Later []string `json:"later,omitempty"`
	// Before, without at, names the files that already differed from the
	// start commit when the run started (uncommitted or untracked) and
	// that the run left as they were: not its changes, not in Files.
	Before []string `json:"before,omitempty"`
	// Outside, without at, names the files that changed only while the
	// run was paused or waiting for a person (by a person, another run
	// or a rewind): not its changes, not in Files.
	Outside []string `json:"outside,omitempty"`
}

// FileDiff is one changed file of a RunDiff: Status "A", "M", "D" or
// "T" (a file that became a symbolic link, or the reverse);
// Patch its unified diff (with ---/+++ headers; empty when Binary), of
// Added and Removed lines.
type FileDiff struct {
	Path    string `json:"path"`
	Status  string `json:"status"`
	Binary  bool   `json:"binary,omitempty"`
	Patch   string `json:"patch,omitempty"`
	Added   int    `json:"added"`
	Removed int    `json:"removed"`
	// Denied is set for a path the run's policy denies ([paths] deny):
	// its content is not shown (Patch is empty).
	Denied bool `json:"denied,omitempty"`
	// Hidden is set for a file git ignores only by rules written since
	// the run started: git status does not show it.
	Hidden bool `json:"hidden,omitempty"`
	// Rewritten is set when the start commit's copy of the file no longer
	// matches its hash (the .git/objects of the workspace were rewritten
	// since): Patch shows the whole file as added.
	Rewritten bool `json:"rewritten,omitempty"`
	// Ignored is set for a file git does not show (the start's ignore
	// rules ignore it, or it is in the repository's .git directory) that
	// changed since the run started: Status A when it was created since,
	// else M; Patch shows the whole file as added lines when it runs on
	// its own (Autorun), and is empty for the others.
	Ignored bool `json:"ignored,omitempty"`
	// Files, when set, makes this entry a directory (Path ends in "/";
	// "./" for the top) standing for that many ignored files changed
	// since the run started, too many to list.
	Files int `json:"files,omitempty"`
	// Autorun says why the file runs on its own on a person's machine
	// (direnv, Python's start-up, git hooks, the editor, CI): "" for
	// other files.
	Autorun string `json:"autorun,omitempty"`
	// Link is the target of the file when it is a symbolic link now.
	Link string `json:"link,omitempty"`
	// Note says what else a reviewer must know: where a link points when
	// that is not a file the diff lists (into .git, an ignored path,
	// outside the workspace; Patch then shows the content it points to
	// when inside the workspace), NUL bytes a text file gained, a git
	// replace ref the run wrote.
	Note string `json:"note,omitempty"`
	// NULs counts the NUL bytes of a file Patch shows as text all the
	// same, each as ␀ (git calls it binary).
	NULs int `json:"nuls,omitempty"`
	// Later is set when the file changed again after the run (by another
	// run, by hand): Patch shows it as the run left it.
	Later bool `json:"later,omitempty"`
	// Outside is set for a file the run changed that also changed while
	// the run was paused or waiting (by a person or another run): Patch
	// includes that change too.
	Outside bool `json:"outside,omitempty"`
}

// Approval is a tool call waiting for a person's decision.
type Approval struct {
	RunID  string `json:"run_id"`
	CallID string `json:"call_id"`
	Tool   string `json:"tool"`
	// Arguments is the call's raw JSON arguments, as the model sent them
	// after validation.
	Arguments json.RawMessage `json:"arguments"`
	// Action is the exact action to approve, raw: the command line, the
	// URL, the tool and path.
	Action string `json:"action,omitempty"`
	// Reason is the policy's reason for asking.
	Reason string `json:"reason,omitempty"`
	// Parts are the parts of the call that asked, each with the rule
	// and reason (a bash command line's other parts were allowed).
	Parts []policy.Part `json:"parts,omitempty"`
	// Expires, when set, is the deadline after which Default (allow or
	// deny) applies.
	Expires *time.Time `json:"expires,omitempty"`
	Default string     `json:"default,omitempty"`
	// Expired is set in lists when the deadline has passed: Default
	// applies when the run next executes, or at once when someone tries
	// to decide.
	Expired bool `json:"expired,omitempty"`
	// Seq is the sequence number of the approval.requested event.
	Seq       int64     `json:"seq"`
	Requested time.Time `json:"requested"`
	// Task, Agent, OnBehalfOf, Workspace, Sandbox and CreatedBy describe
	// the run, for an inbox: what acts, for whom, on which directory of
	// the server, and who started it.
	Task       string `json:"task,omitempty"`
	Agent      string `json:"agent,omitempty"`
	OnBehalfOf string `json:"on_behalf_of,omitempty"`
	Workspace  string `json:"workspace,omitempty"`
	Sandbox    string `json:"sandbox,omitempty"`
	CreatedBy  string `json:"created_by,omitempty"`
}

// ProposedEdit is the answer to GET
// /v1/runs/{id}/approvals/{call}/diff: the change an edit_file or
// write_file call waiting for approval would make to its file as the
// run's file tools see it now (a path the run's policy denies is Denied,
// its content not read; the run's secrets are sealed). Problem, instead,
// says why the edit would fail, as the tool would. Both are empty for a
// call of another tool.
type ProposedEdit struct {
	Diff    *FileDiff `json:"diff,omitempty"`
	Problem string    `json:"problem,omitempty"`
}

// ApprovalList is the body of GET /v1/approvals.
type ApprovalList struct {
	Approvals []Approval `json:"approvals"`
}

// AuthWait is a tool call that waits for an authorization
// (auth.required): a grant of Provider for Agent, acting for User, with
// Scopes. It names no secret.
type AuthWait struct {
	RunID  string `json:"run_id"`
	CallID string `json:"call_id"`
	Tool   string `json:"tool"`
	// Provider and Issuer name the authorization server.
	Provider string   `json:"provider"`
	Issuer   string   `json:"issuer,omitempty"`
	Agent    string   `json:"agent"`
	User     string   `json:"user,omitempty"`
	Scopes   []string `json:"scopes,omitempty"`
	// Reason is "missing", "scope", "revoked" or "expired".
	Reason string `json:"reason"`
	// Resource is the URL the call wanted to reach (without its query).
	Resource  string    `json:"resource,omitempty"`
	Seq       int64     `json:"seq"`
	Requested time.Time `json:"requested"`
	Task      string    `json:"task,omitempty"`
}

// AuthWaitList is the body of GET /v1/auth/waits.
type AuthWaitList struct {
	Waits []AuthWait `json:"waits"`
}

// AuthStarted is the answer to POST /v1/runs/{id}/auth/{call}/connect:
// the authorization request to send the person to (authorization code
// with PKCE; its state is bound to the run and call, single use, and
// valid until Expires). The server's callback completes it.
type AuthStarted struct {
	URL         string    `json:"url"`
	Expires     time.Time `json:"expires"`
	RedirectURL string    `json:"redirect_url"`
	RunID       string    `json:"run_id"`
	CallID      string    `json:"call_id"`
	Provider    string    `json:"provider"`
	Agent       string    `json:"agent"`
	User        string    `json:"user,omitempty"`
	Scopes      []string  `json:"scopes,omitempty"`
}

// Decide is the body of POST .../approve and .../deny; it may be empty.
type Decide struct {
	// Reason is shown to the model with a denial, and journaled; a
	// denial needs one.
	Reason string `json:"reason,omitempty"`
	// Remember ("run" or "agent", approvals only) also allows matching
	// calls from now on, in this run or in every run of the agent: the
	// exact command that asked, or the word prefix in Prefix. "agent" is
	// refused for the shared demo agent (keel-demo).
	Remember string   `json:"remember,omitempty"`
	Prefix   []string `json:"prefix,omitempty"`
}

// Input is a question an MCP server asks a person during a run's call
// (elicitation): the call waits until it is answered.
type Input struct {
	RunID  string `json:"run_id"`
	ID     string `json:"id"`
	CallID string `json:"call_id,omitempty"`
	Tool   string `json:"tool,omitempty"`
	Server string `json:"server"`
	// Mode is "form" (answer with content matching Schema) or "url" (open
	// URL, then accept).
	Mode      string          `json:"mode"`
	Message   string          `json:"message"`
	Schema    json.RawMessage `json:"schema,omitempty"`
	URL       string          `json:"url,omitempty"`
	Seq       int64           `json:"seq"`
	Requested time.Time       `json:"requested"`
	Task      string          `json:"task,omitempty"`
}

// InputList is the body of GET /v1/inputs.
type InputList struct {
	Inputs []Input `json:"inputs"`
}

// AnswerInput is the body of POST /v1/runs/{id}/inputs/{input}/answer.
type AnswerInput struct {
	// Action is "accept", "decline" or "cancel".
	Action string `json:"action"`
	// Content is an accepted form's answer: a JSON object matching the
	// request's schema.
	Content json.RawMessage `json:"content,omitempty"`
}

// Agent is a principal runs execute as: an employee agent acting as
// itself, or an assistant agent acting on behalf of a user.
type Agent struct {
	Name        string    `json:"name"`
	Kind        string    `json:"kind"`
	Description string    `json:"description,omitempty"`
	Created     time.Time `json:"created"`
	CreatedBy   string    `json:"created_by,omitempty"`
	// Builtin marks an agent that exists without being created
	// (keel-cli, keel-demo).
	Builtin bool `json:"builtin,omitempty"`
	Revoked bool `json:"revoked,omitempty"`
	// RevokedAt, RevokedBy and RevokeReason are set for a revoked agent.
	RevokedAt    *time.Time `json:"revoked_at,omitempty"`
	RevokedBy    string     `json:"revoked_by,omitempty"`
	RevokeReason string     `json:"revoke_reason,omitempty"`
	// RestoredAt and RestoredBy are set for a built-in agent restored
	// after a revocation.
	RestoredAt *time.Time `json:"restored_at,omitempty"`
	RestoredBy string     `json:"restored_by,omitempty"`
	// Grants counts the agent's standing approvals.
	Grants int `json:"grants,omitempty"`
	// Connectors, when set, are the only MCP servers, databases and APIs
	// the agent's runs offer (absent: the server's; empty: none).
	Connectors *Connectors `json:"connectors,omitempty"`
}

// Connectors name the MCP servers, databases and APIs whose tools runs
// offer. An MCP or OpenAPI entry is the NAME of one of the server's (its
// config.toml) or, for an agent, NAME=SPEC: its own stdio command
// ("NAME=node /srv/mcp/server.js") or URL, or OpenAPI document. A SQL
// entry names one of the server's databases.
type Connectors struct {
	MCP     []string `json:"mcp,omitempty"`
	SQL     []string `json:"sql,omitempty"`
	OpenAPI []string `json:"openapi,omitempty"`
}

// AgentList is the body of GET /v1/agents.
type AgentList struct {
	Agents []Agent `json:"agents"`
}

// GrantList is the body of GET /v1/agents/{id}/grants and of the answer
// to POST /v1/agents/{id}/grants/{grant}/revoke: an agent's standing
// approvals (approvals remembered with remember "agent"), oldest first.
// Each grant's ID is what the revoke route takes.
type GrantList struct {
	Agent  string         `json:"agent"`
	Grants []policy.Grant `json:"grants"`
}

// CreateAgent is the body of POST /v1/agents.
type CreateAgent struct {
	Name string `json:"name"`
	// Kind is "employee" (acts as itself) or "assistant" (acts on behalf
	// of a user).
	Kind        string `json:"kind"`
	Description string `json:"description,omitempty"`
	// Connectors, when set, are the agent's only connectors (see
	// [Agent.Connectors]).
	Connectors *Connectors `json:"connectors,omitempty"`
}

// Revoke is the body of POST .../revoke and of POST
// /v1/agents/{id}/restore: why; it may be empty.
type Revoke struct {
	Reason string `json:"reason,omitempty"`
}

// VerifyAudit is the body of POST /v1/audit/verify; it may be empty.
type VerifyAudit struct {
	// Runs limits the check to these journals; empty checks every one.
	// Each is a run as every route names it (its id, a unique prefix,
	// the web UI's short form) or a system stream by its whole name
	// (_keel.identity): one that names none is refused (404, 400 when
	// ambiguous) before anything is checked.
	Runs []string `json:"runs,omitempty"`
}

// PolicyCheck is the body of POST /v1/policy/check: one tool call to
// decide by the server's policy, as keel policy check decides one by a
// policy on its machine. Nothing runs.
type PolicyCheck struct {
	// Tool is the tool's name; "" means bash.
	Tool string `json:"tool,omitempty"`
	// Arguments are the call's, a JSON object.
	Arguments json.RawMessage `json:"arguments"`
	// Paths are the workspace paths a file tool touches; empty: the
	// arguments' path.
	Paths []string `json:"paths,omitempty"`
	// Agent makes the call ("" the local agent) on behalf of OnBehalfOf.
	Agent      string `json:"agent,omitempty"`
	OnBehalfOf string `json:"on_behalf_of,omitempty"`
	// Network is the run's host allowlist; Sandbox its backend ("" the
	// server's); MountPath its mount path ("" /workspace); Workspace its
	// directory on the server.
	Network   []string `json:"network,omitempty"`
	Sandbox   string   `json:"sandbox,omitempty"`
	MountPath string   `json:"mount_path,omitempty"`
	Workspace string   `json:"workspace,omitempty"`
	// SecretEnv names the secret variables the run's sandbox holds.
	SecretEnv []string `json:"secret_env,omitempty"`
	// Untrusted says what brought untrusted input into the run before
	// the call; Unattended, that nobody attends the run.
	Untrusted  string `json:"untrusted,omitempty"`
	Unattended bool   `json:"unattended,omitempty"`
}

// PolicyDecision answers POST /v1/policy/check: the server's policy
// (its name, the SHA-256 of its source, its number of rules) and its
// decision on the call.
type PolicyDecision struct {
	Policy string `json:"policy"`
	SHA256 string `json:"sha256"`
	Rules  int    `json:"rules"`
	policy.Decision
}

// AuditReport is the result of an audit verification: every journal's
// hash chain checked from its first event, against the store's index,
// and folded.
type AuditReport struct {
	OK bool `json:"ok"`
	// Streams counts the journals checked and Events their events.
	Streams int   `json:"streams"`
	Events  int64 `json:"events"`
	// Problems lists every journal that failed, with its first bad event.
	Problems []AuditProblem `json:"problems,omitempty"`
	// Journals has one entry per journal checked.
	Journals []AuditJournal `json:"journals,omitempty"`
}

// AuditProblem is one journal that failed verification.
type AuditProblem struct {
	Stream string `json:"stream"`
	Seq    int64  `json:"seq"`
	Reason string `json:"reason"`
}

// AuditJournal is the audit of one journal.
type AuditJournal struct {
	ID string `json:"id"`
	// Kind is "run", or "identity" for a system stream.
	Kind   string `json:"kind"`
	Events int    `json:"events"`
	OK     bool   `json:"ok"`
	// FirstBad is the first bad event (0 when OK).
	FirstBad int64  `json:"first_bad,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// Status is a run's folded status.
	Status string `json:"status,omitempty"`
	// Head is the hash of the newest event.
	Head string `json:"head,omitempty"`
}

// Scopes of API tokens. A token with [ScopeAdmin] may do everything;
// [ScopeRunsWrite] and [ScopeApprovalsWrite] include [ScopeRunsRead] (a
// person who starts runs or decides approvals sees what they act on).
// [ScopeMetricsRead] reads only keel serve's Prometheus metrics
// (GET /metrics), for a scraper's token.
const (
	ScopeRunsRead       = "runs:read"
	ScopeRunsWrite      = "runs:write"
	ScopeApprovalsWrite = "approvals:write"
	ScopeMetricsRead    = "metrics:read"
	ScopeAdmin          = "admin"
)

// Token describes an API token (never its secret).
type Token struct {
	ID     string   `json:"id"`
	Name   string   `json:"name"`
	Scopes []string `json:"scopes"`
	// Agents are the agents runs created with the token may act as
	// (admin tokens may act as any).
	Agents []string `json:"agents,omitempty"`
	// CreatedBy is the name of the person (or "keel serve") who created it.
	CreatedBy string     `json:"created_by,omitempty"`
	Created   time.Time  `json:"created"`
	Revoked   *time.Time `json:"revoked,omitempty"`
}

// TokenList is the body of GET /v1/tokens.
type TokenList struct {
	Tokens []Token `json:"tokens"`
}

// CreateToken is the body of POST /v1/tokens.
type CreateToken struct {
	// Name is the person or system the token is for; it is recorded as
	// "who" for every action taken with the token. It may not contain
	// control or invisible characters, nor start with "keel." or "keel-"
	// (Keel's own principals).
	Name   string   `json:"name"`
	Scopes []string `json:"scopes"`
	// Agents binds the token to these agents: its runs may act only as
	// them. A runs:write token without agents can start only the demo.
	Agents []string `json:"agents,omitempty"`
}

// NewToken is the response to POST /v1/tokens: the only time the secret
// is shown.
type NewToken struct {
	Token
	Secret string `json:"secret"`
}

// Whoami is the body of GET /v1/whoami: the caller's token.
type Whoami struct {
	Token
}

// Delta is one message "event: delta" of a run's event stream asked for
// with ?deltas=true: what an executing model call (or, with CallID, a
// running tool call) has produced that is not journaled yet. Deltas are
// ephemeral: they carry no "id:" and are never stored or replayed. A
// stream opened (or reopened) during a model call starts with one delta
// at Offset 0 holding the text so far; a reader that falls behind gets
// what it missed in one larger delta. The journaled model.responded
// event that ends the call is the record: a reader that has an event
// after After has everything the delta says.
type Delta struct {
	// RunID is the run.
	RunID string `json:"run_id"`
	// After is the run's newest event when the model call started: the
	// call's own event comes after it. A delta whose After is older than
	// an event the reader has is stale and is to be ignored.
	After int64 `json:"after"`
	// ModelCall is the call's ordinal in the run (1-based, counting
	// model.responded and model.failed events).
	ModelCall int `json:"model_call"`
	// Offset is the byte offset of Text in the call's text so far; 0
	// starts it (again: a reader that reconnected, or a call repeated
	// after a broken stream, starts over).
	Offset int `json:"offset"`
	// Text is the next piece of the model's answer text.
	Text string `json:"text,omitempty"`
	// Tool, if set, is the name of a tool call the model started writing.
	Tool string `json:"tool,omitempty"`
	// Retry, if set, says the model request is sent again and why
	// ("rate limited (HTTP 429): retrying in 20s (attempt 2)").
	Retry string `json:"retry,omitempty"`
	// CallID, if set, makes this delta a piece of that tool call's output
	// as its command prints it (Output): Offset and End are byte offsets
	// in the call's whole output. Output is lossy: the server keeps at
	// least the last 16 KiB of each running call, so a reader that fell
	// behind (or opened the stream late) gets the tail, with an Offset
	// past the bytes it had. The call's tool.finished is the record.
	CallID string `json:"call_id,omitempty"`
	// Output is the next piece of the call's output (CallID).
	Output string `json:"output,omitempty"`
	// End is the end offset of Text or Output (Offset plus its bytes).
	End int `json:"end,omitempty"`
}
