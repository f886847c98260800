// Package assemble turns a journaled run.created into the live parts of
// an execution of the run ([agent.Wiring]): the model client, the
// workspace and its sandbox, the built-in tools, the run's MCP servers
// and connectors with the credential vault behind them, the checkpoint
// hook and the trace hooks. keel run, the team server's pool and keel
// worker all build runs with one [Assembler], whose fields the command
// line fills from flags, config.toml and the environment.
package assemble

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/eval"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/internal/config"
	"github.com/keel-run/keel/internal/demo"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/anthropic"
	"github.com/keel-run/keel/model/codeact"
	"github.com/keel-run/keel/model/openai"
	"github.com/keel-run/keel/model/replay"
	"github.com/keel-run/keel/redact"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/linux"
	"github.com/keel-run/keel/sandbox/none"
	"github.com/keel-run/keel/telemetry"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin"
	"github.com/keel-run/keel/tool/builtin/httpreq"
	"github.com/keel-run/keel/tool/builtin/shell"
	"github.com/keel-run/keel/tool/builtin/web"
	"github.com/keel-run/keel/tool/mcp"
)

// Assembler builds the live parts of runs: one per process, its fields
// filled by the command line from flags, config.toml and the
// environment. The zero value assembles runs with no configuration
// (providers' own endpoints and keys only, no vault, no tracing). An
// Assembler is safe for concurrent use once its fields are set.
type Assembler struct {
	// Home is Keel's directory (KEEL_HOME): the checkpoint store is
	// under it, and no run's workspace may hold it or its config.toml
	// and server token.
	Home string
	// Journal is the journal's path or DSN: no run's workspace may hold
	// it, and the vault of a run's tools opens it (see OpenVault).
	Journal string
	// Config is the user's config.toml: model endpoints and their key
	// variables, the price table, MCP servers' authorization, the full
	// connection strings of SQL databases. nil means none.
	Config *config.Config
	// Getenv reads the environment: API keys, the providers' *_BASE_URL,
	// OpenAPI tokens. nil means an empty environment.
	Getenv func(string) string
	// Notes receives warnings and notes for the person who started the
	// run (no isolation, a changed MCP tool held, a server waiting for an
	// authorization); nil discards them.
	Notes io.Writer
	// Metrics, if set, observes sandbox start times.
	Metrics *telemetry.Metrics
	// Tracing is set when trace export is configured: model requests,
	// shell commands and HTTP calls then carry the run's W3C trace
	// context.
	Tracing bool
	// OpenJournal opens the journal to read what earlier runs pinned of
	// the MCP servers a new run uses; nil means journal.Open of Journal.
	OpenJournal func(ctx context.Context) (journal.Store, error)
	// OpenVault opens the credential vault on a journal; it is called
	// on a run's first authorized request, so that runs that make none
	// need no vault key. nil means runs have no vault.
	OpenVault func(journal.Store) (*credential.Vault, error)
	// MoreTools, if set, adds the tools of a run that need more than the
	// run itself: its memory and skills, which live in the journal and
	// in Keel's home (internal/cli). It returns what to close with the
	// run.
	MoreTools func(ctx context.Context, c *agent.RunCreated, r *tool.Registry, p *Params) (func() error, error)
	// EgressRoots verifies the hosts of runs' secrets for hosts when the
	// sandbox's proxy connects to them; nil means the system's roots.
	// Tests set it for a local TLS server.
	EgressRoots *x509.CertPool
}

// Params are what one execution brings beyond its run's journal: the
// model's key named on the command line, a loaded recording, and full
// connection strings. nil means none.
type Params struct {
	// APIKey is the model's key (--api-key); APIKeyEnv the variable that
	// holds it (--api-key-env). Empty: see [Assembler.ModelKey].
	APIKey, APIKeyEnv string
	// Recording is the loaded trajectory of a replay: model (nil: loaded
	// from the spec's path).
	Recording *replay.Trajectory
	// SQLDSN are the full connection strings of the run's databases by
	// name, passwords included, for this process only.
	SQLDSN map[string]string
	// ProposeSkills offers a new run propose_skill and promote_skill
	// (keel run --propose-skills); a resumed run keeps its tools.
	ProposeSkills bool
}

// Run is the live parts of one execution of a run. Close it when the
// execution ends.
type Run struct {
	agent.Wiring
	// Priced reports whether the model has a known price; PriceKey is
	// the name its price is looked up by in the price table (config.toml's
	// [prices."NAME"]): the spec's model name, or a recording's model.
	Priced   bool
	PriceKey string
	// SandboxNote names the sandbox ("linux", "none (NO isolation)");
	// Mechanisms describes how the linux sandbox isolates (keel run -v).
	SandboxNote, Mechanisms string

	sb     sandbox.Sandbox
	ws     *tool.Workspace
	params *Params
	// mcp are the run's MCP connections, closers its connectors'.
	mcp     []*mcp.Client
	closers []func() error
	// vault gives the tools their credentials (opened on first use).
	vault *lazyVault
}

var _ io.Closer = (*Run)(nil)

// Close stops the run's sandbox, MCP servers and connectors and releases
// its workspace and vault. It returns nil.
func (w *Run) Close() error {
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
	return nil
}

// Wire is [Assembler.Assemble] as an [agent.WireFunc], with params p for
// every run.
func (a *Assembler) Wire(p *Params) agent.WireFunc {
	return func(ctx context.Context, c *agent.RunCreated) (*agent.Wiring, io.Closer, error) {
		r, err := a.Assemble(ctx, c, p)
		if err != nil {
			return nil, nil, err
		}
		return &r.Wiring, r, nil
	}
}

// UsageError marks an error that is the fault of the command line or the
// configuration (keel exits with status 2): a missing API key, a
// workspace holding Keel's files, a bad mount path.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usagef(format string, args ...any) error {
	return &UsageError{fmt.Errorf(format, args...)}
}

// MissingSecretError refuses to execute a run one of whose secret
// variables (--secret-env) this process's environment lacks: the run
// would go on without what it was given.
type MissingSecretError struct{ Name string }

func (e *MissingSecretError) Error() string {
	return fmt.Sprintf("assemble: the run's secret variable %s is not set in this process's environment", e.Name)
}

// secretEnv returns the sandbox's environment: the run's --env entries
// and its secret variables, whose values come from this process's
// environment (never from the journal), and the secrets the run holds.
// A secret variable that is not set is an error: the run would start
// without what it was given.
func (a *Assembler) secretEnv(c *agent.RunCreated) ([]string, []agent.Secret, error) {
	secrets, missing := c.SecretValues(a.getenv)
	if len(missing) > 0 {
		return nil, nil, &MissingSecretError{Name: missing[0]}
	}
	env := slices.Clone(c.Env)
	for _, s := range secrets[:len(c.SecretEnv)] {
		env = append(env, s.Name+"="+s.Value)
	}
	return env, secrets, nil
}

// gitIdentity returns env with the identity git gives the commits made
// in the sandbox (docs/sandbox.md, "Git identity"), whose HOME is
// private and empty: the one git on this machine gives a commit in the
// workspace (checkpoint.Identity: the repository's user.name and
// user.email, the user's, git's variables), else the run's agent with an
// address that reaches nobody (keel-cli <keel-cli@keel.invalid>). It is
// set as GIT_AUTHOR_NAME, GIT_AUTHOR_EMAIL, GIT_COMMITTER_NAME and
// GIT_COMMITTER_EMAIL, each unless the run's --env sets it; nobody's
// configuration is written.
func gitIdentity(ctx context.Context, env []string, c *agent.RunCreated) []string {
	name, email, ok := checkpoint.Identity(ctx, c.Workspace)
	if !ok {
		name, email = AgentGitIdentity(c.Principal)
	}
	for _, kv := range [][2]string{{"GIT_AUTHOR_NAME", name}, {"GIT_AUTHOR_EMAIL", email}, {"GIT_COMMITTER_NAME", name}, {"GIT_COMMITTER_EMAIL", email}} {
		if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, kv[0]+"=") }) {
			env = append(env, kv[0]+"="+kv[1])
		}
	}
	return env
}

// AgentGitIdentity is the git identity of the commits an agent makes in
// the sandbox when this machine's git has none: the agent's name, and an
// address under the reserved domain keel.invalid, which reaches nobody.
func AgentGitIdentity(principal string) (name, email string) {
	name = cmp.Or(principal, identity.LocalAgent)
	local := strings.Map(func(r rune) rune {
		if r == '/' || r == '@' {
			return '.'
		}
		return r
	}, name)
	return name, local + "@keel.invalid"
}

func (a *Assembler) getenv(k string) string {
	if a.Getenv == nil {
		return ""
	}
	return a.Getenv(k)
}

func (a *Assembler) notef(format string, args ...any) {
	if a.Notes != nil {
		fmt.Fprintf(a.Notes, format, args...)
	}
}

// CheckpointStore is where runs' workspace checkpoints are kept under
// Keel's directory home.
func CheckpointStore(home string) string { return filepath.Join(home, "checkpoints") }

// Prestart starts, in the background, the Linux sandbox's init of the
// next run this process assembles, before the run is known: a command
// about to execute a run (keel runs resume) calls it first, so that the
// init (this program executed again, whose start-up costs as much as
// the command's own) starts while the journal is opened, read and
// folded. Assemble takes it, or starts its own for a run whose sandbox
// differs; a process that assembles nothing leaves it to exit with the
// process.
func Prestart() {
	if runtime.GOOS == "linux" {
		linux.Prestart(nil)
	}
}

// Assemble builds the model, sandbox, workspace and tools of an
// execution of the run that c (its run.created payload, with the
// settings the run has now) describes. p may be nil.
func (a *Assembler) Assemble(ctx context.Context, c *agent.RunCreated, p *Params) (_ *Run, err error) {
	if p == nil {
		p = &Params{}
	}
	w := &Run{params: p}
	if c.Sandbox != "none" && runtime.GOOS == "linux" {
		// The sandbox's init starts while the rest is assembled.
		linux.Prestart(nil)
	}
	if a.Tracing {
		w.Trace = telemetry.TraceContext
	}
	set := settingsOf(c)
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
	if c.Live != "" {
		if err := a.thenLive(spec, c.Live, w, set); err != nil {
			return nil, err
		}
	}
	if c.FormatError != "" {
		// Text-action mode: code blocks in the model's text are its calls.
		w.Model = codeact.New(w.Model, &codeact.Options{CompletionMarker: c.CompletionMarker})
	}
	if err := a.CheckWorkspace(c.Workspace); err != nil {
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
	shared, release := holdWorkspace(ws.Root())
	w.closers = append(w.closers, func() error { release(); return nil })
	if shared != "" {
		a.notef("keel: WARNING: another run is executing in this workspace (%s): its changes and this run's will mix, and the change summary, keel runs diff and keel runs rewind of either can include the other's files. Run them one after the other, or give each its own workspace (git worktree add DIR).\n", shared)
	}
	readOnly := mcpReadOnly(c.MCP)
	if c.StateDir != "" {
		// Keel's own files, outside the workspace; the sandbox shows
		// them read-only at the same path (whole outputs a result names).
		if err := ws.SetState(c.StateDir); err != nil {
			return nil, err
		}
		readOnly = append(readOnly, ws.StateDir())
	}
	env, secrets, err := a.secretEnv(c)
	if err != nil {
		return nil, err
	}
	env = gitIdentity(ctx, env, c)
	w.Secrets = secrets
	values := make([]string, len(secrets))
	var proxySecrets []linux.Secret // refused in plain HTTP by the egress proxy
	for i, s := range secrets {
		values[i] = s.Value
		proxySecrets = append(proxySecrets, linux.Secret{Name: s.Name, Value: s.Value})
	}
	hidePath := redact.Values(values...)
	// Secrets for hosts: the sandbox gets placeholders, the proxy the
	// values (secrets lists them last).
	var hostSecrets []linux.HostSecret
	for i, h := range c.SecretHosts {
		s := secrets[len(secrets)-len(c.SecretHosts)+i]
		hostSecrets = append(hostSecrets, linux.HostSecret{Name: h.Name, Value: s.Value, Host: h.Host, Body: h.Body})
	}
	sspec := &sandbox.Spec{
		Workspace: ws.Root(),
		MountPath: c.MountPath,
		Env:       env,
		Limits:    c.SandboxLimits,
		Network:   sandbox.Network{Allow: c.Network},
		Protected: protectedPaths(c),
		Hidden:    hidden,
	}
	sbStart := time.Now()
	switch c.Sandbox {
	case "none":
		if len(hostSecrets) > 0 {
			return nil, usagef("secrets for hosts (--secret-for-host) need the linux sandbox: its egress proxy puts them in; with --sandbox none there is none")
		}
		a.notef("keel: WARNING: --sandbox none: commands run directly on this machine with NO isolation (your files, network and credentials are reachable)\n")
		sb, err := none.New(sspec)
		if err != nil {
			return nil, err
		}
		w.sb, w.SandboxNote = sb, "none (NO isolation)"
	default:
		if runtime.GOOS != "linux" {
			return nil, fmt.Errorf("the linux sandbox needs Linux; on %s pass --sandbox none to run without isolation", runtime.GOOS)
		}
		w.Recorder = &agent.Recorder{}
		rec := w.Recorder
		sb, err := linux.New(sspec, &linux.Options{ReadOnlyPaths: readOnly, StateDir: c.StateDir, Secrets: proxySecrets, HostSecrets: hostSecrets, EgressRoots: a.EgressRoots, OnEgress: func(d linux.EgressDecision) {
			// Journal each decision of the egress proxy in the run. The
			// proxy serves connections from its own goroutines; Record
			// serialises with the executor's appends.
			// A path is journaled without the run's secrets (or likely
			// ones).
			e := &agent.SandboxEgress{Phase: d.Phase, Host: d.Host, Port: d.Port, Allowed: d.Allowed, Reason: d.Reason,
				Method: d.Method, Path: hidePath(d.Path), BytesOut: d.BytesOut, BytesIn: d.BytesIn}
			if d.Substituted != "" {
				e.Substituted = strings.Split(d.Substituted, ", ")
			}
			// A connection made before the execution is bound (a stdio
			// MCP server starting while the run is assembled) is
			// journaled when it starts.
			_ = rec.RecordOrKeep(context.Background(), journal.SandboxEgress, e)
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
				return nil, &UsageError{err} // a bad --mount-path or --allow-host
			}
			return nil, err
		}
		w.sb, w.SandboxNote = sb, "linux"
		w.Mechanisms = sb.Mechanisms().String()
	}
	if w.Recorder == nil {
		// MCP servers' questions to a person are journaled through it.
		w.Recorder = &agent.Recorder{}
	}
	if a.Metrics != nil {
		a.Metrics.ObserveSandboxStart(time.Since(sbStart))
	}
	w.vault = &lazyVault{a: a}
	if !set.NoCheckpoints {
		var release func()
		var warm func(context.Context)
		w.Checkpoint, warm, release = checkpoint.WarmHook(CheckpointStore(a.Home), ws.Root())
		w.closers = append(w.closers, func() error { release(); return nil })
		if warm != nil {
			// The execution's first snapshot is taken while the rest is
			// assembled and the execution starts (after the sandbox's
			// git guard has looked at the workspace).
			go warm(context.WithoutCancel(ctx))
		}
	}
	w.MemoryWatch = MemoryWatch(StateDir(a.Home, c.Workspace), ws.Root(), c.Labels[createdByToken])
	w.CodeFiles = a.codeFiles(c.Workspace)
	w.Tools = newTools(set, w.vault, NetworkTools(c))
	if a.MoreTools != nil {
		closer, err := a.MoreTools(ctx, c, w.Tools, w.params)
		if closer != nil {
			w.closers = append(w.closers, closer)
		}
		if err != nil {
			return nil, err
		}
	}
	w.Env = &tool.Env{Sandbox: w.sb, Workspace: ws, Network: sspec.Network, CommandTimeout: time.Duration(set.CommandTimeout), MaxResultChars: set.MaxResultChars}
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

// NetworkTools reports whether run c is offered fetch_url and
// http_request: when its network allowlist names a host (without one
// both tools refuse every URL, vault or not), and on resume of a run
// whose run.created lists them (journaled before they were left out).
func NetworkTools(c *agent.RunCreated) bool {
	if len(c.Network) > 0 {
		return true
	}
	return slices.ContainsFunc(c.Tools, func(t agent.ToolInfo) bool {
		return t.Server == "" && (t.Name == web.Name || t.Name == httpreq.Name)
	})
}

// Tools returns the built-in tools of a run with settings s, as
// run.created records them (without starting a sandbox); network says
// whether the run may reach a host ([NetworkTools]).
func Tools(s agent.Settings, network bool) []agent.ToolInfo {
	return agent.ToolInfos(newTools(s, nil, network))
}

// ToolRegistry returns the built-in tools of a run with settings s, to
// record (not run: http_request has no vault).
func ToolRegistry(s agent.Settings, network bool) *tool.Registry { return newTools(s, nil, network) }

// ToolInfos returns the tools of an assembled run as run.created records
// them (a new run's MCP tools pinned).
func (w *Run) ToolInfos() []agent.ToolInfo { return agent.ToolInfos(w.Tools) }

// newTools returns the built-in tools of a run with settings s, with
// http_request's credentials from vault (nil: none); fetch_url and
// http_request only when network.
func newTools(s agent.Settings, vault httpreq.Vault, network bool) *tool.Registry {
	r := tool.NewRegistry()
	o := &builtin.Options{Shell: &shell.Options{IdleTimeout: time.Duration(s.CommandIdleTimeout)}, NoWeb: !network, NoHTTP: !network}
	if vault != nil {
		o.HTTP = &httpreq.Options{Vault: vault}
	}
	builtin.Register(r, o)
	return r
}

// newModel builds the model client for spec, with keys from the params or
// the environment.
func (a *Assembler) newModel(spec model.Spec, w *Run, set agent.Settings) error {
	w.ModelName = spec.String()
	prices := model.DefaultPrices()
	if a.Config != nil {
		prices = a.Config.PriceTable()
	}
	name := spec.Name
	switch spec.Provider {
	case "openai", "openai-compatible":
		key, err := a.ModelKey(spec, w.params.APIKey, w.params.APIKeyEnv)
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
		w.Model = m
	case "anthropic":
		key, err := a.ModelKey(spec, w.params.APIKey, w.params.APIKeyEnv)
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
		w.Model = m
	case "replay":
		// The loaded recording is the run's own; a child made from a
		// definition with a replay of its own loads that one.
		rec := w.params.Recording
		if rec == nil || rec.Path() != spec.Name {
			var err error
			if rec, err = replay.Load(spec.Name); err != nil {
				return err
			}
		}
		w.Model = replay.New(rec, nil)
		name = rec.Model()
	case "scripted":
		if spec.Name != "demo" {
			return fmt.Errorf("unknown scripted model %q (only scripted:demo exists)", spec.Name)
		}
		w.Model = demo.NewModel()
		w.Price = func(model.Usage) float64 { return 0 }
		return nil
	default:
		return fmt.Errorf("unknown model provider %q", spec.Provider)
	}
	w.PriceKey = name
	if p, ok := prices.Lookup(name); ok {
		w.Price, w.Priced = p.Cost, true
	} else {
		w.Price = func(model.Usage) float64 { return 0 }
	}
	return nil
}

// thenLive makes the replay w.Model hand over to the live model spec
// from the first divergence from its recording (RunCreated.Live). Each
// answer is priced at the prices of the model that gave it: the
// recording's model or the live one.
func (a *Assembler) thenLive(spec model.Spec, live string, w *Run, set agent.Settings) error {
	rec, ok := w.Model.(*replay.Model)
	if spec.Provider != "replay" || !ok {
		return fmt.Errorf("a live model (%s) takes over from a recording: the run's model %s is not a replay", live, spec)
	}
	ls, err := model.ParseSpec(live)
	if err != nil {
		return err
	}
	if ls.Provider == "replay" && ls.Name == spec.Name {
		return fmt.Errorf("the live model %s is the recording itself", live)
	}
	name, recPrice := w.ModelName, w.Price
	if err := a.newModel(ls, w, set); err != nil {
		return fmt.Errorf("live model: %w", err)
	}
	w.ModelName = name
	m := replay.ThenLive(rec.Trajectory(), w.Model, &replay.LiveOptions{Volatile: eval.DefaultVolatile()})
	w.Model, w.Price = m, m.Price(recPrice, w.Price)
	return nil
}

// sdkRetries maps --model-retries to the providers' MaxRetries, where 0
// means the SDK's default and a negative value none.
func sdkRetries(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// modelHTTPClient is the HTTP client of the provider adapters: nil (their
// default) unless tracing is on, then one whose requests carry the model
// call's traceparent.
func (a *Assembler) modelHTTPClient() *http.Client {
	if !a.Tracing {
		return nil
	}
	return &http.Client{Transport: telemetry.Transport(http.DefaultTransport.(*http.Transport).Clone())}
}
