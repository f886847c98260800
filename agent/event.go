package agent

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/tool"
)

// The payloads below are the JSON bodies of journal events. They are a
// stored format: fields may be added, never renamed or removed.

// RunCreated is the payload of journal.RunCreated: everything the step
// function needs to decide, fixed at creation so that a replay of the
// journal yields the same decisions.
type RunCreated struct {
	Task   string `json:"task"`
	System string `json:"system"`
	// Model is the model spec string ("openai:gpt-4o", "replay:PATH").
	Model string `json:"model"`
	// Live, when Model is a replay, is the model spec that answers from
	// the first request that leaves the recording on (recorded, then
	// live from the first divergence: a tool result other than the
	// recorded one, or the recording exhausted); "" for none.
	Live string `json:"live,omitempty"`
	// Tools are the tools offered, sorted by name.
	Tools  []ToolInfo `json:"tools"`
	Limits Limits     `json:"limits"`
	// CompletionMarker, when non-empty, completes the run when a tool
	// result's output starts with this line; the rest of that output is
	// the run's final output.
	CompletionMarker string `json:"completion_marker,omitempty"`
	// MaxInvalidCalls stops the run after this many consecutive model
	// turns whose tool calls were all invalid (0: DefaultMaxInvalidCalls).
	MaxInvalidCalls int `json:"max_invalid_calls,omitempty"`
	// Workspace is the host directory; MountPath where the sandbox sees it.
	Workspace string `json:"workspace"`
	MountPath string `json:"mount_path"`
	// Sandbox names the backend ("linux", "none").
	Sandbox string `json:"sandbox,omitempty"`
	// StateDir is the host directory of Keel's own files for the run
	// (whole outputs, kernel records), outside the workspace and shown
	// read-only at the same path in the sandbox (tool.Workspace.SetState);
	// empty in runs journaled before it existed, whose files are in the
	// workspace's .keel directory.
	StateDir string `json:"state_dir,omitempty"`
	// Env lists KEY=VALUE entries passed into the sandbox. They are
	// stored so that a resume recreates the same environment; do not pass
	// secrets this way.
	Env []string `json:"env,omitempty"`
	// SecretEnv names variables of the sandbox's environment whose
	// values are secret: the executing process supplies them
	// ([Wiring].Secrets), they are never journaled, the gate scans
	// calls for them and hides them from results.
	SecretEnv []string `json:"secret_env,omitempty"`
	// ForeignSecrets marks a run whose creator may not hold the values
	// of its SecretEnv: on a team server, the operator offered them
	// (keel serve --secret-env) and a token without the admin scope
	// created (or forked) the run. Its output (events, the API, the web
	// UI) then counts as a way out for the gate (policy.Flow.OutputOut).
	// Children inherit it.
	ForeignSecrets bool `json:"foreign_secrets,omitempty"`
	// SecretHosts are secrets the sandbox never holds: its environment
	// has a placeholder under each name, which the egress proxy replaces
	// by the value (supplied by the executing process, like SecretEnv's)
	// only in requests to the secret's host.
	SecretHosts []SecretHost `json:"secret_hosts,omitempty"`
	// Setup is a script run in the sandbox before the first model call.
	Setup string `json:"setup,omitempty"`
	// SetupNetwork lists the hosts the setup script may reach (its own
	// allowlist, separate from the agent phase's Network).
	SetupNetwork []string `json:"setup_network,omitempty"`
	// SetupTimeout bounds the setup script's wall time; 0 means
	// [SetupTimeout] (30 minutes).
	SetupTimeout Duration `json:"setup_timeout,omitempty"`
	// SandboxLimits are the resource limits of every command.
	SandboxLimits sandbox.Limits `json:"sandbox_limits"`
	// Principal is the agent the run executes as; OnBehalfOf the user it
	// acts for, if any.
	Principal  string `json:"principal,omitempty"`
	OnBehalfOf string `json:"on_behalf_of,omitempty"`
	// Policy is the policy the run's calls are decided by (nil: the
	// executor's ExecParams.Policy); see [PolicyRef].
	Policy *PolicyRef `json:"policy,omitempty"`
	// Approval holds the run's approval timeout and default decision
	// (nil: approvals wait as long as it takes).
	Approval *ApprovalSettings `json:"approval,omitempty"`
	// Network lists the hosts the run may reach (empty: none).
	Network []string `json:"network,omitempty"`
	// Labels are free-form user annotations.
	Labels map[string]string `json:"labels,omitempty"`
	// Memory is text from memory files (AGENTS.md, KEEL.md) appended to
	// System in every request; the caller reads and caps the files.
	Memory string `json:"memory,omitempty"`
	// MemoryUntrusted says why memory files in Memory are untrusted (an
	// agent run wrote them after untrusted input, or a run another API
	// token created did); "" when none is. The run reads untrusted input
	// from its start.
	MemoryUntrusted string `json:"memory_untrusted,omitempty"`
	// TaskUntrusted says why the task is untrusted: a child's task was
	// written by a parent that had read untrusted input, which may have
	// dictated it; "" when it is not. The run reads untrusted input from
	// its start, and its own children inherit the mark.
	TaskUntrusted string `json:"task_untrusted,omitempty"`
	// Recall is the memory offered to the run from the memory stores of
	// its scopes (see [Recall]); nil when none was.
	Recall *Recall `json:"recall,omitempty"`
	// Skills are the skills offered to the run (see [Skills]); nil when
	// none was.
	Skills *Skills `json:"skills,omitempty"`
	// Context configures the context window and compaction (see
	// docs/context.md); nil means no compaction.
	Context *ContextConfig `json:"context,omitempty"`
	// FormatError, when non-empty, puts the run in text-action mode: the
	// model's actions are code blocks in its text (see model/codeact), an
	// assistant message without any is a format error, and this text is
	// sent back to the model as a user message. Such a run completes only
	// through CompletionMarker.
	FormatError string `json:"format_error,omitempty"`
	// Health configures loop detection; nil means the defaults.
	Health *HealthConfig `json:"health,omitempty"`
	// MCP lists the MCP servers whose tools the run offers (see
	// [MCPServer]); a resume connects to the same servers.
	MCP []MCPServer `json:"mcp,omitempty"`
	// SQL lists the databases of the run's sql_query tools (connection
	// strings without their passwords).
	SQL []SQLDatabase `json:"sql,omitempty"`
	// OpenAPI lists the APIs whose operations the run offers as tools.
	OpenAPI []OpenAPI `json:"openapi,omitempty"`
	// Settings are the run's execution settings (timeouts, concurrency,
	// result size, model retries); nil, in journals written before they
	// were recorded, means [DefaultSettings].
	Settings *Settings `json:"settings,omitempty"`
	// Agents are the definitions the run's children can be made from
	// (.keel/agents/NAME.md), fixed here; children inherit them.
	Agents []AgentDef `json:"agents,omitempty"`
	// Parent links a child run to the run and call that spawned it
	// (nil: a root run); see docs/teams.md.
	Parent *ParentLink `json:"parent,omitempty"`
	// Git is the state of the workspace's git repository when the run
	// was created (nil: not a git repository, or not recorded); keel
	// runs diff compares the workspace with it.
	Git *GitStart `json:"git,omitempty"`
}

// GitStart records where a run started in a git workspace.
type GitStart struct {
	// Commit is the HEAD commit.
	Commit string `json:"commit"`
	// Dirty lists the tracked files that differed from Commit (changed,
	// staged or deleted) when the run started: a diff against Commit
	// includes their earlier changes too.
	Dirty []string `json:"dirty,omitempty"`
	// Exclude is the content of the repository's .git/info/exclude at
	// the start (a run can write that file): the diff of the run ignores
	// only what the start's rules ignore. Absent in runs journaled
	// before it was recorded.
	Exclude *string `json:"exclude,omitempty"`
	// Origin is where the repository was cloned from (its remote
	// "origin", without credentials): where Commit can be found again
	// once the workspace is gone (keel runs replay of an evaluation's
	// trial). Absent when it had none, and in runs journaled before it
	// was recorded.
	Origin string `json:"origin,omitempty"`
	// Time is when Commit was read, as the run started: a file git
	// ignores whose change time is later was written since, and the
	// run's diff lists it (checkpoint.Base.Since). Absent in runs
	// journaled before it was recorded.
	Time time.Time `json:"time,omitzero"`
	// Since is the workspace's file-system clock once the start was read
	// (checkpoint.StartClock), exact: a file whose change time is not
	// before it was written since, and one written before has an
	// earlier change time. Absent when it could not be read, and in runs
	// journaled before it was recorded: Time, less a slack, then.
	Since time.Time `json:"since,omitzero"`
	// Refs are the repository's refs then (ref name: object;
	// checkpoint.Refs): the run's diff lists those it made, moved or
	// deleted, with their commits, even when the work tree ends as it
	// started. RefsAll says they are of every kind (branches, tags, the
	// stash, remote-tracking refs, notes...); without it, only branches
	// and tags (too many refs, and runs journaled before it was
	// recorded). Refs is absent with too many branches and tags, and in
	// runs journaled before it was recorded.
	Refs    map[string]string `json:"refs,omitempty"`
	RefsAll bool              `json:"refs_all,omitempty"`
	// Control is the sha256 (hex) of each file of the repository's .git
	// directory that makes git run programs (config, hooks, a rebase's
	// todo) then, by its path under that directory: the run's diff lists
	// those whose content differs (checkpoint.GitControl). Absent when
	// the .git directory is not in the workspace, and in runs journaled
	// before it was recorded (their diff compares change times with
	// Time).
	Control map[string]string `json:"control,omitempty"`
}

// ToolInfo is a tool as recorded at run creation.
type ToolInfo struct {
	model.ToolSpec
	Effect     string `json:"effect"`
	Idempotent bool   `json:"idempotent,omitempty"`
	// Server names the MCP server or connector of the tool ("" for
	// built-ins); Pin is the SHA-256 of the tool's definition as the
	// server gave it (name, description, input schema), against which
	// later definitions are checked.
	Server string `json:"server,omitempty"`
	Pin    string `json:"pin,omitempty"`
}

// SQLDatabase is a database of a run's NAME__sql_query tool as journaled
// in run.created. DSN never holds a password: it comes from the
// configuration, PGPASSWORD or ~/.pgpass when the run executes.
type SQLDatabase struct {
	Name        string `json:"name"`
	DSN         string `json:"dsn"`
	AllowWrites bool   `json:"allow_writes,omitempty"`
	MaxRows     int    `json:"max_rows,omitempty"`
	// AsUser: statements run with the connection string of the user the
	// run acts for (the vault secret sql:NAME of its agent and user).
	AsUser bool `json:"as_user,omitempty"`
}

// OpenAPI is an API of a run (an OpenAPI 3 document) as journaled in
// run.created. Its calls' tokens come from the vault (Provider); TokenEnv
// names the environment variable of a static bearer token for an API no
// provider covers, never the token.
type OpenAPI struct {
	Name           string   `json:"name"`
	Document       string   `json:"document"`
	BaseURL        string   `json:"base_url,omitempty"`
	Tags           []string `json:"tags,omitempty"`
	Operations     []string `json:"operations,omitempty"`
	TokenEnv       string   `json:"token_env,omitempty"`
	WritesByPolicy bool     `json:"writes_by_policy,omitempty"`
	// Provider names the vault provider whose grant authorizes the
	// calls ("" means the provider whose resources cover the URL).
	Provider string `json:"provider,omitempty"`
}

// MCPServer is an MCP server of a run as journaled in run.created: how to
// reach it, never a secret (credentials come from the vault at run time).
type MCPServer struct {
	Name string `json:"name"`
	// Command is the argv of a stdio server, started inside the run's
	// sandbox; URL the endpoint of a streamable-HTTP server, reached
	// from Keel through the run's network allowlist. One of the two.
	Command []string `json:"command,omitempty"`
	URL     string   `json:"url,omitempty"`
	// Env adds KEY=VALUE entries to a stdio server's environment.
	Env []string `json:"env,omitempty"`
	// SecretEnv names the run's secret variables (RunCreated.SecretEnv,
	// SecretHosts) a stdio server gets in its environment: only those
	// the operator gave it. The others are not in its environment: a
	// server is code from the workspace, which a run may have changed,
	// and it runs before any call is decided.
	SecretEnv []string `json:"secret_env,omitempty"`
	// Tools, when non-empty, are the only tools of the server offered
	// (by the server's names).
	Tools []string `json:"tools,omitempty"`
	// ReadOnly are host paths a stdio server needs to see inside the
	// sandbox (its installation), bound read-only.
	ReadOnly []string `json:"read_only,omitempty"`
	// Files are the SHA-256 digests of what a stdio server runs from the
	// workspace (a script, the modules beside it, node_modules, a
	// virtual environment: by root, see tool/mcp), taken when Keel
	// first started it for the run. A later execution does not start it
	// with other files before a person approves them.
	Files map[string]string `json:"files,omitempty"`
	// FileDigests are the digests of each of those files, when there are
	// at most 200: a question about changed files names them.
	FileDigests map[string]string `json:"file_digests,omitempty"`
}

// Limits stop a run. Zero fields mean no limit.
type Limits struct {
	// MaxSteps bounds the number of model calls.
	MaxSteps int `json:"max_steps,omitempty"`
	// MaxTokens bounds input+output tokens summed over all model calls.
	MaxTokens int64 `json:"max_tokens,omitempty"`
	// MaxCost bounds the summed model cost in US dollars.
	MaxCost float64 `json:"max_cost,omitempty"`
	// Timeout bounds the wall time of one execution of the run (a resume
	// starts a new one).
	Timeout Duration `json:"timeout,omitempty"`
	// MaxToolCalls bounds the tool calls that run (started; a re-run of
	// an interrupted call counts once).
	MaxToolCalls int `json:"max_tool_calls,omitempty"`
	// MaxChildren bounds the child runs of the run's whole subtree
	// (children, their children...); MaxDepth the levels of children
	// below the run. A child gets a slice of each (docs/teams.md).
	MaxChildren int `json:"max_children,omitempty"`
	MaxDepth    int `json:"max_depth,omitempty"`
}

// Duration is a time.Duration that encodes as a Go duration string in
// JSON ("1m30s").
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON implements json.Unmarshaler; it accepts a duration string
// or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = Duration(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("agent: duration must be a string like \"90s\": %w", err)
	}
	*d = Duration(n)
	return nil
}

// SetupFinished is the payload of journal.SetupFinished.
type SetupFinished struct {
	ExitCode int  `json:"exit_code"`
	TimedOut bool `json:"timed_out,omitempty"`
	// Limit names a resource limit the script hit, if any.
	Limit      string `json:"limit,omitempty"`
	Output     string `json:"output"`
	Artifact   string `json:"artifact,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	// Files are the SHA-256 digests of what the script runs from the
	// workspace, by root (a file, or a directory's modules: see
	// tool/codefiles), as the script left them: what the next run's
	// setup is held against. Empty when it runs none or Keel did not
	// compare them.
	Files map[string]string `json:"files,omitempty"`
}

// SandboxEgress is the payload of journal.SandboxEgress: one decision of
// the sandbox's egress proxy.
type SandboxEgress struct {
	// Phase is "setup" or "agent".
	Phase   string `json:"phase"`
	Host    string `json:"host"`
	Port    int    `json:"port"`
	Allowed bool   `json:"allowed"`
	Reason  string `json:"reason,omitempty"`
	// Method, Path (with its query, secrets hidden) and the byte counts
	// of a plain-HTTP request's body and response; a CONNECT tunnel has
	// Method "CONNECT" and no path (its bytes are opaque).
	Method   string `json:"method,omitempty"`
	Path     string `json:"path,omitempty"`
	BytesOut int64  `json:"bytes_out,omitempty"`
	BytesIn  int64  `json:"bytes_in,omitempty"`
	// Substituted names the secrets for hosts (RunCreated.SecretHosts)
	// whose values the proxy put in place of their placeholders in this
	// request; never the values. A request inside an HTTPS tunnel the
	// proxy opened for such a secret has a method and path too.
	Substituted []string `json:"substituted,omitempty"`
}

// SandboxQuarantine is the payload of journal.SandboxQuarantine: a file
// the sandbox's git guard moved out of the workspace's way because host
// git would have run code from it.
type SandboxQuarantine struct {
	Path    string `json:"path"`
	MovedTo string `json:"moved_to,omitempty"`
	// Action is what the guard did: "moved", "removed", "made readable"
	// (a directory it could not read got its owner's permissions back
	// and was checked), or "" with Error set.
	Action string `json:"action,omitempty"`
	Reason string `json:"reason"`
	// Error is set when the file could be neither moved nor removed.
	Error string `json:"error,omitempty"`
}

// ModelResponded is the payload of journal.ModelResponded.
type ModelResponded struct {
	Message model.Message `json:"message"`
	Usage   model.Usage   `json:"usage"`
	// Cost is this call's cost in US dollars (0 when the price is unknown).
	Cost       float64 `json:"cost"`
	Model      string  `json:"model,omitempty"`
	ResponseID string  `json:"response_id,omitempty"`
	StopReason string  `json:"stop_reason,omitempty"`
	DurationMS int64   `json:"duration_ms"`
	// EstimatedInputTokens is Keel's estimate of the request's prompt
	// tokens (see [EstimateRequest]), to compare with Usage.InputTokens.
	EstimatedInputTokens int64 `json:"estimated_input_tokens,omitempty"`
	// UsageEstimated is set when the provider reported no usage and
	// Usage (and so Cost) is Keel's estimate: EstimatedInputTokens in,
	// and the response's own estimate out.
	UsageEstimated bool `json:"usage_estimated,omitempty"`
	// MemoryUsed lists the offered memory entries (RunCreated.Recall)
	// this response used.
	MemoryUsed []MemoryUse `json:"memory_used,omitempty"`
}

// ModelFailed is the payload of journal.ModelFailed.
type ModelFailed struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	// ResponseBytes is set when the response was dropped for being over
	// MaxResponseBytes: its size in bytes.
	ResponseBytes int64 `json:"response_bytes,omitempty"`
}

// GateDecided is the payload of journal.GateDecided.
type GateDecided struct {
	CallID string `json:"call_id"`
	Tool   string `json:"tool"`
	policy.Decision
	// Paths are the resolved workspace paths the decision covered.
	Paths []string `json:"paths,omitempty"`
	// Credential is the credential the call would use, as the policy saw
	// it (no secret: provider, resource, method, scopes).
	Credential *policy.CredentialUse `json:"credential,omitempty"`
}

// ApprovalRequested is the payload of journal.ApprovalRequested.
type ApprovalRequested struct {
	CallID    string          `json:"call_id"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Reason    string          `json:"reason,omitempty"`
	// Action is the exact action to approve, raw: the command line, the
	// URL, the tool and path.
	Action string `json:"action,omitempty"`
	// Parts are the parts of the call that asked (a bash command line's
	// other parts were allowed).
	Parts []policy.Part `json:"parts,omitempty"`
	// Expires, when set, is the deadline after which Default applies.
	Expires *time.Time    `json:"expires,omitempty"`
	Default policy.Effect `json:"default,omitempty"`
	// State is what the call would change as it was when the approval
	// was asked (tool.Tool.State: a file write's file digest). An
	// approved call whose target no longer matches it does not run.
	State string `json:"state,omitempty"`
}

// ApprovalResolved is the payload of journal.ApprovalResolved.
type ApprovalResolved struct {
	CallID   string        `json:"call_id"`
	Decision policy.Effect `json:"decision"` // allow or deny
	By       string        `json:"by,omitempty"`
	// Token is the id of the API token the person decided with, when the
	// decision came through the team server (By is the token's name).
	Token    string `json:"token,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Remember string `json:"remember,omitempty"`
	// Prefix is the word prefix a person stated to remember (with
	// Remember); Grants the remembered approvals this decision made.
	Prefix []string       `json:"prefix,omitempty"`
	Grants []policy.Grant `json:"grants,omitempty"`
}

// ToolStarted is the payload of journal.ToolStarted, appended before the
// tool runs.
type ToolStarted struct {
	CallID    string          `json:"call_id"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	// Attempt is 1 for the first run of a call, 2 for a re-run of an
	// interrupted idempotent call, and so on.
	Attempt int `json:"attempt,omitempty"`
}

// ToolFinished is the payload of journal.ToolFinished: the one result of a
// tool call, real or synthetic.
type ToolFinished struct {
	CallID string `json:"call_id"`
	Tool   string `json:"tool"`
	tool.Result
	DurationMS int64 `json:"duration_ms"`
	// Synthetic marks a result the runtime wrote without running the tool
	// (invalid call, denied, interrupted, canceled).
	Synthetic bool `json:"synthetic,omitempty"`
	// Label is the result's information-flow label when it is untrusted
	// or private (nil: trusted and public); see [DataLabel].
	Label *DataLabel `json:"label,omitempty"`
}

// RunEnded is the payload of journal.RunCompleted, RunFailed, RunCanceled
// and RunPaused.
type RunEnded struct {
	// Reason is a short machine-readable cause, one of the Reason
	// constants ([ReasonAnswer], [ReasonMaxSteps], [ReasonApproval] ...).
	Reason string `json:"reason"`
	// Message explains the reason to a person.
	Message string `json:"message,omitempty"`
	// Output is the run's final answer or submission (completed runs).
	Output string `json:"output,omitempty"`
	// By and Token name the person who stopped the run (a cancel) and
	// the id of the API token they used, when it came through the team
	// server.
	By    string `json:"by,omitempty"`
	Token string `json:"token,omitempty"`
	// RetryAt, for a run that failed because the provider limited its
	// rate beyond the retries, is when the provider said it would take
	// a request again (its Retry-After): the run can be resumed then.
	RetryAt *time.Time `json:"retry_at,omitempty"`
}

// RunResumed is the payload of journal.RunResumed.
type RunResumed struct {
	// Interrupted lists calls found started but unfinished.
	Interrupted []string `json:"interrupted,omitempty"`
	Model       string   `json:"model,omitempty"`
	// ContextWindow, when positive, replaces the run's context window
	// from here on (in tokens).
	ContextWindow int `json:"context_window,omitempty"`
	// Handoff asks for a handoff: the next step continues in a fresh
	// context from a summary and the workspace notes.
	Handoff bool `json:"handoff,omitempty"`
	// FollowUp marks the continuation of a completed run: a person's
	// user.message follows at once, and the run goes on from it.
	FollowUp bool `json:"follow_up,omitempty"`
	// Limits, when set, replace the run's limits from here on (a person
	// raising --max-steps to let a stopped run continue).
	Limits *Limits `json:"limits,omitempty"`
	// Settings, when set, replace the run's execution settings from here
	// on (a person passing --command-timeout to a resume); see
	// [Settings].
	Settings *Settings `json:"settings,omitempty"`
	// By and Token name the person who asked for this execution and the
	// id of the API token they used, when it came through the team
	// server (see [ExecParams].By).
	By    string `json:"by,omitempty"`
	Token string `json:"token,omitempty"`
}

// UserMessage is the payload of journal.UserMessage: a message from a
// person added to the conversation (for example "continue").
type UserMessage struct {
	Content string `json:"content"`
	// Source is empty for a person's message, or names the part of Keel
	// that wrote it: "keel.health" (a loop nudge), "keel.format" (a
	// text-action format error), "keel.output" (a response cut at the
	// output-token limit, or empty), "keel.limit" (a response over
	// MaxResponseBytes).
	Source string `json:"source,omitempty"`
	// By and Token name the person who wrote a message sent through the
	// team server and the id of their API token.
	By    string `json:"by,omitempty"`
	Token string `json:"token,omitempty"`
}

// WorkspaceCheckpoint is the payload of journal.WorkspaceCheckpoint: the
// workspace's files after the events before it, stored as a git tree in
// Keel's checkpoint store (docs/checkpoints.md). Executions journal one
// when they start and after each batch of tool calls that changed a
// file.
type WorkspaceCheckpoint struct {
	// Tree is the snapshot's git tree id in Store; Commit the commit
	// that keeps it in the run's ref (refs/keel/runs/RUN).
	Tree   string `json:"tree"`
	Commit string `json:"commit,omitempty"`
	// Store is the host directory of the checkpoint store.
	Store string `json:"store"`
	// Files are the files changed since the run's previous snapshot (at
	// most [MaxCheckpointFiles]; MoreFiles counts the rest); the first
	// snapshot of a run lists none.
	Files     []FileChange `json:"files,omitempty"`
	MoreFiles int          `json:"more_files,omitempty"`
	// DurationMS is how long the snapshot took.
	DurationMS int64 `json:"duration_ms"`
	// Unfinished is the workspace.restoring of a rewind that did not
	// finish (cut short by a crash or a failed write): this checkpoint,
	// the next of the files after it, records them as they are instead.
	Unfinished int64 `json:"unfinished_rewind,omitempty"`
}

// MaxCheckpointFiles bounds the files listed in a checkpoint event.
const MaxCheckpointFiles = 200

// FileChange is one changed file of a checkpoint: its path in the
// workspace and "A" (added), "M" (modified) or "D" (deleted).
type FileChange struct {
	Path   string `json:"path"`
	Status string `json:"status"`
}

// WorkspaceRestored is the payload of journal.WorkspaceRestored: the
// workspace's files were put back as the checkpoint of event To had them
// (keel runs rewind, or the start of a fork). The conversation is not
// changed.
type WorkspaceRestored struct {
	// To is the event of the checkpoint restored (in a fork: of the
	// source run, whose events the fork copied).
	To   int64  `json:"to"`
	Tree string `json:"tree"`
	// Before is the snapshot taken just before the restore (the files it
	// replaced; restoring it undoes the rewind).
	Before string `json:"before,omitempty"`
	Commit string `json:"commit,omitempty"`
	Store  string `json:"store"`
	// Files are the files the restore changed.
	Files     []FileChange `json:"files,omitempty"`
	MoreFiles int          `json:"more_files,omitempty"`
	// By and Token name who rewound (and their API token on a server).
	By    string `json:"by,omitempty"`
	Token string `json:"token,omitempty"`
	// Asked is the event a rewind was asked for, when its checkpoint is
	// another (To): the checkpoint journaled at the end of the step of a
	// tool.finished, which has that call's effect (and those of Later
	// calls of its step that finished after it), or the newest one
	// before it, which lacks the effects of Missing calls.
	Asked   int64 `json:"asked,omitempty"`
	Later   int   `json:"later,omitempty"`
	Missing int   `json:"missing,omitempty"`
	// Kept are the files a rewind left as they were, though the
	// checkpoint has them otherwise: only hands outside the run (a
	// person, another run) changed them since it.
	Kept []string `json:"kept,omitempty"`
	// Recovered is the workspace.restoring of a rewind cut short after
	// it wrote the files but before it journaled this event: the next
	// snapshot found the files as the rewind left them and journaled
	// it then.
	Recovered int64 `json:"recovered,omitempty"`
}

// WorkspaceRestoring is the payload of journal.WorkspaceRestoring: a
// rewind's intent, journaled before it writes any file (as tool.started
// is before a call runs). The fields are those of the
// [WorkspaceRestored] that follows when the files are written (Tree:
// the files it writes, Before: those it replaces). A crash or a failed
// write between the two leaves the intent open ([State.Restoring]):
// the next snapshot of the files closes it, with that
// workspace.restored (Recovered) when the files are the rewind's, else
// with a workspace.checkpoint that says it did not finish
// (Unfinished).
type WorkspaceRestoring WorkspaceRestored

func marshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		// Payload types are plain structs; failure is a programmer error.
		panic(fmt.Sprintf("agent: marshal %T: %v", v, err))
	}
	return b
}
