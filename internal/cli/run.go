package cli

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/internal/assemble/builder"
	"github.com/keel-run/keel/internal/lazy"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/replay"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// DefaultCompletionMarker completes a run when a command's output starts
// with this line (service.DefaultCompletionMarker).
const DefaultCompletionMarker = service.DefaultCompletionMarker

// runFlags are the flags of `keel run`. Their names are an interface other
// tools script against: keep them.
type runFlags struct {
	// labels are --label KEY=VALUE annotations (cost reports group by them).
	labels     []string
	model      string
	apiKey     string
	apiKeyEnv  string
	workspace  string
	mountPath  string
	env        []string
	secretEnv  []string
	secretHost []string
	secretBody []string
	setup      string
	taskFile   string
	system     string
	systemFile string
	json       bool
	quiet      bool
	maxSteps   int
	// team offers spawn_agent and wait_agents and the definitions of
	// .keel/agents; maxToolCalls, maxChildren and maxDepth are limits.
	team                                bool
	maxToolCalls, maxChildren, maxDepth int
	maxTokens                           int64
	maxCost                             float64
	timeout                             time.Duration
	commandTimeout                      time.Duration
	sandbox                             string
	network                             []string
	setupNetwork                        []string
	setupTimeout                        time.Duration
	limits                              limitFlags
	completionMarker                    string
	maxOutputTokens                     int
	concurrency                         int
	maxResultChars                      int
	idleTimeout                         time.Duration
	commandIdle                         time.Duration
	stallRetries                        int
	retries                             int
	// checkpoints is --checkpoints (default true); --no-checkpoints
	// sets it false (runDefaults).
	checkpoints   bool
	noCheckpoints bool
	// ctx holds the context, memory and action-mode flags (context.go);
	// handoff is set by keel runs handoff.
	ctx     contextFlags
	handoff bool
	// gate holds the policy, principal and approval flags (policy.go).
	gate gateFlags
	// mcp holds --mcp and --no-mcp (mcp.go).
	mcp mcpFlags
	// mountSet records that --mount-path was given.
	mountSet bool
	// interactive is -i (keel chat): a conversation, message after
	// message, in one run.
	interactive bool
	// changed reports whether a flag was given (keel runs resume: only
	// the settings flags given replace the run's own); nil: none was.
	changed func(name string) bool
}

func (a *app) runCmd() *cobra.Command {
	cmd, _ := a.runCommand()
	return cmd
}

// runCommand is keel run and its flags.
func (a *app) runCommand() (*cobra.Command, *runFlags) {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "run [flags] TASK",
		Short: "Run an agent on a task in a sandboxed workspace",
		Long: `Run drives the model through tools in a sandbox on the workspace until the
task is done or a limit stops it. Each step is printed to stderr as it
happens; --json writes the journal events to stdout as JSON lines.

The model is a spec string: openai:MODEL, anthropic:MODEL,
openai-compatible:MODEL@BASE_URL or replay:TRAJECTORY.json. Keys come from
OPENAI_API_KEY / ANTHROPIC_API_KEY for OpenAI's and Anthropic's own
endpoints; any other endpoint's key comes from the variable --api-key-env
or its [endpoints."URL"] api_key_env in config.toml names (or --api-key).

Exit codes: 0 completed, 1 failed, 2 bad command line or configuration
(nothing ran), 3 paused (waiting for approval), 130 canceled (Ctrl-C,
SIGTERM, SIGHUP).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rs, err := a.runDefaults(cmd, f)
			if err != nil {
				return err
			}
			a.project = rs.project
			f.mountSet = rs.source["mount-path"] != ""
			return a.run(cmd.Context(), f, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.model, "model", "m", "", "model spec: openai:MODEL, anthropic:MODEL, openai-compatible:MODEL@URL, replay:PATH (default from config.toml)")
	fl.StringVar(&f.apiKey, "api-key", "", "API key (default from OPENAI_API_KEY or ANTHROPIC_API_KEY for their own endpoints)")
	fl.StringVar(&f.apiKeyEnv, "api-key-env", "", "environment variable holding the model endpoint's API key (an openai-compatible or anthropic@URL endpoint)")
	fl.StringVarP(&f.workspace, "workspace", "w", ".", "host directory the agent works in (mounted read-write)")
	fl.StringVar(&f.mountPath, "mount-path", "/workspace", "where the workspace appears inside the sandbox (with --sandbox none: the workspace's own path)")
	fl.StringArrayVar(&f.labels, "label", nil, "KEY=VALUE annotation of the run, e.g. task=JIRA-123 (repeatable; keel cost --by label groups by them)")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "KEY=VALUE passed into the sandbox (repeatable; stored in the journal, not for secrets)")
	fl.StringArrayVar(&f.secretHost, "secret-for-host", nil, "NAME=HOST: the sandbox gets a placeholder in NAME, never the value of Keel's variable NAME; the egress proxy puts the value in place of the placeholder only in requests to HOST (an --allow-host entry; HTTPS is opened by the proxy for that host) (repeatable; docs/security.md)")
	fl.StringArrayVar(&f.secretBody, "secret-in-body", nil, "NAME: the egress proxy also puts --secret-for-host NAME's value in request bodies to its host (text bodies up to 1 MiB; a body can store the value at the host where others read it); without it a request whose body holds the placeholder is refused (repeatable)")
	fl.StringArrayVar(&f.secretEnv, "secret-env", nil, "NAME of a variable of Keel's environment passed into the sandbox as a secret: its value is never journaled, results never show it, and calls that carry it out ask (repeatable; docs/security.md)")
	fl.StringVar(&f.setup, "setup", "", "shell script run in the sandbox before the agent starts")
	fl.StringVar(&f.taskFile, "task-file", "", "read the task from this file ('-' for stdin)")
	fl.StringVar(&f.system, "system", "", "system prompt (default: Keel's)")
	fl.StringVar(&f.systemFile, "system-file", "", "read the system prompt from this file")
	fl.BoolVar(&f.json, "json", false, "write the journal events to stdout as JSON lines")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "print only the final result")
	fl.IntVar(&f.maxSteps, "max-steps", service.DefaultMaxSteps, "stop after this many model calls (0: no limit)")
	fl.Int64Var(&f.maxTokens, "max-tokens", service.DefaultMaxTokens, "stop after this many input+output tokens, summed over all model calls (0: no limit)")
	fl.Float64Var(&f.maxCost, "max-cost", service.DefaultMaxCost, "stop after this many US dollars of model cost, for models with a known price (0: no limit)")
	fl.DurationVar(&f.timeout, "timeout", service.DefaultTimeout, "stop after this wall time of one execution, e.g. 30m (0: no limit)")
	fl.DurationVar(&f.commandTimeout, "command-timeout", 60*time.Second, "default wall time of one shell command")
	fl.DurationVar(&f.commandIdle, "command-idle-timeout", 2*time.Minute, "end a shell command that prints nothing for this long (negative: never)")
	fl.StringVar(&f.sandbox, "sandbox", "", "sandbox backend: linux (default) or none (NO isolation)")
	fl.StringArrayVar(&f.network, "allow-host", nil, "host, host:port, *.domain, localhost:port or an IP address the run may reach through Keel's egress proxy and network tools (repeatable; default none; names only at public addresses)")
	fl.StringArrayVar(&f.setupNetwork, "setup-allow-host", nil, "host (or host:port) the --setup script may reach (repeatable; default none)")
	fl.DurationVar(&f.setupTimeout, "setup-timeout", agent.SetupTimeout, "wall-time limit of the --setup script")
	fl.BoolVar(&f.team, "team", false, "let the agent start child agents (spawn_agent, wait_agents) from .keel/agents/NAME.md definitions or inline ones, under this run's budget (docs/teams.md)")
	fl.IntVar(&f.maxToolCalls, "max-tool-calls", 0, "stop after this many tool calls, children's included (0: no limit)")
	fl.IntVar(&f.maxChildren, "max-children", 0, "child agents the run's whole tree may start (0: no limit)")
	fl.IntVar(&f.maxDepth, "max-depth", 0, "levels of child agents below the run (0: no limit)")
	f.limits.register(fl)
	fl.StringVar(&f.completionMarker, "completion-marker", "", "complete the run when a command's output starts with this line (default: none; "+DefaultCompletionMarker+" for replay: models, whose recordings use it)")
	fl.IntVar(&f.maxOutputTokens, "max-output-tokens", 0, "completion token limit per model call (0: provider default)")
	fl.IntVar(&f.concurrency, "concurrency", 4, "tool calls of one turn that may run at once")
	fl.IntVar(&f.maxResultChars, "max-result-chars", 10000, "characters of one tool result the model sees (head and tail)")
	fl.DurationVar(&f.idleTimeout, "model-idle-timeout", 120*time.Second, "abandon a model response that sends no bytes for this long")
	fl.IntVar(&f.stallRetries, "model-stall-retries", 2, "retries of a stalled model response before the step fails")
	fl.IntVar(&f.retries, "model-retries", defaultModelRetries, "retries of a model request after a rate limit (429), an overload or server error (5xx), a broken connection or an unusable answer, with exponential backoff and the provider's Retry-After")
	registerCheckpointFlags(fl, f)
	f.ctx.register(fl)
	f.gate.register(cmd)
	f.mcp.register(fl)
	fl.BoolVarP(&f.interactive, "interactive", "i", false, "after each answer, read the next message from the terminal and continue the run with it (keel chat)")
	return cmd, f
}

func (a *app) run(ctx context.Context, f *runFlags, args []string) error {
	spec, err := a.modelSpec(f.model)
	if err != nil {
		return err
	}
	if spec.Provider == "replay" {
		// Journal an absolute path, so that a resume from another
		// directory finds the trajectory.
		if abs, err := filepath.Abs(spec.Name); err == nil {
			spec.Name = abs
		}
	}
	task, err := readTask(f, args)
	if err != nil {
		return err
	}
	system := f.system
	if f.systemFile != "" {
		b, err := os.ReadFile(f.systemFile)
		if err != nil {
			return usagef("--system-file: %v", err)
		}
		system = string(b)
	}
	var rec *replay.Trajectory
	if spec.Provider == "replay" {
		rec, err = replay.Load(spec.Name)
		if err != nil {
			// A trajectory that is missing or unreadable is a bad
			// command line: nothing ran.
			if errors.Is(err, fs.ErrNotExist) {
				return usagef("--model replay:%s: no such trajectory file", spec.Name)
			}
			return usagef("--model replay:%s: %v", spec.Name, err)
		}
		if task == "" {
			task = rec.Task()
		}
		if system == "" {
			system = rec.System()
		}
	}
	// keel chat asks for a task it was not given once the command line
	// is known to be good (below): a bad flag is said before the person
	// types, not after, losing what they typed.
	if strings.TrimSpace(task) == "" && !f.interactive {
		return usagef("no task: give TASK as an argument or --task-file")
	}
	ws, err := filepath.Abs(f.workspace)
	if err != nil {
		return usagef("--workspace: %v", err)
	}
	if st, err := os.Stat(ws); err != nil || !st.IsDir() {
		return usagef("--workspace %s is not a directory", f.workspace)
	}
	sbKind, err := a.sandboxKind(f.sandbox)
	if err != nil {
		return err
	}
	limits, err := f.limits.parse()
	if err != nil {
		return err
	}
	if f.setupTimeout <= 0 {
		return usagef("--setup-timeout %s: want a positive duration", f.setupTimeout)
	}
	settings := f.settings()
	eng, approval, err := f.gate.engine()
	if err != nil {
		return err
	}
	labels, err := parseLabels(f.labels)
	if err != nil {
		return err
	}
	if err := a.checkSecretEnv(f.secretEnv); err != nil {
		return err
	}
	secretHosts, err := a.secretHosts(f.secretHost, f.secretBody, "Keel's environment")
	if err != nil {
		return err
	}
	conn := &service.Connectors{}
	if conn.MCP, err = a.connectors().MCPServers(&f.mcp.ConnectorFlags); err != nil {
		return err
	}
	var sqlDSN map[string]string
	if conn.SQL, sqlDSN, err = a.connectors().SQLDatabases(&f.mcp.ConnectorFlags); err != nil {
		return err
	}
	if conn.OpenAPI, err = a.connectors().OpenAPIs(&f.mcp.ConnectorFlags); err != nil {
		return err
	}
	// The request as every front end makes it (keel run --server sends
	// the same fields to the team server), and what only the command line
	// on this machine adds; the service applies the defaults and checks.
	req := &service.CreateRun{
		CreateRun: api.CreateRun{
			Task: task, System: system, Model: spec.String(), Agent: f.gate.agent, OnBehalfOf: f.gate.onBehalfOf,
			Workspace: ws, Sandbox: sbKind, Env: f.env, Setup: f.setup, Network: f.network, Labels: labels,
			Limits: api.Limits{MaxSteps: &f.maxSteps, MaxTokens: &f.maxTokens, MaxCost: &f.maxCost, Timeout: f.timeout.String(),
				MaxToolCalls: &f.maxToolCalls, MaxChildren: &f.maxChildren, MaxDepth: &f.maxDepth},
		},
		Local: &service.LocalRun{Policy: eng, Approval: approval, SandboxLimits: &limits, Settings: &settings,
			SetupNetwork: f.setupNetwork, SetupTimeout: f.setupTimeout, Connectors: conn, SecretEnv: f.secretEnv, SecretHosts: secretHosts,
			Context: &service.ContextParams{Window: f.ctx.window, Threshold: f.ctx.threshold, HandoffAfter: f.ctx.handoffAfter,
				NotesFile: f.ctx.notesFile, ActionMode: f.ctx.actionMode, NoMemory: f.ctx.noMemory, MemoryBudget: f.ctx.memoryBudget}},
	}
	req.NoMemory, req.NoSkills, req.ProposeSkills, req.Team = f.ctx.noMemory, f.ctx.noSkills, f.ctx.proposeSkills, f.team
	if f.mountSet {
		req.MountPath = f.mountPath
	}
	if f.completionMarker != "" {
		req.CompletionMarker = &f.completionMarker
	}
	live := &liveOptions{Params: assemble.Params{APIKey: f.apiKey, APIKeyEnv: f.apiKeyEnv, Recording: rec, SQLDSN: sqlDSN}, gate: f.gate, chat: f.interactive, team: f.team}
	if !f.ctx.noMemory && f.ctx.memoryBudget <= 0 {
		return usagef("--memory-budget %d: want a positive number of tokens (--no-memory leaves memory out)", f.ctx.memoryBudget)
	}
	live.ProposeSkills = f.ctx.proposeSkills
	// Before the journal is opened (and perhaps created): it must not be
	// where the agent's commands can change it.
	if err := a.assembler().CheckWorkspace(ws); err != nil {
		return err
	}
	if strings.TrimSpace(req.Task) == "" {
		if req.Task, err = a.firstMessage(ctx); err != nil {
			return err
		}
	}
	_, err = a.createAndExecute(ctx, func(ctx context.Context, svc *service.Service) (*agent.RunCreated, error) {
		c, err := svc.Prepare(ctx, service.Local(a.person("")), req)
		if err != nil {
			return nil, secretHostError(err)
		}
		return c, nil
	}, live, f.json, f.quiet)
	return err
}

// createAndExecute prepares a run through the service on the local
// journal (prepare), wires it in this process, journals it and executes
// it, printing progress. It returns the run id (empty if the run could
// not be created) and the execution's error or exit status.
func (a *app) createAndExecute(ctx context.Context, prepare func(context.Context, *service.Service) (*agent.RunCreated, error), live *liveOptions, jsonOut, quiet bool) (string, error) {
	if err := a.journalNotDir(a.dbPath()); err != nil {
		return "", err
	}
	store, err := a.openStore(ctx)
	if err != nil {
		return "", err
	}
	defer store.Close()
	rt, flush, err := a.newRuntime(ctx, store, nil, nil)
	if err != nil {
		return "", err
	}
	defer flush()
	svc := service.New(rt, &service.Options{Builder: a.localBuilder(store, live), NoExecution: true})
	defer func() { _ = svc.Shutdown(context.WithoutCancel(ctx)) }()
	created, err := prepare(ctx, svc)
	if err != nil {
		return "", err
	}
	run, err := a.newWiring(ctx, created, live)
	if err != nil {
		return "", err
	}
	defer run.Close()
	created.Tools = run.ToolInfos()
	if live.team {
		builder.AddTeamTools(created) // the service offered the team (CreateRun.Team)
	}
	runID, err := svc.Journal(ctx, service.Local(a.person("")), created, "")
	if err != nil {
		return "", err
	}
	x := a.execution(rt, run, live, jsonOut, quiet)
	if live.chat {
		var interrupted bool
		interrupted, err = a.prompt.Turn(ctx, func(ctx context.Context) error {
			return execute(ctx, x, runID, nil, "")
		})
		err = a.converse(ctx, x, runID, err, interrupted)
	} else {
		err = execute(ctx, x, runID, nil, "")
	}
	if !jsonOut && !quiet && !live.demo {
		// What the run changed matters most when Ctrl-C ended it: read
		// it all the same, within closingTimeout.
		ctx, cancel := closingContext(ctx)
		defer cancel()
		tui.EndDiff(ctx, a.stderr, &local{a: a, store: store}, runID, created, func() ([]journal.Event, error) { return store.Read(ctx, runID, 1) }, a.keelCmd())
	}
	return runID, err
}

func readTask(f *runFlags, args []string) (string, error) {
	if f.taskFile != "" && len(args) > 0 {
		return "", usagef("give the task as an argument or with --task-file, not both")
	}
	if f.taskFile != "" {
		var r io.Reader = os.Stdin
		if f.taskFile != "-" {
			file, err := os.Open(f.taskFile)
			if err != nil {
				return "", usagef("--task-file: %v", err)
			}
			defer file.Close()
			r = file
		}
		b, err := io.ReadAll(io.LimitReader(r, maxTaskBytes+1))
		if err != nil {
			return "", usagef("--task-file: %v", err)
		}
		if len(b) > maxTaskBytes {
			return "", usagef("--task-file: the task is over %d bytes; put large material in the workspace and refer to it", maxTaskBytes)
		}
		if strings.TrimSpace(string(b)) == "" {
			return "", usagef("--task-file %s: the task is empty", f.taskFile)
		}
		return string(b), nil
	}
	if len(args) == 1 {
		return args[0], nil
	}
	return "", nil
}

// maxTaskBytes bounds a task read from a file: 1 MiB.
const maxTaskBytes = 1 << 20

func (a *app) modelSpec(flag string) (model.Spec, error) {
	s := flag
	if s == "" && a.cfg != nil {
		s = a.cfg.Model
	}
	if s == "" {
		return model.Spec{}, usagef("no model: pass --model (openai:MODEL, anthropic:MODEL, openai-compatible:MODEL@URL, replay:PATH) or set model in %s/config.toml; `keel demo` runs without one", a.home)
	}
	spec, err := model.ParseSpec(s)
	if err != nil {
		return model.Spec{}, &usageError{err}
	}
	return spec, nil
}

// settings returns the execution settings the flags give (journaled in
// run.created).
func (f *runFlags) settings() agent.Settings {
	return agent.Settings{
		CommandTimeout:     agent.Duration(f.commandTimeout),
		CommandIdleTimeout: agent.Duration(f.commandIdle),
		Concurrency:        f.concurrency,
		MaxResultChars:     f.maxResultChars,
		MaxOutputTokens:    f.maxOutputTokens,
		ModelIdleTimeout:   agent.Duration(f.idleTimeout),
		ModelStallRetries:  f.stallRetries,
		ModelRetries:       f.retries,
		NoCheckpoints:      !f.checkpoints,
	}
}

// registerCheckpointFlags registers --checkpoints (a setting like any
// other: [run] checkpoints = false in a config file) and its
// command-line form --no-checkpoints.
func registerCheckpointFlags(fl *pflag.FlagSet, f *runFlags) {
	fl.BoolVar(&f.checkpoints, "checkpoints", true, "snapshot the workspace's files after each step that changed them, for keel runs rewind and fork (--no-checkpoints: none)")
	fl.BoolVar(&f.noCheckpoints, "no-checkpoints", false, "take no workspace checkpoints (the run cannot be rewound or forked with its files)")
	// Listed (keel config show) and set from files as checkpoints.
	_ = fl.MarkHidden("no-checkpoints")
}

// checkpointsGiven folds --no-checkpoints into --checkpoints, so that the
// command line wins over the files and keel config show lists one
// setting.
func checkpointsGiven(fl *pflag.FlagSet, given map[string]bool) error {
	if !given["no-checkpoints"] {
		return nil
	}
	no, _ := fl.GetBool("no-checkpoints")
	if given["checkpoints"] {
		if on, _ := fl.GetBool("checkpoints"); on == no {
			return usagef("--checkpoints=%t and --no-checkpoints=%t contradict each other: give one", on, no)
		}
	}
	given["checkpoints"] = true
	return fl.Set("checkpoints", strconv.FormatBool(!no))
}

// checkSecretEnv checks --secret-env names: each a variable set in Keel's
// environment.
func (a *app) checkSecretEnv(names []string) error {
	for _, n := range names {
		if !envName().MatchString(n) {
			return usagef("--secret-env %q: want the NAME of an environment variable", n)
		}
		if a.getenv(n) == "" {
			return usagef("--secret-env %s: the variable is not set in Keel's environment", n)
		}
	}
	return nil
}

// secretHosts reads --secret-for-host NAME=HOST and --secret-in-body
// NAME: each NAME a variable set in Keel's environment (of whose, for
// keel serve), each --secret-in-body one of them. The service checks a
// run's (service.SecretHostError, worded by secretHostError); keel
// serve checks its bindings' hosts.
func (a *app) secretHosts(entries, inBody []string, whose string) ([]agent.SecretHost, error) {
	var out []agent.SecretHost
	for _, e := range entries {
		name, host, ok := strings.Cut(e, "=")
		if !ok || !envName().MatchString(name) || host == "" {
			return nil, usagef("--secret-for-host %q: want NAME=HOST (the variable of %s and the host its value is for)", e, whose)
		}
		if a.getenv(name) == "" {
			return nil, usagef("--secret-for-host %s: the variable is not set in Keel's environment", name)
		}
		out = append(out, agent.SecretHost{Name: name, Host: host, Body: slices.Contains(inBody, name)})
	}
	for _, n := range inBody {
		if !slices.ContainsFunc(out, func(h agent.SecretHost) bool { return h.Name == n }) {
			return nil, usagef("--secret-in-body %s: want the NAME of a --secret-for-host NAME=HOST", n)
		}
	}
	return out, nil
}

// secretHostError is the service's refusal err as keel run words it: a
// secret for a host with its flag.
func secretHostError(err error) error {
	var e *service.SecretHostError
	if errors.As(err, &e) {
		return usagef("--secret-for-host %s=%s: %s", e.Name, e.Host, e.Problem)
	}
	return err
}

// envName is the shape of an environment variable's name.
var envName = lazy.Regexp(`^[A-Za-z_][A-Za-z0-9_]*$`)
