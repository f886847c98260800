package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/internal/assemble/builder"
	"github.com/keel-run/keel/internal/lazy"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/replay"
	"github.com/keel-run/keel/sandbox/egress"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

var errCanceledBySignal = agent.ErrUserCanceled

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
	if strings.TrimSpace(task) == "" && f.interactive {
		if task, err = a.firstMessage(ctx); err != nil {
			return err
		}
	}
	if strings.TrimSpace(task) == "" {
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
	secretHosts, err := a.secretHosts(f.secretHost, f.secretBody, f.secretEnv, f.env, f.network, sbKind)
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
				NotesFile: f.ctx.notesFile, ActionMode: f.ctx.actionMode, NoMemory: f.ctx.noMemory}},
	}
	if f.mountSet {
		req.MountPath = f.mountPath
	}
	if f.completionMarker != "" {
		req.CompletionMarker = &f.completionMarker
	}
	live := &liveOptions{Params: assemble.Params{APIKey: f.apiKey, APIKeyEnv: f.apiKeyEnv, Recording: rec, SQLDSN: sqlDSN}, gate: f.gate, chat: f.interactive, team: f.team}
	if !f.ctx.noMemory {
		if f.ctx.memoryBudget <= 0 {
			return usagef("--memory-budget %d: want a positive number of tokens (--no-memory leaves memory out)", f.ctx.memoryBudget)
		}
		live.memoryBudget = f.ctx.memoryBudget
	}
	live.skills = !f.ctx.noSkills
	live.ProposeSkills = f.ctx.proposeSkills
	_, err = a.createAndExecute(ctx, ws, func(ctx context.Context, svc *service.Service) (*agent.RunCreated, error) {
		c, err := svc.Prepare(ctx, service.Local(a.person("")), req)
		if err != nil {
			return nil, serviceError(err)
		}
		if err := a.checkPolicy(ctx, c); err != nil {
			return nil, err
		}
		return c, nil
	}, live, f.json, f.quiet)
	return err
}

// createAndExecute prepares a run in the workspace ws through the
// service on the local journal (prepare), wires it in this process,
// journals it and executes it, printing progress. It returns the run id
// (empty if the run could not be created) and the execution's error or
// exit status.
func (a *app) createAndExecute(ctx context.Context, ws string, prepare func(context.Context, *service.Service) (*agent.RunCreated, error), live *liveOptions, jsonOut, quiet bool) (string, error) {
	if err := a.journalNotDir(a.dbPath()); err != nil {
		return "", err
	}
	// Before the journal is opened (and perhaps created): it must not be
	// where the agent's commands can change it.
	if err := a.assembler().CheckWorkspace(ws); err != nil {
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
	if err := a.offer(ctx, store, created, live); err != nil {
		return "", err
	}
	w, err := a.newWiring(ctx, created, live)
	if err != nil {
		return "", err
	}
	defer w.Close()
	created.Tools = w.ToolInfos()
	if live.team {
		if err := builder.OfferTeam(created, ws, a.home); err != nil {
			return "", err
		}
	}
	runID, err := svc.Journal(ctx, service.Local(a.person("")), created, "")
	if err != nil {
		return "", err
	}
	if live.chat {
		var interrupted bool
		interrupted, err = a.prompt.Turn(ctx, func(ctx context.Context) error {
			return a.execute(ctx, rt, runID, w, jsonOut, quiet, "")
		})
		err = a.converse(ctx, rt, runID, w, jsonOut, quiet, err, interrupted)
	} else {
		err = a.execute(ctx, rt, runID, w, jsonOut, quiet, "")
	}
	if !jsonOut && !quiet {
		// What the run changed matters most when Ctrl-C ended it: read
		// it all the same, within closingTimeout.
		ctx, cancel := closingContext(ctx)
		defer cancel()
		tui.EndDiff(ctx, a.stderr, &local{a: a, store: store}, runID, created, func() ([]journal.Event, error) { return store.Read(ctx, runID, 1) })
	}
	return runID, err
}

// execute runs (or resumes) runID with the wiring w, printing progress,
// and maps the outcome to an exit code.
func (a *app) execute(ctx context.Context, rt *agent.Runtime, runID string, w *wiring, jsonOut, quiet bool, message string) error {
	return a.executeLoaded(ctx, rt, runID, nil, w, jsonOut, quiet, message)
}

// loaded is a run's journal read, verified and folded once: what the
// command needs before it executes the run, then Execute's starting
// point ([agent.ExecParams.From]), which reads only what was appended
// after it.
type loaded struct {
	st  *agent.State
	evs []journal.Event
}

// loadRun reads, verifies and folds runID's journal (once).
func loadRun(ctx context.Context, store journal.Store, runID string) (*loaded, error) {
	st, evs, err := agent.NewRuntime(store, nil).Load(ctx, runID)
	if err != nil {
		return nil, err
	}
	return &loaded{st: st, evs: evs}, nil
}

// executeLoaded is execute on the run as ld holds it (nil: read it).
// Execute starts from ld's fold; ld must not be used after.
func (a *app) executeLoaded(ctx context.Context, rt *agent.Runtime, runID string, ld *loaded, w *wiring, jsonOut, quiet bool, message string) error {
	p := tui.NewPrinter(a.stderr, a.stdout, jsonOut, quiet)
	p.OnTerminal(a.term)
	// A conversation at a terminal prints answers on stderr only (they
	// stream there); with stdin piped, a chat's answers go to stdout as
	// keel run's do.
	p.Chat = w.live != nil && w.live.chat && a.inline()
	p.Keel = a.keelCmd()
	// These reads ignore a stop (Ctrl-C) that comes meanwhile, as
	// Execute's own load does: its first step then records it, and the
	// run ends canceled instead of staying as it was.
	rctx := context.WithoutCancel(ctx)
	if ld == nil {
		var err error
		if ld, err = loadRun(rctx, rt.Store(), runID); err != nil {
			return err
		}
	}
	st, evs := ld.st, ld.evs
	created := st.Created
	// Say so before the header when another process executes the run
	// (Execute refuses it too, should one start meanwhile).
	if l, ok := rt.Store().(journal.Locker); ok {
		if h, err := l.Holder(rctx, runID); err == nil && h != "" {
			return withMessage(newBusyError(rctx, rt.Store(), runID), message)
		}
	}
	if !p.Chat || message == "" {
		p.Header(runID, st.Created, w.Run)
	}
	if jsonOut {
		for _, e := range evs {
			p.Event(e)
		}
	} else {
		// A resumed run: learn the earlier calls and steps without
		// printing them again, so that lines name their tools and the
		// step counter goes on.
		p.Prime(evs)
	}
	params := w.execParams(p.Event)
	if !jsonOut {
		params.OnEvent = tui.EstimatedUsageNote(p.Err(), created.Model, params.OnEvent)
	}
	params.Message = message
	// Execute goes on from this fold, reading only what was appended
	// since (it verifies that against the newest hash read here).
	params.From = &agent.Checkpoint{State: st, Hash: evs[len(evs)-1].Hash}
	params.Principals = identity.NewDirectory(rt.Store(), nil).Check
	// One question at a time at the terminal: the lead's and its
	// children's, which may ask at once.
	var asking sync.Mutex
	// Children execute in this process, each wired like its parent. A
	// child's question is asked here as the lead's are; a child that
	// pauses for a person (no terminal, or --no-wait) pauses its lead:
	// nothing here would continue it.
	team := &agent.LocalTeam{Runtime: rt, Wire: a.assembler().Wire(&w.live.Params), ReturnPaused: true, Params: func(_ string, cp *agent.ExecParams) {
		cp.Principals = params.Principals
		cp.Wait = params.Wait
		cp.OnWait = func(pending []agent.PendingApproval) {
			asking.Lock()
			defer asking.Unlock()
			p.Pause()
			defer p.Resume()
			a.childWait(ctx, rt.Store(), pending, params.Wait && !jsonOut && a.inline())
		}
	}}
	defer team.Close()
	params.Team = team
	params.OnWait = func(pending []agent.PendingApproval) {
		asking.Lock()
		defer asking.Unlock()
		p.Pause()
		defer p.Resume()
		if params.Wait && !jsonOut && a.inline() && a.decideInline(ctx, rt.Store(), created, pending) {
			return // decided here: the run goes on
		}
		if w.live != nil && w.live.standIn != "" && !a.inline() && a.approveAsStandIn(ctx, rt.Store(), created, pending, w.live.standIn) {
			return // approved by the stand-in: the run goes on
		}
		if ctx.Err() != nil {
			return // interrupted at the question: the run stops
		}
		a.onWait(pending)
	}
	params.Trace = chainTrace(params.Trace, p.CallContext)
	// Approvals asked at this terminal show the call themselves.
	p.Inline = params.Wait && !jsonOut && a.inline()
	a.prompt.Attach(p)
	defer a.prompt.Attach(nil)
	stopLive := p.StartLive()
	out, err := rt.Execute(ctx, runID, params)
	stopLive()
	if errors.Is(err, agent.ErrRunBusy) {
		return withMessage(newBusyError(ctx, rt.Store(), runID), message)
	}
	if err != nil {
		return err
	}
	p.Footer(runID, out)
	if !jsonOut {
		if out.Status == journal.StatusPaused && out.End != nil && out.End.Reason == agent.ReasonChildren {
			a.childrenWaits(rctx, rt.Store(), runID, out.State)
		}
		a.leadHint(created, out.Status)
	}
	if pending := out.State.Pending(); message != "" && len(pending) > 0 && unread(out.State, message) {
		ids := make([]string, len(pending))
		for i, pa := range pending {
			ids[i] = pa.CallID
		}
		fmt.Fprintf(a.stderr, "keel: your message is journaled; the model reads it once %s %s decided (keel approve|deny %s CALL)\n",
			strings.Join(ids, ", "), map[bool]string{true: "is", false: "are"}[len(ids) == 1], runID)
	}
	switch out.Status {
	case journal.StatusCompleted:
		return nil
	case journal.StatusPaused:
		return &exitError{3}
	case journal.StatusCanceled:
		return &exitError{130}
	default:
		return &exitError{1}
	}
}

// chainTrace runs the per-operation hooks first, then second.
func chainTrace(first, second func(context.Context, agent.Operation) context.Context) func(context.Context, agent.Operation) context.Context {
	if first == nil {
		return second
	}
	return func(ctx context.Context, op agent.Operation) context.Context {
		return second(first(ctx, op), op)
	}
}

// busyError reports that another process executes a run: exit status 1
// (status 3 means "waiting for approval"), one readable sentence instead
// of the runtime's error chain. It wraps agent.ErrRunBusy.
type busyError struct {
	runID, holder string
	message       bool
}

func (e *busyError) Error() string {
	s := fmt.Sprintf("run %s is being executed by %s; wait for it to pause or end (keel runs list), or stop that process", e.runID, e.holder)
	if e.message {
		s += "; your --message was NOT delivered: give it again then"
	}
	return s
}

// unread reports whether message is the newest message of st and comes
// after its newest turn: the model has not read it yet.
func unread(st *agent.State, message string) bool {
	n := len(st.Messages)
	t := st.LastTurn()
	return n > 0 && st.Messages[n-1].Content == message && (t == nil || t.Index < n-1)
}

// withMessage marks a busyError of an execution given a person's message:
// the message was not journaled, and the error says so.
func withMessage(err error, message string) error {
	var b *busyError
	if message != "" && errors.As(err, &b) {
		b.message = true
	}
	return err
}

func (e *busyError) Unwrap() error { return agent.ErrRunBusy }

// newBusyError names the holder of runID's lease when the store knows it.
func newBusyError(ctx context.Context, store journal.Store, runID string) error {
	who := "another process"
	if l, ok := store.(journal.Locker); ok {
		if h, err := l.Holder(ctx, runID); err == nil && h != "" {
			who = "another process (" + h + ")"
		}
	}
	return &busyError{runID: runID, holder: who}
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

// secretHosts checks --secret-for-host NAME=HOST entries: NAME a
// variable set in Keel's environment and given no other way, HOST one
// destination the allowlist allows, in the linux sandbox.
func (a *app) secretHosts(entries, inBody, secretEnv, env, allow []string, sbKind string) ([]agent.SecretHost, error) {
	var out []agent.SecretHost
	allowed := egress.MustParse(allow)
	for _, e := range entries {
		name, host, ok := strings.Cut(e, "=")
		if !ok || !envName().MatchString(name) || host == "" {
			return nil, usagef("--secret-for-host %q: want NAME=HOST (the variable of Keel's environment and the host its value is for)", e)
		}
		if a.getenv(name) == "" {
			return nil, usagef("--secret-for-host %s: the variable is not set in Keel's environment", name)
		}
		if slices.Contains(secretEnv, name) || slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") }) ||
			slices.ContainsFunc(out, func(h agent.SecretHost) bool { return h.Name == name }) {
			return nil, usagef("--secret-for-host %s: the variable is given twice (--env, --secret-env or --secret-for-host)", name)
		}
		l, err := egress.Parse([]string{host})
		if err != nil {
			return nil, usagef("--secret-for-host %s=%s: %v", name, host, err)
		}
		r := l.Rules()[0]
		probe := r.Host
		if r.Wildcard {
			probe = "x." + r.Host
		}
		if !slices.ContainsFunc(r.Ports, func(p int) bool { return allowed.Match(probe, p) != nil }) {
			return nil, usagef("--secret-for-host %s=%s: the host is not allowed; add --allow-host %s", name, host, host)
		}
		if sbKind == "none" {
			return nil, usagef("--secret-for-host needs the linux sandbox (its egress proxy puts the value in); not --sandbox none")
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

// serveSecretHosts checks keel serve's --secret-for-host NAME=HOST
// entries, the operator's bindings of a variable to the host its value
// may go to (a run's allowlist must still allow it), and --secret-in-body
// NAME.
func (a *app) serveSecretHosts(entries, inBody []string) ([]agent.SecretHost, error) {
	var out []agent.SecretHost
	for _, e := range entries {
		name, host, ok := strings.Cut(e, "=")
		if !ok || !envName().MatchString(name) || host == "" {
			return nil, usagef("--secret-for-host %q: want NAME=HOST (the variable of the server's environment and the host its value is for)", e)
		}
		if a.getenv(name) == "" {
			return nil, usagef("--secret-for-host %s: the variable is not set in Keel's environment", name)
		}
		if l, err := egress.Parse([]string{host}); err != nil || len(l.Rules()) != 1 {
			return nil, usagef("--secret-for-host %s=%s: want a host as --allow-host writes it (api.example.com, api.example.com:8443, *.example.com)", name, host)
		}
		if slices.ContainsFunc(out, func(h agent.SecretHost) bool { return h.Name == name && strings.EqualFold(h.Host, host) }) {
			return nil, usagef("--secret-for-host %s=%s is given twice", name, host)
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

// envName is the shape of an environment variable's name.
var envName = lazy.Regexp(`^[A-Za-z_][A-Za-z0-9_]*$`)
