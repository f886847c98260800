package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/cluster"
	"github.com/keel-run/keel/internal/evalrun"
	"github.com/keel-run/keel/internal/serve"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/sandbox/egress"
	"github.com/keel-run/keel/server/token"
	"github.com/keel-run/keel/service"
)

// serveFlags are the flags of `keel serve`.
type serveFlags struct {
	addr            string
	workers         int
	model           string
	sandbox         string
	allowNoSandbox  bool
	policy          string
	workspaceRoots  []string
	replayDirs      []string
	secretEnv       []string
	secretHosts     []string
	secretBody      []string
	commandTimeout  time.Duration
	commandIdle     time.Duration
	concurrency     int
	maxResultChars  int
	idleTimeout     time.Duration
	stallRetries    int
	retries         int
	noCheckpoints   bool
	shutdownTimeout time.Duration
	logLevel        string
	adopt           time.Duration
	adoptSet        bool
	temporal        string
	publicURL       string
	metricsAddr     string
	worker          bool           // keel worker (worker.go)
	driver          cluster.Driver // keel worker's workflow settings
}

func (a *app) serveCmd() *cobra.Command { return a.serveCommand(&serveFlags{}) }

// serveCommand is keel serve with f as its flags (keel worker shares
// them).
func (a *app) serveCommand(f *serveFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the team API and web UI, executing runs in this process",
		Long: `Serve runs Keel's team server: the HTTP API under /v1 (runs, live event
streams, approvals, agents, audit), the web UI under /ui, and a pool of
workers that execute runs here. Runs that were executing when the server
last stopped are resumed at start; on SIGINT/SIGTERM the server stops
taking requests and pauses every executing run cleanly (run.paused).

Every request needs an API token (keel tokens create). On a journal with
no token yet, serve creates an admin token for you, prints it once with a
one-time sign-in link for the web UI, and saves it to
$KEEL_HOME/server-token (mode 0600), bound to this server's address, where
the keel command line finds it: keel --server http://ADDR runs list.

Runs work on directories of this machine, and only under the workspace
roots you name (--workspace-root, or workspace_roots in the [serve] table
of config.toml); Keel's home, the journal's directory and the server's
secrets are never a workspace. Every run uses this server's sandbox and
policy: clients cannot choose less (an admin token may, where allowed).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.server != "" {
				return usagef("keel serve is the server: --server does not apply to it")
			}
			f.adoptSet = cmd.Flags().Changed("adopt")
			return a.serve(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.addr, "addr", "127.0.0.1:8420", "address to listen on (host:port; port 0 picks a free one)")
	fl.IntVar(&f.workers, "workers", 8, "runs executing at once; more wait in a queue")
	fl.StringVarP(&f.model, "model", "m", "", "default model of runs that name none (default from config.toml)")
	fl.StringVar(&f.sandbox, "sandbox", "", "sandbox of every run: linux (default) or none (NO isolation)")
	fl.BoolVar(&f.allowNoSandbox, "allow-sandbox-none", false, "let admin tokens ask for runs without isolation (sandbox none); journaled as an override")
	fl.StringVar(&f.policy, "policy", "", "policy file of every run (TOML or .cedar; default: Keel's default policy); only admin tokens may choose another")
	fl.StringArrayVar(&f.workspaceRoots, "workspace-root", nil, "directory API runs may work in, or below (repeatable; also workspace_roots in the [serve] table of config.toml)")
	fl.StringArrayVar(&f.secretEnv, "secret-env", nil, "NAME of a variable of the server's environment that runs created through the API or by schedules may ask for as a secret (secret_env; repeatable; docs/security.md)")
	fl.StringArrayVar(&f.secretHosts, "secret-for-host", nil, "NAME=HOST: runs created through the API may ask for the server's variable NAME as a secret the sandbox never holds, for HOST only (secret_hosts; the egress proxy puts the value in requests to HOST; repeatable; docs/security.md)")
	fl.StringArrayVar(&f.secretBody, "secret-in-body", nil, "NAME of a --secret-for-host whose value runs may also ask to have put in request bodies to its host (secret_hosts[].body; repeatable)")
	fl.StringArrayVar(&f.replayDirs, "replay-dir", nil, "directory replay: recordings of non-admin tokens come from (repeatable; also replay_dirs in [serve])")
	fl.DurationVar(&f.commandTimeout, "command-timeout", 60*time.Second, "default wall time of one shell command")
	fl.DurationVar(&f.commandIdle, "command-idle-timeout", 2*time.Minute, "end a shell command that prints nothing for this long")
	fl.IntVar(&f.concurrency, "concurrency", 4, "tool calls of one turn that may run at once")
	fl.IntVar(&f.maxResultChars, "max-result-chars", 10000, "characters of one tool result the model sees")
	fl.DurationVar(&f.idleTimeout, "model-idle-timeout", 120*time.Second, "abandon a model response that sends no bytes for this long")
	fl.IntVar(&f.stallRetries, "model-stall-retries", 2, "retries of a stalled model response")
	fl.IntVar(&f.retries, "model-retries", defaultModelRetries, "retries of a model request after a rate limit (429), an overload or server error (5xx), a broken connection or an unusable answer, with exponential backoff and the provider's Retry-After")
	fl.BoolVar(&f.noCheckpoints, "no-checkpoints", false, "take no workspace checkpoints for the runs this server creates (they cannot be rewound or forked with their files)")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", time.Minute, "how long a shutdown waits for executions to pause")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "also serve Prometheus metrics at http://ADDR/metrics without a token (a private listener, e.g. 127.0.0.1:9464; keel worker's only metrics endpoint); on --addr /metrics needs a token with the metrics:read scope")
	fl.StringVar(&f.temporal, "temporal", "", "Temporal frontend HOST:PORT: hand runs to keel worker processes instead of executing them here (docs/deploy.md)")
	fl.StringVar(&f.publicURL, "public-url", "", "base URL browsers reach this server at (behind a proxy: https://keel.example.com); the redirect URL of authorizations is it + /v1/auth/callback (default: the listening address)")
	fl.DurationVar(&f.adopt, "adopt", 0, "how often to take over runs whose executing process died, for several servers on one journal (default 5s on PostgreSQL, off on SQLite; 0 is off)")
	return cmd
}

// serverTokenFile is where serve saves the admin token it creates on a
// journal that has none, for the local command line.
func (a *app) serverTokenFile() string { return filepath.Join(a.home, "server-token") }

// configFile is the path of config.toml.
func (a *app) configFile() string { return filepath.Join(a.home, "config.toml") }

// dirs returns the existing directories of flags and config, absolute and
// without duplicates; a missing one is a usage error naming flag.
func dirs(flag string, lists ...[]string) ([]string, error) {
	var out []string
	for _, list := range lists {
		for _, d := range list {
			abs, err := filepath.Abs(d)
			if err != nil {
				return nil, usagef("%s %s: %v", flag, d, err)
			}
			if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
				return nil, usagef("%s %s: not a directory", flag, d)
			}
			if !slices.Contains(out, abs) {
				out = append(out, abs)
			}
		}
	}
	return out, nil
}

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
	defaultPolicy, err := loadPolicy(f.policy)
	if err != nil {
		return err
	}
	roots, err := dirs("--workspace-root", f.workspaceRoots, a.cfg.Serve.WorkspaceRoots)
	if err != nil {
		return err
	}
	if err := a.checkSecretEnv(f.secretEnv); err != nil {
		return err
	}
	secretHosts, err := a.secretHosts(f.secretHosts, f.secretBody, "the server's environment")
	if err != nil {
		return err
	}
	for i, h := range secretHosts {
		if l, err := egress.Parse([]string{h.Host}); err != nil || len(l.Rules()) != 1 {
			return usagef("--secret-for-host %s=%s: want a host as --allow-host writes it (api.example.com, api.example.com:8443, *.example.com)", h.Name, h.Host)
		}
		if slices.ContainsFunc(secretHosts[:i], func(o agent.SecretHost) bool { return o.Name == h.Name && strings.EqualFold(o.Host, h.Host) }) {
			return usagef("--secret-for-host %s=%s is given twice", h.Name, h.Host)
		}
	}
	replayDirs, err := dirs("--replay-dir", f.replayDirs, a.cfg.Serve.ReplayDirs)
	if err != nil {
		return err
	}
	// What no run may touch: Keel's home (tokens, config, memory), the
	// journal's files (and, when the database or a file beside it is a
	// symbolic link, its target), and the policy file.
	protected := []string{a.home, a.serverTokenFile(), a.configFile()}
	journalFiles := serve.JournalFiles(a.dbPath())
	if f.policy != "" && f.policy != "default" {
		protected = append(protected, defaultPolicy.Name())
	}
	if err := serve.CheckRoots(roots, protected, journalFiles); err != nil {
		return err
	}
	var baseURLs []string
	var defaultModel string
	if m := firstNonEmpty(f.model, a.cfg.Model); m != "" {
		s, err := model.ParseSpec(m)
		if err != nil {
			return usagef("--model: %v", err)
		}
		defaultModel = s.String()
		if s.Provider == "openai-compatible" {
			baseURLs = append(baseURLs, s.BaseURL)
		}
	}
	// The settings of the runs this server creates; a run keeps its own
	// when it is resumed (here or elsewhere).
	settings := agent.Settings{CommandTimeout: agent.Duration(f.commandTimeout), CommandIdleTimeout: agent.Duration(f.commandIdle), Concurrency: f.concurrency,
		MaxResultChars: f.maxResultChars, ModelIdleTimeout: agent.Duration(f.idleTimeout), ModelStallRetries: f.stallRetries, ModelRetries: f.retries,
		NoCheckpoints: f.noCheckpoints}
	if err := settings.Validate(); err != nil {
		return usagef("%v", err)
	}
	publicURL := strings.TrimSuffix(f.publicURL, "/")
	if publicURL != "" {
		if u, err := url.Parse(publicURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" {
			return usagef("--public-url %q: want an absolute http(s) URL without a query", f.publicURL)
		}
	}
	logger := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level}))
	store, err := a.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	metrics := serve.NewMetrics(ctx, store)
	a.metrics = metrics.Metrics
	rt, live, flushTelemetry, err := a.process().Runtime(ctx, store, &agent.RuntimeOptions{Logger: logger})
	if err != nil {
		return err
	}
	defer flushTelemetry()
	defer live.Sweep(ctx, store, logger)()
	b := newBuilder(a, store, logger)
	if f.metricsAddr != "" {
		stop, err := metrics.Listen(ctx, f.metricsAddr, logger, a.stderr)
		if err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		defer stop()
	}
	if f.worker {
		return (&serve.Worker{Temporal: f.temporal, Roots: roots, Runtime: rt, Wire: b.Wire, Driver: f.driver, Slots: f.workers,
			Journal: a.dbPath(), Metrics: metrics, Logger: logger, Out: a.stderr}).Run(ctx)
	}
	// The vault of the API's and the web UI's Connect: without a vault
	// key it answers that it has none.
	var vault service.Connector
	if v, err := a.openVault(store); err != nil {
		logger.Warn("no credential vault: Connect from the API and web UI is off", "err", err)
	} else {
		vault = v
	}
	so := &service.Options{Builder: b, Workers: f.workers, Tokens: token.New(store, nil), Logger: logger,
		WorkspaceRoots: roots, Protected: protected, JournalFiles: journalFiles, DemoDir: filepath.Join(a.home, "demos"), Sandbox: sbKind, AllowSandboxOverride: f.allowNoSandbox, Policy: defaultPolicy,
		ReplayDirs: replayDirs, SecretEnv: f.secretEnv, SecretHosts: secretHosts, Getenv: a.getenv, DefaultModel: defaultModel, ModelBaseURLs: baseURLs, Settings: settings, NoCheckpoints: f.noCheckpoints,
		Adopt: f.adoptInterval(a.dbPath()), Vault: vault, PublicURL: publicURL, Skills: a.skillHost(store), Evals: evalrun.Host{Home: a.home}}
	if err := a.unattended(store, so, true); err != nil {
		return err
	}
	srv := &serve.Server{Addr: f.addr, Store: store, Journal: a.dbPath(), Runtime: rt, Service: so, Temporal: f.temporal, Metrics: metrics,
		TokenFile: a.serverTokenFile(), FirstTokenName: a.person(""), ShutdownTimeout: f.shutdownTimeout, Logger: logger, Out: a.stderr,
		Wrap: func(h http.Handler) http.Handler { return a.withJWKS(h, store) }}
	return srv.Run(ctx)
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
