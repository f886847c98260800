package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/demo"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/tool"
)

// serveFlags are the flags of `keel serve`.
type serveFlags struct {
	addr            string
	workers         int
	model           string
	sandbox         string
	allowNoSandbox  bool
	policy          string
	commandTimeout  time.Duration
	commandIdle     time.Duration
	concurrency     int
	maxResultChars  int
	idleTimeout     time.Duration
	stallRetries    int
	shutdownTimeout time.Duration
	logLevel        string
}

func (a *app) serveCmd() *cobra.Command {
	f := &serveFlags{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the team API and web UI, executing runs in this process",
		Long: `Serve runs Keel's team server: the HTTP API under /v1 (runs, live event
streams, approvals, agents, audit), the web UI under /ui, and a pool of
workers that execute runs here. Runs that were executing when the server
last stopped are resumed at start; on SIGINT/SIGTERM the server stops
taking requests and pauses every executing run cleanly (run.paused).

Every request needs an API token (keel tokens create). On a journal with
no token yet, serve creates an admin token for you, prints it once, and
saves it to $KEEL_HOME/server-token (mode 0600), where the keel command
line finds it: keel --server http://ADDR runs list.

Runs work on directories of this machine; their sandbox, model keys and
policy files are the server's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.serve(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.addr, "addr", "127.0.0.1:8420", "address to listen on (host:port; port 0 picks a free one)")
	fl.IntVar(&f.workers, "workers", 8, "runs executing at once; more wait in a queue")
	fl.StringVarP(&f.model, "model", "m", "", "default model of runs that name none (default from config.toml)")
	fl.StringVar(&f.sandbox, "sandbox", "", "default sandbox of runs: linux (default) or none (NO isolation)")
	fl.BoolVar(&f.allowNoSandbox, "allow-sandbox-none", false, "let API clients ask for runs without isolation (sandbox none)")
	fl.StringVar(&f.policy, "policy", "", "default policy file of runs (TOML or .cedar; default: Keel's default policy)")
	fl.DurationVar(&f.commandTimeout, "command-timeout", 60*time.Second, "default wall time of one shell command")
	fl.DurationVar(&f.commandIdle, "command-idle-timeout", 2*time.Minute, "end a shell command that prints nothing for this long")
	fl.IntVar(&f.concurrency, "concurrency", 4, "tool calls of one turn that may run at once")
	fl.IntVar(&f.maxResultChars, "max-result-chars", 10000, "characters of one tool result the model sees")
	fl.DurationVar(&f.idleTimeout, "model-idle-timeout", 120*time.Second, "abandon a model response that sends no bytes for this long")
	fl.IntVar(&f.stallRetries, "model-stall-retries", 2, "retries of a stalled model response")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", time.Minute, "how long a shutdown waits for executions to pause")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}

// serverTokenFile is where serve saves the admin token it creates on a
// journal that has none, for the local command line.
func (a *app) serverTokenFile() string { return filepath.Join(a.home, "server-token") }

func (a *app) serve(ctx context.Context, f *serveFlags) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return usagef("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	if f.workers < 1 {
		return usagef("--workers %d: want at least 1", f.workers)
	}
	sbKind, err := a.sandboxKind(f.sandbox)
	if err != nil {
		return err
	}
	var defaultPolicy *policy.Engine
	if defaultPolicy, err = loadPolicy(f.policy); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level}))
	store, err := a.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	rt := agent.NewRuntime(store, &agent.RuntimeOptions{Logger: logger})
	tokens := server.NewTokens(store, nil)
	live := &liveOptions{commandTimeout: f.commandTimeout, commandIdle: f.commandIdle, concurrency: f.concurrency,
		maxResultChars: f.maxResultChars, idleTimeout: f.idleTimeout, stallRetries: f.stallRetries}
	live.gate.noWait = true
	sp := &serverPrep{a: a, f: f, store: store, sandbox: sbKind, policy: defaultPolicy, live: live, recordings: map[string]*recording{}}
	h := server.NewHandler(rt, &server.Options{Wire: sp.wire, Prepare: sp.prepare, Workers: f.workers, Tokens: tokens, Logger: logger})

	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	base := "http://" + ln.Addr().String()
	if err := a.firstToken(ctx, tokens, base); err != nil {
		ln.Close()
		return err
	}
	resumed, err := h.Start(ctx)
	if err != nil {
		ln.Close()
		return err
	}
	if len(resumed) > 0 {
		fmt.Fprintf(a.stderr, "keel serve: resuming %d run(s) interrupted by the last stop\n", len(resumed))
	}
	reqCtx, stopRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRequests()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return reqCtx },
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(a.stderr, "keel serve: listening on %s · web UI %s/ui/ · journal %s · %d workers · sandbox %s\n", base, base, a.dbPath(), f.workers, sbKind)

	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	}
	fmt.Fprintln(a.stderr, "keel serve: shutting down: no new requests; pausing executing runs (a second Ctrl-C exits at once)")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.shutdownTimeout)
	defer cancel()
	stopRequests() // ends event streams, which never finish on their own
	if err := srv.Shutdown(sctx); err != nil {
		logger.Warn("http shutdown", "err", err)
	}
	if err := h.Shutdown(sctx); err != nil {
		return err
	}
	fmt.Fprintln(a.stderr, "keel serve: stopped; executing runs were paused and resume at the next start")
	return nil
}

// firstToken creates an admin token when the journal has none, prints it
// once and saves it for the local command line.
func (a *app) firstToken(ctx context.Context, tokens *server.Tokens, base string) error {
	n, err := tokens.Count(ctx)
	if err != nil || n > 0 {
		return err
	}
	tok, err := tokens.Create(ctx, a.person(""), []string{api.ScopeAdmin}, "keel serve")
	if err != nil {
		return err
	}
	saved := a.serverTokenFile()
	if err := os.MkdirAll(filepath.Dir(saved), 0o700); err == nil {
		err = os.WriteFile(saved, []byte(tok.Secret+"\n"), 0o600)
		if err != nil {
			saved = ""
		}
	} else {
		saved = ""
	}
	fmt.Fprintf(a.stderr, "keel serve: created the first API token (admin, for %s). It is shown only this once:\n\n    %s\n\n", tok.Name, tok.Secret)
	fmt.Fprintf(a.stderr, "  sign in to the web UI:  %s/ui/login?token=%s\n", base, tok.Secret)
	if saved != "" {
		fmt.Fprintf(a.stderr, "  saved for the command line in %s: keel --server %s runs list\n", saved, base)
	}
	fmt.Fprintf(a.stderr, "  more tokens: keel tokens create --name NAME --scope runs:read,runs:write,approvals:write\n\n")
	return nil
}

// serverPrep is the CLI's wiring of a server: how a create request
// becomes a run (prepare) and how a run gets its model, tools and sandbox
// (wire), as `keel run` does it.
type serverPrep struct {
	a       *app
	f       *serveFlags
	store   journal.Store
	sandbox string
	policy  *policy.Engine
	live    *liveOptions

	mu         sync.Mutex
	recordings map[string]*recording // loaded replay trajectories, by path
}

// recording returns the replay trajectory at path, loading it once.
func (sp *serverPrep) recording(path string) (*recording, error) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if r := sp.recordings[path]; r != nil {
		return r, nil
	}
	r, err := loadRecording(path)
	if err != nil {
		return nil, err
	}
	sp.recordings[path] = r
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
		live.recording = rec
	}
	return &live, nil
}

// closerFunc adapts a func to io.Closer.
type closerFunc func()

func (f closerFunc) Close() error { f(); return nil }

func (sp *serverPrep) wire(ctx context.Context, c *agent.RunCreated) (*agent.ExecParams, io.Closer, error) {
	live, err := sp.liveFor(c.Model)
	if err != nil {
		return nil, nil, err
	}
	w, err := sp.a.newWiring(ctx, c, live)
	if err != nil {
		return nil, nil, err
	}
	return w.execParams(nil), closerFunc(w.Close), nil
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
	spec, err := a.modelSpec(firstNonEmpty(req.Model, sp.f.model))
	if err != nil {
		return nil, invalid(err)
	}
	task, system := req.Task, req.System
	if spec.Provider == "replay" {
		rec, err := sp.recording(spec.Name)
		if err != nil {
			return nil, invalid(err)
		}
		task, system = firstNonEmpty(task, rec.Task()), firstNonEmpty(system, rec.System())
	}
	if strings.TrimSpace(task) == "" {
		return nil, invalidf("no task")
	}
	if req.Workspace == "" || !filepath.IsAbs(req.Workspace) {
		return nil, invalidf("workspace %q: want an absolute directory on the server", req.Workspace)
	}
	if st, err := os.Stat(req.Workspace); err != nil || !st.IsDir() {
		return nil, invalidf("workspace %s is not a directory on the server", req.Workspace)
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
	switch {
	case sb != "linux" && sb != "none":
		return nil, invalidf("sandbox %q: want linux or none", sb)
	case sb == "none" && sp.sandbox != "none" && !sp.f.allowNoSandbox:
		return nil, invalidf("this server runs commands only in the linux sandbox (start it with --allow-sandbox-none to allow sandbox none)")
	}
	eng := sp.policy
	switch req.Policy {
	case "", "server":
	case "default":
		eng = policy.Default()
	case "demo":
		eng = server.DemoPolicy()
	default:
		// A policy source in the request (a client sends its file's
		// content): its own test cases must pass, as for keel run.
		if eng, err = policy.Parse("api:policy", []byte(req.Policy)); err != nil {
			return nil, invalid(err)
		}
		for _, r := range eng.Test(ctx) {
			if r.Problem != "" {
				return nil, invalidf("policy test case %q fails: %s", r.Case.Name, r.Problem)
			}
		}
	}
	maxSteps := req.Limits.MaxSteps
	if maxSteps == 0 {
		maxSteps = 100
	}
	var timeout time.Duration
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
		Limits:           agent.Limits{MaxSteps: maxSteps, MaxTokens: req.Limits.MaxTokens, MaxCost: req.Limits.MaxCost, Timeout: agent.Duration(timeout)},
		CompletionMarker: marker, Workspace: filepath.Clean(req.Workspace), MountPath: mount, Sandbox: sb,
		Env: req.Env, Setup: req.Setup, Network: req.Network, Labels: req.Labels,
		Principal: firstNonEmpty(req.Agent, identity.LocalAgent), OnBehalfOf: req.OnBehalfOf,
	}
	familyName := spec.Name
	if spec.Provider == "replay" {
		rec, _ := sp.recording(spec.Name)
		familyName = rec.Model()
	}
	return sp.finish(ctx, c, eng, familyName)
}

// finish applies what every server run shares: sandbox limits, context
// settings, the policy, a principal check and the tools; it checks the
// model and the workspace.
func (sp *serverPrep) finish(ctx context.Context, c *agent.RunCreated, eng *policy.Engine, familyName string) (*agent.RunCreated, error) {
	a := sp.a
	var err error
	if c.SandboxLimits, err = (&limitFlags{memory: defaultMemory, processes: defaultProcesses, fileSize: defaultFileSize, openFiles: defaultOpenFiles, output: defaultOutput}).parse(); err != nil {
		return nil, err
	}
	cf := &contextFlags{threshold: agent.DefaultCompactThreshold, notesFile: agent.DefaultNotesFile, actionMode: "tools"}
	if err := cf.apply(a, c, familyName); err != nil {
		return nil, invalid(err)
	}
	c.Policy = agent.NewPolicyRef(eng)
	if set := eng.Approval(); set.Timeout > 0 || set.Default == policy.Allow {
		c.Approval = &agent.ApprovalSettings{Timeout: agent.Duration(set.Timeout), Default: set.Default}
	}
	if err := identity.CheckName(c.Principal); err != nil {
		return nil, invalidf("agent: %v", err)
	}
	if _, err := identity.NewDirectory(sp.store, nil).Check(ctx, c.Principal, c.OnBehalfOf); err != nil {
		if errors.Is(err, policy.ErrRevoked) {
			return nil, invalidf("agent %s cannot run: %v", c.Principal, err)
		}
		return nil, err
	}
	// Check what a worker will need, without starting a sandbox: the
	// model (keys), the workspace, the journal outside it.
	live, err := sp.liveFor(c.Model)
	if err != nil {
		return nil, invalid(err)
	}
	spec, err := model.ParseSpec(c.Model)
	if err != nil {
		return nil, invalid(err)
	}
	if err := a.newModel(spec, &wiring{live: live}); err != nil {
		return nil, invalid(err)
	}
	if err := checkJournalOutside(a.dbPath(), c.Workspace); err != nil {
		return nil, invalid(err)
	}
	ws, err := tool.NewWorkspace(c.Workspace, c.MountPath, protectedPaths(c))
	if err != nil {
		return nil, invalid(err)
	}
	ws.Close()
	c.Tools = toolInfos(newTools(live))
	return c, nil
}

// prepareDemo creates the demo run: a fresh copy of the demo project, the
// scripted demo model, and the demo policy, which asks a person before
// the agent edits a file.
func (sp *serverPrep) prepareDemo(ctx context.Context) (*agent.RunCreated, error) {
	ws, err := os.MkdirTemp("", "keel-demo-")
	if err != nil {
		return nil, err
	}
	if err := demo.WriteProject(ws); err != nil {
		return nil, err
	}
	_ = gitInit(ws) // the diff is a nicety; the demo runs without git
	c := &agent.RunCreated{
		Task: demo.Task, System: defaultSystemPrompt("/workspace"), Model: "scripted:demo",
		Limits: agent.Limits{MaxSteps: 20}, Workspace: ws, MountPath: "/workspace", Sandbox: sp.sandbox,
		Principal: identity.DemoAgent, CompletionMarker: DefaultCompletionMarker,
		Labels: map[string]string{"keel.demo": demo.Label},
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

func (a *app) tokensCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "Create, list and revoke API tokens of the team server",
		Long: `API tokens authenticate people and systems to keel serve. Each has a
name (the person or system; it is recorded with every action taken with
the token) and scopes: runs:read, runs:write, approvals:write, admin
(everything). Only a SHA-256 digest of each token is stored, in the
journal database; the token itself is shown once, when it is created.
These commands work on the journal directly (--db), also while a server
runs on it; a revocation takes effect there within a second.`,
	}
	var name string
	var scopes []string
	var by string
	create := &cobra.Command{
		Use:   "create --name NAME --scope SCOPE[,SCOPE...]",
		Short: "Create a token and print it (shown only once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if strings.TrimSpace(name) == "" {
				return usagef("--name: whose token is it (a person or system)?")
			}
			if err := server.CheckScopes(scopes); err != nil {
				return usagef("--scope: %v", strings.TrimPrefix(err.Error(), "server: "))
			}
			store, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			defer store.Close()
			tok, err := server.NewTokens(store, nil).Create(ctx, name, scopes, a.person(by))
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "keel: created token %s for %s (%s); it is shown only this once:\n", tok.ID, tok.Name, strings.Join(tok.Scopes, ", "))
			fmt.Fprintln(a.stdout, tok.Secret)
			return nil
		},
	}
	create.Flags().StringVar(&name, "name", "", "the person or system the token is for")
	create.Flags().StringSliceVar(&scopes, "scope", []string{api.ScopeRunsRead}, "scopes: runs:read, runs:write, approvals:write, admin")
	create.Flags().StringVar(&by, "by", "", "who creates it (default: $USER)")
	list := &cobra.Command{
		Use:   "list",
		Short: "List tokens (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			store, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			defer store.Close()
			toks, err := server.NewTokens(store, nil).List(ctx)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOKEN\tNAME\tSCOPES\tCREATED\tBY\tSTATUS")
			for _, t := range toks {
				status := "active"
				if t.Revoked != nil {
					status = "revoked " + t.Revoked.Local().Format("2006-01-02 15:04")
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, strings.Join(t.Scopes, ","), t.Created.Local().Format("2006-01-02 15:04"), t.CreatedBy, status)
			}
			return tw.Flush()
		},
	}
	revoke := &cobra.Command{
		Use:   "revoke TOKEN_ID",
		Short: "Revoke a token",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			store, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			defer store.Close()
			if err := server.NewTokens(store, nil).Revoke(ctx, args[0], a.person(by)); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "revoked token %s\n", args[0])
			return nil
		},
	}
	revoke.Flags().StringVar(&by, "by", "", "who revokes it (default: $USER)")
	cmd.AddCommand(create, list, revoke)
	return cmd
}
