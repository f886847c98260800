package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/demo"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/egress"
	"github.com/keel-run/keel/server/api"
)

// CreateRun is a request to create a run: what any caller may ask (the
// API's request, which the web UI's form, Keel's MCP tools and the remote
// command line send too), and what only the command line on the
// journal's machine adds ([LocalRun]).
type CreateRun struct {
	api.CreateRun
	// ID, if set, is the new run's id: a caller that may retry a creation
	// (a schedule's fire after a crash) names the run, so that a retry
	// cannot make a second one; creating an id that exists fails with
	// [ErrExists] and appends nothing. "" means a new id.
	ID string
	// Local is what the command line adds (keel run's flags and
	// config.toml); a caller with a token may not set it.
	Local *LocalRun
	// origin is what a schedule or trigger adds (unattended.go).
	origin *origin
	// creator is the id of the API token that creates the run ("" for
	// the command line); the service sets it.
	creator string
}

// Creator returns the id of the API token that creates the run, "" for
// the command line on the journal's machine (whose person owns the
// journal): the builder loads memory files another token's run wrote as
// untrusted.
func (r *CreateRun) Creator() string { return r.creator }

// LocalRun is what a run created by the command line on the journal's
// machine may set beyond the API's request. nil fields take the
// service's defaults, as for any caller.
type LocalRun struct {
	// Policy decides the run's calls (a policy file the command line
	// read); nil means the service's.
	Policy *policy.Engine
	// Approval replaces the approval timeout and default decision the
	// policy gives; nil keeps the policy's.
	Approval *agent.ApprovalSettings
	// SandboxLimits are the resource limits of every command; nil means
	// [DefaultSandboxLimits].
	SandboxLimits *sandbox.Limits
	// Settings are the run's execution settings; nil means the service's
	// (Options.Settings).
	Settings *agent.Settings
	// SetupNetwork lists the hosts the setup script may reach;
	// SetupTimeout bounds it (0: agent.SetupTimeout).
	SetupNetwork []string
	SetupTimeout time.Duration
	// SecretEnv names variables of this process's environment passed
	// into the sandbox as secrets (agent.RunCreated.SecretEnv): their
	// values are never journaled, and the gate watches for them.
	SecretEnv []string
	// SecretHosts are secrets of this process's environment the sandbox
	// never holds (agent.RunCreated.SecretHosts): the egress proxy puts
	// each in requests to its host in place of a placeholder.
	SecretHosts []agent.SecretHost
	// Context configures the context window, compaction, memory files
	// and the action mode; nil means the defaults.
	Context *ContextParams
	// Connectors, if set, are the run's MCP servers, databases and APIs
	// as given (keel run's flags and config.toml); nil means the
	// builder's for a run of its agent.
	Connectors *Connectors
	// NoOffer offers the run neither the memory of its scopes nor
	// skills, whatever the request says (an evaluation's trial, which
	// must not depend on what this machine remembers).
	NoOffer bool
}

// Connectors are a run's MCP servers, databases and APIs.
type Connectors struct {
	MCP     []agent.MCPServer
	SQL     []agent.SQLDatabase
	OpenAPI []agent.OpenAPI
}

// ContextParams configure a run's context window, compaction, memory
// files and action mode (docs/context.md).
type ContextParams struct {
	// Window is the context window in tokens: 0 means the model family's,
	// negative never compacts.
	Window int
	// Threshold is the fraction of the window past which the context is
	// compacted; 0 means agent.DefaultCompactThreshold.
	Threshold float64
	// HandoffAfter continues in a fresh context after this many
	// compactions (0: never).
	HandoffAfter int
	// NotesFile is the workspace file a handoff carries; "" means
	// agent.DefaultNotesFile.
	NotesFile string
	// ActionMode is "tools" (function calling, the default) or "text"
	// (code blocks in the model's text).
	ActionMode string
	// NoMemory leaves out the memory files (AGENTS.md, KEEL.md) and the
	// memory of the run's scopes.
	NoMemory bool
	// MemoryBudget bounds, in tokens, the memory of its scopes a run is
	// offered; 0 means memory.DefaultBudget.
	MemoryBudget int
}

// ErrExists is returned when a run of a creation's ID exists already.
var ErrExists = errors.New("service: the run exists already")

// DefaultCompletionMarker completes a run when a command's output starts
// with this line (the convention of mini-swe-agent, whose recorded
// trajectories Keel replays). It is on only for replays and when asked
// for (docs/architecture.md, "Decisions").
const DefaultCompletionMarker = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

// ModelInfo is what the builder knows of a model spec on this machine.
type ModelInfo struct {
	// Spec is the model spec as runs journal it (normalized).
	Spec string
	// Replay marks a recorded trajectory (replay:PATH), whose recordings
	// end with the completion marker.
	Replay bool
	// Task and System are a replay's recorded task and system prompt.
	Task, System string
	// Family is the model's name for the family table (the recorded
	// model of a replay).
	Family string
}

// Create checks, prepares, journals and starts a run for who: the
// operation behind POST /v1/runs, the web UI's form, Keel's MCP tool
// start_run and keel run --server. Defaults and checks are
// [Service.Prepare]'s.
func (s *Service) Create(ctx context.Context, who *Caller, req *CreateRun) (api.Run, error) {
	return s.create(ctx, req, who)
}

// Prepare checks a creation for who and returns the run.created it would
// journal: the request with the service's defaults, completed by the
// builder, admitted (the caller may act as its agent, under the
// service's sandbox, policy, models and workspace roots) and checked to
// be set up. keel run prepares this way, then wires the run in its own
// process and journals it with [Service.Journal].
func (s *Service) Prepare(ctx context.Context, who *Caller, req *CreateRun) (*agent.RunCreated, error) {
	c, _, err := s.prepareAdmitted(ctx, who, req, false)
	return c, err
}

// Journal journals run.created c, prepared for who, as a new run and
// returns its id (id, if not "", is the run's; see CreateRun.ID). It
// does not start it.
func (s *Service) Journal(ctx context.Context, who *Caller, c *agent.RunCreated, id string) (string, error) {
	return s.journal(ctx, who, c, id, nil)
}

func (s *Service) journal(ctx context.Context, who *Caller, c *agent.RunCreated, id string, a *admission) (string, error) {
	var err error
	if id != "" {
		id, err = s.rt.CreateAs(ctx, id, c)
		if errors.Is(err, agent.ErrRunExists) {
			return "", fmt.Errorf("%w: %s", ErrExists, id)
		}
	} else {
		id, err = s.rt.Create(ctx, c)
	}
	if err != nil {
		return "", err
	}
	if a == nil {
		a = &admission{who: who}
	}
	return id, s.record(ctx, who, action{Action: "run.create", RunID: id, Detail: detail(c.Model, a)})
}

// prepareAdmitted is Prepare; validate also sets the run up and tears
// it down (see validate).
func (s *Service) prepareAdmitted(ctx context.Context, who *Caller, req *CreateRun, validate bool) (*agent.RunCreated, *admission, error) {
	if s.opts.Builder == nil {
		return nil, nil, unavailable("this server does not create runs (no run preparation configured)")
	}
	if req.Local != nil && !who.Local {
		return nil, nil, forbidden("only the command line on the journal's machine sets a run's local settings")
	}
	a := &admission{who: who, demo: req.Demo, demoWorkspace: req.Demo}
	if err := s.admitRequest(ctx, a, &req.CreateRun); err != nil {
		return nil, nil, err
	}
	req.creator = ""
	if !who.Local {
		req.creator = who.ID
	}
	c, err := s.prepare(ctx, req)
	if err != nil {
		return nil, nil, s.invalid(err)
	}
	ws, err := s.admit(ctx, a, c, validate)
	if err != nil {
		dropDemo(req, c)
		return nil, nil, err
	}
	c.Workspace = ws
	if req.Team {
		if err := s.offerTeam(c); err != nil {
			return nil, nil, err
		}
	}
	stamp(c, a)
	if c.ForeignSecrets && c.Setup != "" {
		// The setup script is the creator's code, run before the gate
		// with the sandbox's environment: with the operator's secrets
		// it would show them to its creator (its output) or plant
		// configuration (~/.gitconfig) that a later, inert-looking
		// call runs with them (docs/security.md).
		return nil, nil, forbidden("setup: a setup script runs before the gate, with the run's secrets; this run would hold the server operator's secrets (%s), and only an admin gives such a run a setup script: drop setup, or ask for the secret with secret_hosts (keel --server URL run --secret-for-host NAME=HOST), which the sandbox never holds", strings.Join(c.SecretEnv, ", "))
	}
	return c, a, nil
}

// TeamBuilder is implemented by a builder whose runs may be teams
// (api.CreateRun.Team): OfferTeam fixes in a new run, whose workspace
// is checked, the agent definitions it may start and offers it the team
// tools (when its tools are known). Errors wrapped in [ErrInvalid] are
// the request's fault.
type TeamBuilder interface {
	OfferTeam(c *agent.RunCreated) error
}

// offerTeam makes the new run c a team's lead, for every front end alike.
func (s *Service) offerTeam(c *agent.RunCreated) error {
	tb, ok := s.opts.Builder.(TeamBuilder)
	if !ok {
		return badRequest("team: this server's runs cannot start child agents")
	}
	if err := tb.OfferTeam(c); err != nil {
		return s.invalid(err)
	}
	return nil
}

// prepare turns a creation into run.created: the request, the service's
// defaults where it leaves something out, and what the builder adds.
// Every front end's run is made here, so that the same request makes the
// same run whichever way it came.
func (s *Service) prepare(ctx context.Context, req *CreateRun) (*agent.RunCreated, error) {
	if req.Demo {
		return s.prepareDemo(ctx, req.Sandbox)
	}
	local := req.Local
	if local == nil {
		local = &LocalRun{}
	}
	name := cmp.Or(req.Model, s.opts.DefaultModel)
	if name == "" {
		return nil, badRequest("no model: name one (openai:MODEL, anthropic:MODEL, openai-compatible:MODEL@URL, replay:RECORDING, scripted:demo); this server has no default model")
	}
	if strings.TrimSpace(req.Task) == "" && !strings.HasPrefix(name, "replay:") {
		// Said before anything of the model (its API key): only a
		// recording brings a task of its own.
		return nil, NoTask()
	}
	mi, err := s.opts.Builder.Model(ctx, name)
	if err != nil {
		return nil, err
	}
	task, system := cmp.Or(req.Task, mi.Task), cmp.Or(req.System, mi.System)
	if strings.TrimSpace(task) == "" {
		return nil, NoTask()
	}
	sb := cmp.Or(req.Sandbox, s.sandboxKind())
	if err := checkSandboxMount(sb, req.MountPath); err != nil {
		return nil, err
	}
	ws := req.Workspace
	if ws != "" {
		ws = filepath.Clean(ws)
	}
	mount := req.MountPath
	switch {
	case mount == "" && sb == "none":
		// Without a sandbox nothing is mounted: commands see the host,
		// so the model is told the workspace's real path, and the gate
		// resolves paths against it.
		mount = ws
	case mount == "":
		mount = "/workspace"
	}
	if err := checkLabels(req.Labels); err != nil {
		return nil, err
	}
	for _, e := range req.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return nil, badRequest("env %q: want KEY=VALUE", e)
		}
	}
	eng := local.Policy
	if eng == nil {
		if eng, err = s.policyOf(ctx, req.Policy, req.PolicyFile); err != nil {
			return nil, err
		}
	}
	if err := s.lintPolicy(ctx, eng); err != nil {
		return nil, err
	}
	limits, err := ApplyLimits(DefaultLimits(), &req.Limits)
	if err != nil {
		return nil, err
	}
	marker := ""
	switch {
	case req.CompletionMarker != nil:
		marker = *req.CompletionMarker
	case mi.Replay:
		// Recorded mini-swe-agent trajectories end with this marker. For
		// a live model it stays off unless asked for: any file or test
		// output could otherwise end the run with text of its choosing.
		marker = DefaultCompletionMarker
	}
	if local.SetupTimeout < 0 {
		return nil, badRequest("setup timeout %s: want a positive duration", local.SetupTimeout)
	}
	secretEnv := slices.Clone(local.SecretEnv)
	for _, n := range req.SecretEnv {
		if !slices.Contains(s.opts.SecretEnv, n) {
			if hosts := s.boundHosts(n); len(hosts) > 0 {
				return nil, forbidden("secret_env %q: this server offers that variable only as a secret for %s, which the sandbox never holds: ask for it with secret_hosts (keel --server URL run --secret-for-host %s=%s)", n, strings.Join(hosts, ", "), n, hosts[0])
			}
			return nil, badRequest("secret_env %q: this server does not offer that variable as a secret (its operator offers one with keel serve --secret-env NAME)", n)
		}
		if !slices.Contains(secretEnv, n) {
			secretEnv = append(secretEnv, n)
		}
	}
	secretHosts := slices.Clone(local.SecretHosts)
	for _, h := range req.SecretHosts {
		b, err := s.bindSecretHost(h)
		if err != nil {
			return nil, err
		}
		secretHosts = append(secretHosts, b)
	}
	if err := checkSecretHosts(secretHosts, secretEnv, req.Env, req.Network, sb); err != nil {
		return nil, err
	}
	c := &agent.RunCreated{
		Task: task, System: system, Model: cmp.Or(mi.Spec, name), Limits: limits, CompletionMarker: marker,
		Workspace: ws, MountPath: mount, Sandbox: sb, Env: req.Env, SecretEnv: secretEnv, SecretHosts: secretHosts, Setup: req.Setup, SetupNetwork: local.SetupNetwork,
		SetupTimeout: agent.Duration(cmp.Or(local.SetupTimeout, agent.SetupTimeout)), Network: req.Network, Labels: req.Labels,
		Principal: cmp.Or(req.Agent, identity.LocalAgent), OnBehalfOf: req.OnBehalfOf,
	}
	if c.System == "" {
		c.System = SystemPrompt(mount, local.Context != nil && local.Context.ActionMode == "text")
	}
	return s.finish(ctx, c, eng, req, mi.Family)
}

// policyOf returns the policy a request names: "" or "server" the
// service's, "default" Keel's default, "demo" the demo's, else a policy
// source (an admin's client sends its file's content: Keel's TOML policy
// file, or bare Cedar rules as in a .cedar file, and the file's name as
// file), whose own test cases must pass.
func (s *Service) policyOf(ctx context.Context, name, file string) (*policy.Engine, error) {
	switch name {
	case "", "server", "default", "demo":
		if file != "" {
			return nil, badRequest("policy_file %q names the file of a policy's text, and policy %q is no text", file, name)
		}
	}
	switch name {
	case "", "server":
		return s.opts.Policy, nil
	case "default":
		return policy.Default(), nil
	case "demo":
		return DemoPolicy(), nil
	}
	if err := checkPolicyFile(file); err != nil {
		return nil, err
	}
	eng, err := parseAPIPolicy(name, file)
	if err != nil {
		return nil, badRequest("%v", err)
	}
	if err := eng.CheckCases(ctx); err != nil {
		return nil, badRequest("policy %s: %v", eng.Name(), err)
	}
	return eng, nil
}

// checkPolicyFile refuses a policy file name that could pass for
// another (Keel's own policies are named keel:..., a request's text
// without a file api:policy) or that is not a name to print.
func checkPolicyFile(file string) error {
	switch {
	case file == "":
		return nil
	case len(file) > 1024:
		return badRequest("policy_file: %d bytes, want at most 1024", len(file))
	case !utf8.ValidString(file) || strings.IndexFunc(file, unicode.IsControl) >= 0:
		return badRequest("policy_file %q: want a file name without control characters", file)
	case strings.HasPrefix(file, "keel:") || strings.HasPrefix(file, "api:"):
		return badRequest("policy_file %q: names starting with keel: or api: are Keel's", file)
	}
	return nil
}

// parseAPIPolicy compiles a policy a request holds. Named by its file,
// it is read as keel run --policy FILE reads that file (policy.Parse:
// a name ending in .cedar is bare Cedar rules, any other Keel's TOML
// format). Without one, the text is Keel's TOML policy format
// (docs/policy.md) or bare Cedar rules (what a .cedar file holds, named
// api:policy.cedar so that the run's record parses the same way): text
// that sets version or cedar as TOML keys is a TOML file, and its error
// is TOML's; otherwise the text that does not parse as TOML is read as
// Cedar, and a failure is Cedar's.
func parseAPIPolicy(src, file string) (*policy.Engine, error) {
	if file != "" {
		return policy.Parse(file, []byte(src))
	}
	eng, err := policy.Parse("api:policy", []byte(src))
	if err == nil || hasTOMLPolicyKey(src) {
		return eng, err
	}
	return policy.Parse("api:policy.cedar", []byte(src))
}

// hasTOMLPolicyKey reports whether src sets a top-level key of Keel's
// TOML policy format (version, cedar) on a line of its own.
func hasTOMLPolicyKey(src string) bool {
	for line := range strings.Lines(src) {
		k, _, ok := strings.Cut(line, "=")
		if k = strings.TrimSpace(k); ok && (k == "version" || k == "cedar") {
			return true
		}
	}
	return false
}

// lintPolicy refuses a run whose policy [policy.Engine.Lint] finds
// wrong (a rule that cannot be evaluated, a policy that denies every
// ordinary call) before anything runs: the policy's own test cases may
// pass, and the run would spend model calls only to end all_denied.
// Keel's default policy is not checked (its tests do), the service's
// own once.
func (s *Service) lintPolicy(ctx context.Context, eng *policy.Engine) error {
	if eng.Name() == policy.DefaultName {
		return nil
	}
	var problems []string
	if eng == s.opts.Policy {
		problems = s.policyLint()
	} else {
		problems = eng.Lint(ctx)
	}
	if len(problems) == 0 {
		return nil
	}
	return badRequest("policy %s: %s; nothing ran, no run was created (keel policy test on the policy's file says more)", eng.Name(), strings.Join(problems, "; "))
}

// finish applies what every run shares: sandbox limits, settings, the
// policy and its approval settings, a principal check, and what the
// builder adds (context, memory, connectors, tools, state directory,
// git state). Whether the run can be set up (model, workspace, sandbox)
// is admit's job.
func (s *Service) finish(ctx context.Context, c *agent.RunCreated, eng *policy.Engine, req *CreateRun, family string) (*agent.RunCreated, error) {
	local := req.Local
	if local == nil {
		local = &LocalRun{}
	}
	c.SandboxLimits = DefaultSandboxLimits()
	if local.SandboxLimits != nil {
		c.SandboxLimits = *local.SandboxLimits
	}
	if err := checkSandboxLimits(&c.SandboxLimits); err != nil {
		return nil, err
	}
	set := s.opts.Settings
	if local.Settings != nil {
		set = *local.Settings
	}
	// A run may turn its checkpoints off, never on where the service's
	// are off.
	set.NoCheckpoints = set.NoCheckpoints || s.opts.NoCheckpoints || req.NoCheckpoints
	if err := set.Validate(); err != nil {
		return nil, badRequest("settings: %v", err)
	}
	c.Settings = &set
	c.Policy = agent.NewPolicyRef(eng)
	if set := eng.Approval(); set.Timeout > 0 || set.Default == policy.Allow {
		c.Approval = &agent.ApprovalSettings{Timeout: agent.Duration(set.Timeout), Default: set.Default}
	}
	if local.Approval != nil {
		c.Approval = nil
		if local.Approval.Timeout > 0 || local.Approval.Default == policy.Allow {
			c.Approval = local.Approval
		}
	}
	t0 := time.Now()
	defer func() {
		if d := time.Since(t0); d > 500*time.Millisecond {
			s.logger.Warn("slow run preparation", "duration", d.Round(time.Millisecond).String())
		}
	}()
	if err := checkAgent(ctx, s.opts.Directory, c.Principal, c.OnBehalfOf); err != nil {
		return nil, err
	}
	if err := s.opts.Builder.Complete(ctx, c, req, family); err != nil {
		return nil, err
	}
	return c, nil
}

// checkSandboxMount checks a run's sandbox kind sb and its mount path
// ("" the default), for a creation and a policy check alike.
func checkSandboxMount(sb, mount string) error {
	if sb != "linux" && sb != "none" {
		return badRequest("sandbox %q: want linux or none", sb)
	}
	if mount != "" && !strings.HasPrefix(mount, "/") {
		return badRequest("mount_path %q must be absolute", mount)
	}
	return nil
}

// checkAgent checks that agent principal may run for onBehalfOf by the
// directory (known, not revoked, an assistant for someone, an employee
// for nobody), for a creation and a policy check alike.
func checkAgent(ctx context.Context, dir *identity.Directory, principal, onBehalfOf string) error {
	if err := identity.CheckName(principal); err != nil {
		return badRequest("agent: %v", err)
	}
	if _, err := dir.Check(ctx, principal, onBehalfOf); err != nil {
		if errors.Is(err, policy.ErrRevoked) {
			return badRequest("agent %s cannot run: %v%s", principal, err, restoreHint(ctx, dir, principal, err))
		}
		return err
	}
	return nil
}

// restoreHint says how to undo the revocation that keeps agent name from
// running (err), as every front end can: a built-in agent (keel-demo,
// keel-cli) or a sub-agent is restored; a created agent's revocation is
// permanent. "" when the agent itself is not revoked.
func restoreHint(ctx context.Context, dir *identity.Directory, name string, err error) string {
	if !errors.Is(err, identity.ErrRevokedAgent) {
		return ""
	}
	a, gerr := dir.Get(ctx, name)
	switch {
	case gerr != nil || !a.Revoked:
		return ""
	case a.Builtin || a.Parent != "":
		return fmt.Sprintf("; an admin restores it: keel agents restore %s, POST /v1/agents/%s/restore, or Restore on the web UI's Agents page", name, name)
	}
	return "; a created agent's revocation is permanent: create another agent (keel agents create) for its runs"
}

// prepareDemo creates the demo run (the server's and keel demo's): a
// fresh copy of the demo project, the scripted demo model, and the demo
// policy, which asks a person before the agent edits a file; in sandbox
// sb ("": the service's). When it fails, the copy is removed.
func (s *Service) prepareDemo(ctx context.Context, sb string) (*agent.RunCreated, error) {
	ws, err := s.newDemoWorkspace()
	if err != nil {
		return nil, err
	}
	c := &agent.RunCreated{
		Task: demo.Task, System: SystemPrompt("/workspace", false), Model: "scripted:demo",
		Limits: agent.Limits{MaxSteps: 20}, Workspace: ws, MountPath: "/workspace", Sandbox: cmp.Or(sb, s.sandboxKind()),
		Principal: identity.DemoAgent, CompletionMarker: DefaultCompletionMarker,
		Labels: map[string]string{LabelDemo: demo.Label},
		// The demo's tests would leave Python's bytecode caches in the
		// project; a change summary lists such files (they run on their
		// own) beside the one-line fix, three files changed for one.
		Env: []string{"PYTHONDONTWRITEBYTECODE=1"},
	}
	c, err = s.finish(ctx, c, DemoPolicy(), &CreateRun{}, "scripted:demo")
	if err != nil {
		os.RemoveAll(ws)
		return nil, err
	}
	return c, nil
}

// newDemoWorkspace makes a fresh copy of the demo project for a demo run
// (or a fork of one) in a new directory of Options.DemoDir (the
// system's temporary directory when it is ""), making DemoDir when it
// is missing.
func (s *Service) newDemoWorkspace() (string, error) {
	if dir := s.opts.DemoDir; dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", fmt.Errorf("demo workspace: %w", err)
		}
	}
	return demo.NewWorkspace(s.opts.DemoDir)
}

// dropDemo removes the workspace the service made for c, the run of a
// demo request that was refused or not journaled: nothing else will use
// it. It does nothing for other requests.
func dropDemo(req *CreateRun, c *agent.RunCreated) {
	if req.Demo && c != nil && c.Workspace != "" {
		os.RemoveAll(c.Workspace)
	}
}

// SystemPrompt is the default system prompt of a run whose workspace
// the sandbox shows at mount; text is the text-action mode's (model
// without function calling), without the tool-mode advice (file tools,
// the todo tool, "call no tool" to finish) such a model cannot follow:
// model/codeact appends the actions and how to finish to every request.
func SystemPrompt(mount string, text bool) string {
	if text {
		return fmt.Sprintf(`You are an autonomous software engineering agent running in Keel, a sandboxed Linux environment.
The workspace is %s; each bash block starts there in a fresh bash (cd and exports do not persist between blocks; chain with &&).
There is no network unless the task says otherwise, and no terminal: commands must not wait for input.
Work in small steps: inspect, change, then verify by running the code or its tests. Edit files with commands (sed, a heredoc, or a short script).
Long outputs are cut; the full text is saved to the file the result names.
On long tasks keep notes in .keel-notes.md: older turns are summarised when the context fills up.`, mount)
	}
	// The tools' descriptions say how commands run (a fresh shell, no
	// terminal, cut outputs): the prompt does not repeat them.
	return fmt.Sprintf(`You are a coding agent in Keel's Linux sandbox: workspace %s, no network unless the task says so.
Work in small steps; verify changes by running the code or its tests.
On long tasks keep a plan (todo) and notes in .keel-notes.md: older turns get summarised.
When done, reply with a short summary and call no tool.`, mount)
}

// create checks, prepares, journals and submits a run for who.
func (s *Service) create(ctx context.Context, req *CreateRun, who *Caller) (api.Run, error) {
	// A creation slower than a second logs where its time went.
	start, last := time.Now(), time.Now()
	var phases []any
	phase := func(name string) {
		now := time.Now()
		phases = append(phases, name, now.Sub(last).Round(time.Millisecond).String())
		last = now
	}
	defer func() {
		if d := time.Since(start); d > time.Second {
			s.logger.Warn("slow run creation", append([]any{"duration", d.Round(time.Millisecond).String()}, phases...)...)
		}
	}()
	c, a, err := s.prepareAdmitted(ctx, who, req, true)
	if err != nil {
		return api.Run{}, err
	}
	req.origin.apply(c)
	phase("prepare")
	id, rerr := s.journal(ctx, who, c, req.ID, a)
	if id == "" {
		dropDemo(req, c)
		return api.Run{}, rerr
	}
	phase("journal")
	if err := s.pool.submit(id); err != nil {
		return api.Run{}, err
	}
	run, err := s.run(ctx, id, 0)
	phase("summary")
	if err == nil {
		err = rerr
	}
	return run, err
}

// detail is an api.action's detail: text and the admin's overrides.
func detail(text string, a *admission) string {
	if len(a.overrides) > 0 {
		return strings.TrimSpace(text + " (admin override: " + strings.Join(a.overrides, ", ") + ")")
	}
	return text
}

// Choices are what a new run may choose from: models, workspaces, agents.
type Choices struct {
	Models, Workspaces, Agents []string
	// SecretEnv names the variables the operator offers as secrets in
	// the sandbox (Options.SecretEnv) and SecretHosts those offered as
	// secrets for a host (Options.SecretHosts): the form offers them by
	// name, never by value.
	SecretEnv   []string
	SecretHosts []agent.SecretHost
}

// maxChoices bounds each list of Choices.
const maxChoices = 200

// NewRunChoices lists what who may choose for a new run (the web UI's
// form): the service's default model, the demo's and the replay
// recordings of its recording directories; the directories directly
// under its workspace roots; and its agents.
func (s *Service) NewRunChoices(ctx context.Context, who *Caller) *Choices {
	c := &Choices{}
	if s.opts.DefaultModel != "" {
		c.Models = append(c.Models, s.opts.DefaultModel)
	}
	c.Models = append(c.Models, "scripted:demo")
	for _, d := range s.opts.ReplayDirs {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".json") && len(c.Models) < maxChoices {
				c.Models = append(c.Models, "replay:"+e.Name())
			}
		}
	}
	for _, root := range s.opts.WorkspaceRoots {
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			if !e.IsDir() || strings.HasPrefix(e.Name(), ".") || len(c.Workspaces) >= maxChoices {
				continue
			}
			// Only what a run may use: not the server's own home.
			dir := filepath.Join(root, e.Name())
			if _, err := s.conf.checkWorkspace(dir, true); err == nil {
				c.Workspaces = append(c.Workspaces, dir)
			}
		}
	}
	if list, err := s.agents(ctx); err == nil {
		for _, a := range list {
			if len(c.Agents) < maxChoices {
				c.Agents = append(c.Agents, a.Name)
			}
		}
	}
	c.SecretEnv = slices.Clone(s.opts.SecretEnv)
	for _, b := range s.opts.SecretHosts {
		c.SecretHosts = append(c.SecretHosts, agent.SecretHost{Name: b.Name, Host: b.Host})
	}
	return c
}

// boundHosts are the hosts the operator bound variable name to (keel
// serve --secret-for-host NAME=HOST).
func (s *Service) boundHosts(name string) []string {
	var out []string
	for _, b := range s.opts.SecretHosts {
		if b.Name == name {
			out = append(out, b.Host)
		}
	}
	return out
}

// bindSecretHost checks a request's secret for a host against the
// operator's bindings (Options.SecretHosts): the operator, not the
// run's creator, chooses where a server's secret goes. An empty host is
// the operator's, when there is one.
func (s *Service) bindSecretHost(h api.SecretHost) (agent.SecretHost, error) {
	hosts := s.boundHosts(h.Name)
	if len(hosts) == 0 {
		if slices.Contains(s.opts.SecretEnv, h.Name) {
			return agent.SecretHost{}, forbidden("secret_hosts %q: this server offers that variable to the sandbox only (keel serve --secret-env), not as a secret for a host: where a server's secret goes is its operator's choice (keel serve --secret-for-host %s=HOST)", h.Name, h.Name)
		}
		return agent.SecretHost{}, badRequest("secret_hosts %q: this server does not offer that variable as a secret for a host (its operator offers one with keel serve --secret-for-host NAME=HOST)", h.Name)
	}
	host := h.Host
	if host == "" && len(hosts) == 1 {
		host = hosts[0]
	}
	i := slices.IndexFunc(s.opts.SecretHosts, func(b agent.SecretHost) bool { return b.Name == h.Name && strings.EqualFold(b.Host, host) })
	if i < 0 {
		if host == "" {
			return agent.SecretHost{}, badRequest("secret_hosts %q: name the host: this server offers that variable for %s", h.Name, strings.Join(hosts, ", "))
		}
		return agent.SecretHost{}, forbidden("secret_hosts %q: host %s: this server offers that variable only for %s (its operator binds the host: keel serve --secret-for-host %s=HOST)", h.Name, host, strings.Join(hosts, ", "), h.Name)
	}
	b := s.opts.SecretHosts[i]
	if h.Body && !b.Body {
		return agent.SecretHost{}, forbidden("secret_hosts %q: body: this server does not put that variable in request bodies (its operator allows it with keel serve --secret-in-body %s)", h.Name, h.Name)
	}
	return agent.SecretHost{Name: b.Name, Host: b.Host, Body: h.Body}, nil
}

// SecretHostError is a run's secret for a host that the service
// refuses (given twice, a host that is not one or not in the run's
// allowlist, no linux sandbox): Name=Host and the Problem in words of
// neither the API nor the command line. It is wrapped in an invalid
// request's [Error] that words it as the API does; keel run words it
// with its flags.
type SecretHostError struct {
	Name, Host, Problem string
}

func (e *SecretHostError) Error() string {
	return fmt.Sprintf("secret_hosts %s=%s: %s", e.Name, e.Host, e.Problem)
}

// checkSecretHosts checks a run's secrets for hosts: each variable given
// once and in no other way, its host one the allowlist allows, in the
// linux sandbox.
func checkSecretHosts(hosts []agent.SecretHost, secretEnv, env, allow []string, sb string) error {
	allowed := egress.MustParse(allow)
	refuse := func(h agent.SecretHost, problem string) error {
		e := &SecretHostError{Name: h.Name, Host: h.Host, Problem: problem}
		return &Error{Code: api.CodeInvalidRequest, Message: e.Error(), cause: e}
	}
	for i, h := range hosts {
		if slices.Contains(secretEnv, h.Name) || slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, h.Name+"=") }) ||
			slices.ContainsFunc(hosts[:i], func(o agent.SecretHost) bool { return o.Name == h.Name }) {
			return refuse(h, "the variable is given twice (as a variable of the sandbox, a secret, or a secret for a host)")
		}
		l, err := egress.Parse([]string{h.Host})
		if err != nil || h.Host == "" {
			return refuse(h, "want a host as the network allowlist writes it (api.example.com, api.example.com:8443, *.example.com)")
		}
		r := l.Rules()[0]
		probe := r.Host
		if r.Wildcard {
			probe = "x." + r.Host
		}
		if !slices.ContainsFunc(r.Ports, func(p int) bool { return allowed.Match(probe, p) != nil }) {
			return refuse(h, "the host is not in the run's network allowlist")
		}
		if sb == "none" {
			return refuse(h, "needs the linux sandbox, whose egress proxy puts the value in (not sandbox none)")
		}
	}
	return nil
}
