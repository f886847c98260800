package cli

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/internal/demo"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/anthropic"
	"github.com/keel-run/keel/model/codeact"
	"github.com/keel-run/keel/model/openai"
	"github.com/keel-run/keel/model/replay"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/linux"
	"github.com/keel-run/keel/sandbox/none"
	"github.com/keel-run/keel/telemetry"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin"
	"github.com/keel-run/keel/tool/builtin/httpreq"
	"github.com/keel-run/keel/tool/builtin/shell"
	"github.com/keel-run/keel/tool/mcp"
)

// liveOptions are what an execution needs beyond the run's journal: the
// API key, a loaded recording, and what a resume changes (journaled in
// run.resumed). The execution settings (timeouts, concurrency, result
// size, model retries) are the run's own: newWiring reads them from
// RunCreated.Settings (see settingsOf).
type liveOptions struct {
	apiKey string
	// apiKeyEnv is --api-key-env: the variable holding the model's key.
	apiKeyEnv string
	recording *recording
	// limits and settings, on a resume, replace the run's limits and
	// execution settings (journaled).
	limits   *agent.Limits
	settings *agent.Settings
	// sqlDSN are the full connection strings of --sql, passwords
	// included, for this process only.
	sqlDSN map[string]string
	// handoff and contextWindow are passed to agent.ExecParams.
	handoff       bool
	contextWindow int
	// gate holds the approval-wait flags (policy.go).
	gate gateFlags
	// chat is keel chat / keel run -i: after each answer, the person's
	// next message continues the run.
	chat bool
}

// wiring is everything live an execution of a run needs.
type wiring struct {
	model     model.Model
	modelName string
	price     func(model.Usage) float64
	priced    bool
	tools     *tool.Registry
	env       *tool.Env
	sb        sandbox.Sandbox
	sbNote    string
	// mechanisms describes how the linux sandbox isolates (printed by
	// `keel run -v`); recorder journals its egress decisions.
	mechanisms string
	recorder   *agent.Recorder
	ws         *tool.Workspace
	live       *liveOptions
	// trace, when tracing is on, gives model calls and tool runs their
	// trace context (telemetry.TraceContext).
	trace func(context.Context, agent.Operation) context.Context
	// mcp are the run's MCP connections, closers its connectors' (closed
	// with the wiring).
	mcp     []*mcp.Client
	closers []func() error
	// vault gives http_request its credentials (opened on first use).
	vault *lazyVault
	// checkpoint snapshots the workspace after each step that changed
	// it (nil without git).
	checkpoint func(context.Context, string, *agent.Snapshot) (*agent.WorkspaceCheckpoint, error)
}

func (w *wiring) Close() {
	if w.vault != nil {
		w.vault.Close()
	}
	for _, c := range w.mcp {
		c.Close()
	}
	for _, c := range w.closers {
		c()
	}
	if w.sb != nil {
		w.sb.Close()
	}
	if w.ws != nil {
		w.ws.Close()
	}
}

func (w *wiring) execParams(onEvent func(e eventT)) *agent.ExecParams {
	return &agent.ExecParams{
		Model:         w.model,
		ModelName:     w.modelName,
		Price:         w.price,
		Tools:         w.tools,
		Env:           w.env,
		OnEvent:       onEvent,
		Recorder:      w.recorder,
		Handoff:       w.live.handoff,
		ContextWindow: w.live.contextWindow,
		Wait:          w.live.gate.waiting(),
		IfLastSeq:     w.live.gate.ifLastSeq,
		Limits:        w.live.limits,
		Settings:      w.live.settings,
		Trace:         w.trace,
		Checkpoint:    w.checkpoint,
	}
}

// sandboxKind validates --sandbox and applies the default.
func (a *app) sandboxKind(flag string) (string, error) {
	k, from := flag, ""
	if k == "" && a.cfg != nil {
		k, from = a.cfg.Sandbox, a.configFile()
	}
	if k == "" {
		k = "linux"
	}
	switch k {
	case "linux", "none":
		return k, nil
	}
	if from != "" {
		return "", usagef("sandbox = %q in %s: want linux or none", k, from)
	}
	return "", usagef("--sandbox %q: want linux or none", k)
}

// newWiring builds the model, sandbox, workspace and tools for a run as
// its run.created payload describes them.
func (a *app) newWiring(ctx context.Context, c *agent.RunCreated, live *liveOptions) (_ *wiring, err error) {
	w := &wiring{live: live}
	if a.tracing() {
		w.trace = telemetry.TraceContext
	}
	set := settingsOf(c)
	if live.settings != nil {
		set = *live.settings
	}
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	spec, err := model.ParseSpec(c.Model)
	if err != nil {
		return nil, err
	}
	if err := a.newModel(spec, w, set); err != nil {
		return nil, err
	}
	if c.FormatError != "" {
		// Text-action mode: code blocks in the model's text are its calls.
		w.model = codeact.New(w.model, &codeact.Options{CompletionMarker: c.CompletionMarker})
	}
	if err := checkJournalOutside(a.dbPath(), c.Workspace); err != nil {
		return nil, err
	}
	if err := checkHomeOutside(a.home, c.Workspace); err != nil {
		return nil, err
	}
	ws, err := tool.NewWorkspace(c.Workspace, c.MountPath, protectedPaths(c))
	if err != nil {
		return nil, err
	}
	hidden, err := deniedPaths(c)
	if err != nil {
		return nil, err
	}
	ws.Hide(hidden)
	w.ws = ws
	readOnly := mcpReadOnly(c.MCP)
	if c.StateDir != "" {
		// Keel's own files, outside the workspace; the sandbox shows
		// them read-only at the same path (whole outputs a result names).
		if err := ws.SetState(c.StateDir); err != nil {
			return nil, err
		}
		readOnly = append(readOnly, ws.StateDir())
	}
	sspec := &sandbox.Spec{
		Workspace: ws.Root(),
		MountPath: c.MountPath,
		Env:       c.Env,
		Limits:    c.SandboxLimits,
		Network:   sandbox.Network{Allow: c.Network},
		Protected: protectedPaths(c),
		Hidden:    hidden,
	}
	sbStart := time.Now()
	switch c.Sandbox {
	case "none":
		fmt.Fprintln(a.stderr, "keel: WARNING: --sandbox none: commands run directly on this machine with NO isolation (your files, network and credentials are reachable)")
		sb, err := none.New(sspec)
		if err != nil {
			return nil, err
		}
		w.sb, w.sbNote = sb, "none (NO isolation)"
	default:
		if runtime.GOOS != "linux" {
			return nil, fmt.Errorf("the linux sandbox needs Linux; on %s pass --sandbox none to run without isolation", runtime.GOOS)
		}
		w.recorder = &agent.Recorder{}
		rec := w.recorder
		sb, err := linux.New(sspec, &linux.Options{ReadOnlyPaths: readOnly, StateDir: c.StateDir, OnEgress: func(d linux.EgressDecision) {
			// Journal each decision of the egress proxy in the run. The
			// proxy serves connections from its own goroutines; Record
			// serialises with the executor's appends.
			_ = rec.Record(context.Background(), journal.SandboxEgress, &agent.SandboxEgress{Phase: d.Phase, Host: d.Host, Port: d.Port, Allowed: d.Allowed, Reason: d.Reason})
		}, OnQuarantine: func(q linux.Quarantine) {
			// The git guard moved a planted file out of the way, made a
			// directory readable, or could not make something safe:
			// journal it (what it found at New, before the execution,
			// is journaled when the execution starts).
			p := &agent.SandboxQuarantine{Path: q.Path, MovedTo: q.MovedTo, Action: q.Action, Reason: q.Reason}
			if q.Err != nil {
				p.Error = q.Err.Error()
			}
			_ = rec.RecordOrKeep(context.Background(), journal.SandboxQuarantine, p)
		}})
		if err != nil {
			if errors.Is(err, sandbox.ErrUnavailable) {
				return nil, fmt.Errorf("%w\nKeel will not run tools without isolation unless you pass --sandbox none", err)
			}
			if errors.Is(err, sandbox.ErrInvalidSpec) {
				return nil, &usageError{err} // a bad --mount-path or --allow-host
			}
			return nil, err
		}
		w.sb, w.sbNote = sb, "linux"
		w.mechanisms = sb.Mechanisms().String()
	}
	if w.recorder == nil {
		// MCP servers' questions to a person are journaled through it.
		w.recorder = &agent.Recorder{}
	}
	if a.metrics != nil {
		a.metrics.ObserveSandboxStart(time.Since(sbStart))
	}
	w.vault = &lazyVault{a: a}
	if !set.NoCheckpoints {
		var release func()
		w.checkpoint, release = checkpoint.Hook(a.checkpointStore(), ws.Root())
		w.closers = append(w.closers, func() error { release(); return nil })
	}
	w.tools = newToolsWith(set, w.vault)
	w.env = &tool.Env{Sandbox: w.sb, Workspace: ws, Network: sspec.Network, CommandTimeout: time.Duration(set.CommandTimeout), MaxResultChars: set.MaxResultChars}
	if err := a.connectMCP(ctx, w, c); err != nil {
		return nil, err
	}
	return w, nil
}

// settingsOf returns the execution settings run.created fixed: Keel's
// defaults for a run created before settings were journaled.
func settingsOf(c *agent.RunCreated) agent.Settings {
	if c.Settings != nil {
		return *c.Settings
	}
	return agent.DefaultSettings()
}

// newTools returns the tools of a run with settings s (also used to
// record them in run.created without starting a sandbox).
func newTools(s agent.Settings) *tool.Registry { return newToolsWith(s, nil) }

// newToolsWith is newTools with http_request's credentials from vault
// (nil: none).
func newToolsWith(s agent.Settings, vault httpreq.Vault) *tool.Registry {
	r := tool.NewRegistry()
	o := &builtin.Options{Shell: &shell.Options{IdleTimeout: time.Duration(s.CommandIdleTimeout)}}
	if vault != nil {
		o.HTTP = &httpreq.Options{Vault: vault}
	}
	builtin.Register(r, o)
	return r
}

// newModel builds the model client for spec, with keys from the flags or
// the environment.
func (a *app) newModel(spec model.Spec, w *wiring, set agent.Settings) error {
	w.modelName = spec.String()
	prices := a.cfg.PriceTable()
	name := spec.Name
	switch spec.Provider {
	case "openai", "openai-compatible":
		key, err := a.modelKey(spec, w.live.apiKey, w.live.apiKeyEnv)
		if err != nil {
			return err
		}
		if key == "" && spec.Provider == "openai" {
			return usagef("no API key for %s: %s", spec, keyAdvice(spec))
		}
		if key == "" {
			key = "keel-no-key" // local servers (Ollama, vLLM) accept any key
		}
		base := spec.BaseURL
		if base == "" && spec.Provider == "openai" {
			// The SDK's own variable (an OpenAI-compatible gateway).
			base = a.getenv("OPENAI_BASE_URL")
		}
		m, err := openai.New(&openai.Options{APIKey: key, BaseURL: base, Model: spec.Name, IdleTimeout: time.Duration(set.ModelIdleTimeout), StallRetries: set.ModelStallRetries, MaxRetries: sdkRetries(set.ModelRetries),
			HTTPClient: a.modelHTTPClient()})
		if err != nil {
			return err
		}
		w.model = m
	case "anthropic":
		key, err := a.modelKey(spec, w.live.apiKey, w.live.apiKeyEnv)
		if err != nil {
			return err
		}
		if key == "" {
			return usagef("no API key for %s: %s", spec, keyAdvice(spec))
		}
		base := spec.BaseURL
		if base == "" {
			// The SDK's own variable (an Anthropic-compatible gateway).
			base = a.getenv("ANTHROPIC_BASE_URL")
		}
		m, err := anthropic.New(&anthropic.Options{APIKey: key, BaseURL: base, Model: spec.Name, IdleTimeout: time.Duration(set.ModelIdleTimeout), StallRetries: set.ModelStallRetries, MaxRetries: sdkRetries(set.ModelRetries),
			HTTPClient: a.modelHTTPClient()})
		if err != nil {
			return err
		}
		w.model = m
	case "replay":
		rec := w.live.recording
		if rec == nil {
			var err error
			if rec, err = loadRecording(spec.Name); err != nil {
				return err
			}
		}
		w.model = replay.New(rec.Trajectory, nil)
		name = rec.Model()
	case "scripted":
		if spec.Name != "demo" {
			return fmt.Errorf("unknown scripted model %q (only scripted:demo exists)", spec.Name)
		}
		w.model = demo.NewModel()
		w.price = func(model.Usage) float64 { return 0 }
		return nil
	default:
		return fmt.Errorf("unknown model provider %q", spec.Provider)
	}
	if p, ok := prices.Lookup(name); ok {
		w.price, w.priced = p.Cost, true
	} else {
		w.price = func(model.Usage) float64 { return 0 }
	}
	return nil
}

// recording is a loaded replay trajectory.
type recording struct {
	*replay.Trajectory
}

func loadRecording(path string) (*recording, error) {
	tr, err := replay.Load(path)
	if err != nil {
		return nil, err
	}
	return &recording{tr}, nil
}

func toolInfos(r *tool.Registry) []agent.ToolInfo { return agent.ToolInfos(r) }

// defaultModelRetries is --model-retries' default: with the SDKs'
// exponential backoff (0.5 s doubling, at most 8 s, or the provider's
// Retry-After) four retries wait about 7.5 s in all before a step fails.
const defaultModelRetries = 4

// sdkRetries maps --model-retries to the providers' MaxRetries, where 0
// means the SDK's default and a negative value none.
func sdkRetries(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}
