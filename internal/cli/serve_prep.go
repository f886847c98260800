package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/internal/demo"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/replay"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/server"
	"github.com/keel-run/keel/server/api"
)

// serverPrep is the CLI's wiring of a server: how a create request
// becomes a run (prepare), whether a run can be set up (validate), and how
// a run gets its model, tools and sandbox (wire), as `keel run` does it.
// The server (package server) has already checked what the caller may
// ask for: workspace roots, sandbox, policy, agent, models. Errors shown
// to API clients name no flag of this process and no file of the server
// beyond what the client sent.
type serverPrep struct {
	a       *app
	f       *serveFlags
	store   journal.Store
	sandbox string
	policy  *policy.Engine
	live    *liveOptions
	// settings are the execution settings of the runs the server
	// creates (its flags).
	settings agent.Settings
	logger   *slog.Logger
	// active reports the runs this process executes (keel_runs_active).
	active *atomic.Pointer[func() int]
	// roots are the server's workspace roots: demo workspaces are made
	// under the first (in demoDir), else in the system's temporary
	// directory.
	roots []string

	mu         sync.Mutex
	recordings map[string]*replay.Trajectory // loaded replay trajectories, by path, size and time
}

// recording returns the replay trajectory at path, loading it again when
// the file changed (its size or modification time). Any failure is the
// same user-safe error, so that it reveals nothing of the file (its
// existence, or its first bytes); the detail goes to the log.
func (sp *serverPrep) recording(path string) (*replay.Trajectory, error) {
	unavailable := invalidf("replay recording %q is not available on this server (missing, unreadable, or not a trajectory)", path)
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		sp.logger.Warn("replay recording", "path", path, "err", err)
		return nil, unavailable
	}
	key := fmt.Sprintf("%s\x00%d\x00%d", path, fi.Size(), fi.ModTime().UnixNano())
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if r := sp.recordings[key]; r != nil {
		return r, nil
	}
	r, err := replay.Load(path)
	if err != nil {
		sp.logger.Warn("replay recording", "path", path, "err", err)
		return nil, unavailable
	}
	for k := range sp.recordings {
		if strings.HasPrefix(k, path+"\x00") {
			delete(sp.recordings, k)
		}
	}
	sp.recordings[key] = r
	return r, nil
}

// liveFor returns the live options of one execution of a run of model
// spec (a replay shares its loaded trajectory).
func (sp *serverPrep) liveFor(spec string) (*liveOptions, error) {
	live := *sp.live
	if s, err := model.ParseSpec(spec); err == nil && s.Provider == "replay" {
		rec, err := sp.recording(s.Name)
		if err != nil {
			return nil, err
		}
		live.Recording = rec
	}
	return &live, nil
}

func (sp *serverPrep) wire(ctx context.Context, c *agent.RunCreated) (*agent.Wiring, io.Closer, error) {
	live, err := sp.liveFor(c.Model)
	if err != nil {
		return nil, nil, err
	}
	w, err := sp.a.newWiring(ctx, c, live)
	if err != nil {
		return nil, nil, err
	}
	return &w.Wiring, w, nil
}

// validate sets a run up as an execution would (model client, workspace,
// sandbox with its network proxy) and tears it down again, so that a run
// that cannot start is refused when it is created, forked or resumed
// rather than failing later.
func (sp *serverPrep) validate(ctx context.Context, c *agent.RunCreated) error {
	live, err := sp.liveFor(c.Model)
	if err != nil {
		return err
	}
	spec, err := model.ParseSpec(c.Model)
	if err != nil {
		return invalid(err)
	}
	if err := sp.checkKeys(spec); err != nil {
		return err
	}
	if sp.f.temporal != "" && !sp.f.worker && c.Tools != nil {
		// A --temporal server executes nothing: the worker that claims
		// the run sets it up (and fails its step, visibly, if it
		// cannot). Starting a sandbox here only to close it cost each
		// create a sandbox start on a machine that may have none.
		return nil
	}
	w, err := sp.a.newWiring(ctx, c, live)
	if err != nil {
		sp.logger.Info("a run cannot be set up", "err", err)
		if errors.Is(err, sandbox.ErrUnavailable) {
			return errors.New("this server cannot sandbox commands (see its log)")
		}
		return invalidf("the run cannot be set up on this server: %s", apiText(err))
	}
	if c.Tools == nil {
		// A new run with connectors: its tools, MCP ones pinned.
		c.Tools = w.ToolInfos()
	}
	w.Close()
	return nil
}

// apiText returns an error's text for an API client: without advice about
// this process's flags, which the client cannot pass.
func apiText(err error) string {
	s := err.Error()
	if i := strings.Index(s, "; pass --"); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(strings.SplitN(s, "\n", 2)[0])
}

// checkKeys checks that the server has the API key a provider needs.
func (sp *serverPrep) checkKeys(spec model.Spec) error {
	key, err := sp.a.assembler().ModelKey(spec, "", "")
	if err != nil {
		return invalidf("this server has no API key for %s (its operator sets the variable api_key_env of [endpoints.%q] names where keel serve runs)", spec, spec.BaseURL)
	}
	if key == "" && (spec.Provider == "openai" || spec.Provider == "anthropic") {
		if env := assemble.ProviderKey(spec); env != "" {
			return invalidf("this server has no API key for %s models (its operator sets %s where keel serve runs)", spec.Provider, env)
		}
		return invalidf("this server has no API key for %s (its operator sets api_key_env in [endpoints.%q] of config.toml)", spec, spec.BaseURL)
	}
	return nil
}

// invalid marks err as the request's fault.
func invalid(err error) error { return fmt.Errorf("%w: %w", server.ErrInvalid, err) }

func invalidf(format string, args ...any) error { return invalid(fmt.Errorf(format, args...)) }

// prepare turns a create request into run.created as `keel run` would
// with the same flags, the server's defaults filling what the request
// leaves out.
func (sp *serverPrep) prepare(ctx context.Context, req *api.CreateRun) (*agent.RunCreated, error) {
	a := sp.a
	if req.Demo {
		return sp.prepareDemo(ctx)
	}
	name := firstNonEmpty(req.Model, sp.f.model, a.cfg.Model)
	if name == "" {
		return nil, invalidf("no model: name one (openai:MODEL, anthropic:MODEL, openai-compatible:MODEL@URL, replay:RECORDING, scripted:demo); this server has no default model")
	}
	spec, err := model.ParseSpec(name)
	if err != nil {
		return nil, invalid(err)
	}
	task, system := req.Task, req.System
	familyName := spec.Name
	if spec.Provider == "replay" {
		rec, err := sp.recording(spec.Name)
		if err != nil {
			return nil, err
		}
		task, system = firstNonEmpty(task, rec.Task()), firstNonEmpty(system, rec.System())
		familyName = rec.Model()
	}
	if strings.TrimSpace(task) == "" {
		return nil, invalidf("no task")
	}
	if err := sp.checkKeys(spec); err != nil {
		return nil, err
	}
	mount := firstNonEmpty(req.MountPath, "/workspace")
	if !strings.HasPrefix(mount, "/") {
		return nil, invalidf("mount_path %q must be absolute", mount)
	}
	for _, e := range req.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return nil, invalidf("env %q: want KEY=VALUE", e)
		}
	}
	sb := firstNonEmpty(req.Sandbox, sp.sandbox)
	if sb != "linux" && sb != "none" {
		return nil, invalidf("sandbox %q: want linux or none", sb)
	}
	eng := sp.policy
	switch req.Policy {
	case "", "server":
	case "default":
		eng = policy.Default()
	case "demo":
		eng = server.DemoPolicy()
	default:
		// A policy source in the request (an admin's client sends its
		// file's content): its own test cases must pass, as for keel run.
		if eng, err = policy.Parse("api:policy", []byte(req.Policy)); err != nil {
			return nil, invalid(err)
		}
		for _, r := range eng.Test(ctx) {
			if r.Problem != "" {
				return nil, invalidf("policy test case %q fails: %s", r.Case.Name, r.Problem)
			}
		}
	}
	maxSteps, maxTokens, maxCost := req.Limits.MaxSteps, req.Limits.MaxTokens, req.Limits.MaxCost
	if maxSteps == 0 {
		maxSteps = defaultMaxSteps
	}
	if maxTokens == 0 {
		maxTokens = defaultMaxTokens
	}
	if maxCost == 0 {
		maxCost = defaultMaxCost
	}
	timeout := defaultTimeout
	if req.Limits.Timeout != "" {
		if timeout, err = time.ParseDuration(req.Limits.Timeout); err != nil {
			return nil, invalidf("limits.timeout: %v", err)
		}
	}
	marker := DefaultCompletionMarker
	if req.CompletionMarker != nil {
		marker = *req.CompletionMarker
	}
	c := &agent.RunCreated{
		Task: task, System: firstNonEmpty(system, defaultSystemPrompt(mount)), Model: spec.String(),
		Limits:           agent.Limits{MaxSteps: maxSteps, MaxTokens: maxTokens, MaxCost: maxCost, Timeout: agent.Duration(timeout)},
		CompletionMarker: marker, Workspace: filepath.Clean(req.Workspace), MountPath: mount, Sandbox: sb,
		Env: req.Env, Setup: req.Setup, Network: req.Network, Labels: req.Labels,
		Principal: firstNonEmpty(req.Agent, identity.LocalAgent), OnBehalfOf: req.OnBehalfOf,
	}
	if err := sp.connectors(ctx, c, req); err != nil {
		return nil, err
	}
	if c, err = sp.finish(ctx, c, eng, familyName); err != nil {
		return nil, err
	}
	// A run may turn its checkpoints off, never on where the server's
	// are off.
	c.Settings.NoCheckpoints = c.Settings.NoCheckpoints || req.NoCheckpoints
	return c, nil
}

// finish applies what every server run shares: sandbox limits, context
// settings, the policy, a principal check and the tools. Whether the run
// can be set up (model, workspace, sandbox) is validate's job.
func (sp *serverPrep) finish(ctx context.Context, c *agent.RunCreated, eng *policy.Engine, familyName string) (*agent.RunCreated, error) {
	a := sp.a
	var err error
	if c.SandboxLimits, err = (&limitFlags{memory: defaultMemory, processes: defaultProcesses, fileSize: defaultFileSize, openFiles: defaultOpenFiles, output: defaultOutput}).parse(); err != nil {
		return nil, err
	}
	cf := &contextFlags{threshold: agent.DefaultCompactThreshold, notesFile: agent.DefaultNotesFile, actionMode: "tools"}
	if err := cf.apply(a, c, familyName); err != nil {
		return nil, invalidf("the run's context settings: %s", apiText(err))
	}
	c.Policy = agent.NewPolicyRef(eng)
	if set := eng.Approval(); set.Timeout > 0 || set.Default == policy.Allow {
		c.Approval = &agent.ApprovalSettings{Timeout: agent.Duration(set.Timeout), Default: set.Default}
	}
	if err := identity.CheckName(c.Principal); err != nil {
		return nil, invalidf("agent: %v", err)
	}
	t0 := time.Now()
	defer func() {
		if d := time.Since(t0); d > 500*time.Millisecond {
			sp.logger.Warn("slow run preparation", "duration", d.Round(time.Millisecond).String())
		}
	}()
	if _, err := identity.NewDirectory(sp.store, nil).Check(ctx, c.Principal, c.OnBehalfOf); err != nil {
		if errors.Is(err, policy.ErrRevoked) {
			return nil, invalidf("agent %s cannot run: %v", c.Principal, err)
		}
		return nil, err
	}
	if _, err := sp.liveFor(c.Model); err != nil {
		return nil, err
	}
	set := sp.settings
	c.Settings = &set
	c.StateDir = assemble.StateDir(a.home, c.Workspace)
	c.Tools = assemble.Tools(set)
	if len(c.MCP)+len(c.SQL)+len(c.OpenAPI) > 0 {
		// Known once the servers are reached: validate fills them in,
		// pinned as keel run pins them.
		c.Tools = nil
	}
	t1 := time.Now()
	c.Git = gitStart(ctx, c.Workspace) // for keel runs diff on the server's machine
	if d := time.Since(t1); d > 500*time.Millisecond {
		sp.logger.Warn("slow git state of a new run's workspace", "duration", d.Round(time.Millisecond).String(), "before_git", t1.Sub(t0).Round(time.Millisecond).String())
	}
	return c, nil
}

// demoDir is the directory, in the first workspace root, of the demo
// runs' workspaces.
const demoDir = ".keel-demos"

// prepareDemo creates the demo run: a fresh copy of the demo project, the
// scripted demo model, and the demo policy, which asks a person before
// the agent edits a file.
func (sp *serverPrep) prepareDemo(ctx context.Context) (*agent.RunCreated, error) {
	parent := ""
	if len(sp.roots) > 0 {
		// Within the directories the operator gave runs, hidden from
		// the web UI's list of workspaces.
		parent = filepath.Join(sp.roots[0], demoDir)
		if err := os.MkdirAll(parent, 0o700); err != nil {
			return nil, fmt.Errorf("demo workspace: %w", err)
		}
	}
	ws, err := os.MkdirTemp(parent, "keel-demo-")
	if err != nil {
		return nil, fmt.Errorf("demo workspace: %w", err)
	}
	if err := demo.WriteProject(ws); err != nil {
		return nil, err
	}
	_ = gitInit(ws) // the diff is a nicety; the demo runs without git
	c := &agent.RunCreated{
		Task: demo.Task, System: defaultSystemPrompt("/workspace"), Model: "scripted:demo",
		Limits: agent.Limits{MaxSteps: 20}, Workspace: ws, MountPath: "/workspace", Sandbox: sp.sandbox,
		Principal: identity.DemoAgent, CompletionMarker: DefaultCompletionMarker,
		Labels: map[string]string{server.LabelDemo: demo.Label},
	}
	return sp.finish(ctx, c, server.DemoPolicy(), "scripted:demo")
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
