package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/cluster"
	"github.com/keel-run/keel/internal/evalrun"
	"github.com/keel-run/keel/internal/realpath"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/redact"
	"github.com/keel-run/keel/server"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
	"github.com/keel-run/keel/service"
	"github.com/keel-run/keel/telemetry"
	"github.com/keel-run/keel/visible"
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
	replayDirs, err := dirs("--replay-dir", f.replayDirs, a.cfg.Serve.ReplayDirs)
	if err != nil {
		return err
	}
	// What no run may touch: Keel's home (tokens, config, memory), the
	// journal's files (and, when the database or a file beside it is a
	// symbolic link, its target), and the policy file.
	protected := []string{a.home, a.serverTokenFile(), a.configFile()}
	var journalFiles []string
	if db := a.dbPath(); !strings.Contains(db, ":") {
		for _, suffix := range []string{"", "-wal", "-shm", "-journal", ".locks"} {
			journalFiles = append(journalFiles, db+suffix)
			if r := realpath.Resolve(db + suffix); r != db+suffix {
				journalFiles = append(journalFiles, r)
			}
		}
	}
	if f.policy != "" && f.policy != "default" {
		protected = append(protected, defaultPolicy.Name())
	}
	// A workspace root inside Keel's home or a journal file would refuse
	// every workspace under it: say so now, not at each run.
	for _, r := range roots {
		rr := realpath.Resolve(r)
		for _, p := range append(slices.Clone(protected), journalFiles...) {
			if realpath.Within(rr, realpath.Resolve(p)) {
				return usagef("--workspace-root %s is inside %s, which holds the server's own files (tokens, configuration, journal): no run could work there; choose a directory outside it", r, p)
			}
		}
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
	logger := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level}))
	store, err := a.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	// Metrics count the events this process appends; the run gauges are
	// read from the journal (incrementally) at each scrape, the active
	// runs from the handler (or keel worker's runs).
	var active atomic.Pointer[func() int]
	gauges := telemetry.NewRunGauges(store)
	metrics := telemetry.NewMetrics(func() telemetry.Snapshot { return serverSnapshot(ctx, gauges, &active) }, nil)
	a.metrics = metrics
	rt, flushTelemetry, err := a.newRuntime(ctx, store, &agent.RuntimeOptions{Logger: logger}, metrics)
	if err != nil {
		return err
	}
	defer flushTelemetry()
	defer a.live.Sweep(ctx, store, logger)()
	tokens := token.New(store, nil)
	// The settings of the runs this server creates; a run keeps its own
	// when it is resumed (here or elsewhere).
	settings := agent.Settings{CommandTimeout: agent.Duration(f.commandTimeout), CommandIdleTimeout: agent.Duration(f.commandIdle), Concurrency: f.concurrency,
		MaxResultChars: f.maxResultChars, ModelIdleTimeout: agent.Duration(f.idleTimeout), ModelStallRetries: f.stallRetries, ModelRetries: f.retries,
		NoCheckpoints: f.noCheckpoints}
	if err := settings.Validate(); err != nil {
		return usagef("%v", err)
	}
	b := newBuilder(a, store, logger)
	if f.metricsAddr != "" {
		stop, err := a.serveMetrics(ctx, f.metricsAddr, metrics, logger)
		if err != nil {
			return err
		}
		defer stop()
	}
	if f.worker {
		return a.runWorker(ctx, f, rt, b, &active, logger)
	}
	dispatcher, closeDispatch, err := a.dispatcher(ctx, f, logger)
	if err != nil {
		return err
	}
	defer closeDispatch()
	publicURL := strings.TrimSuffix(f.publicURL, "/")
	if publicURL != "" {
		if u, err := url.Parse(publicURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" {
			return usagef("--public-url %q: want an absolute http(s) URL without a query", f.publicURL)
		}
	}
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	urls, exposed := serverURLs(ln.Addr())
	base := urls[0]
	release, err := a.serverLease(ctx, store, "keel serve at "+base)
	if err != nil {
		ln.Close()
		return err
	}
	defer release()
	if publicURL == "" {
		publicURL = base
	}
	// The vault of the API's and the web UI's Connect: without a vault
	// key it answers that it has none.
	var vault service.Connector
	if v, err := a.openVault(store); err != nil {
		logger.Warn("no credential vault: Connect from the API and web UI is off", "err", err)
	} else {
		vault = v
	}
	so := &service.Options{Builder: b, Workers: f.workers, Tokens: tokens, Logger: logger,
		WorkspaceRoots: roots, Protected: protected, JournalFiles: journalFiles, Sandbox: sbKind, AllowSandboxOverride: f.allowNoSandbox, Policy: defaultPolicy,
		ReplayDirs: replayDirs, SecretEnv: f.secretEnv, Getenv: a.getenv, DefaultModel: defaultModel, ModelBaseURLs: baseURLs, Settings: settings, NoCheckpoints: f.noCheckpoints,
		Adopt: f.adoptInterval(a.dbPath()), Vault: vault, PublicURL: publicURL, Skills: a.skillHost(store), Evals: evalrun.Host{Home: a.home}}
	if dispatcher != nil {
		so.Dispatcher = dispatcher
		so.ScheduleDriver = cluster.NewSchedules(dispatcher.Client())
	}
	if err := a.unattended(store, so, true); err != nil {
		ln.Close()
		return err
	}
	svc := service.New(rt, so)
	h := server.NewHandler(svc, &server.Options{Logger: logger})
	activeRuns := func() int { n, _ := svc.Load(); return n }
	active.Store(&activeRuns)
	if err := a.firstToken(ctx, h, tokens, urls); err != nil {
		ln.Close()
		return err
	}
	resumed, err := svc.Start(ctx)
	if err != nil {
		ln.Close()
		return err
	}
	if len(resumed) > 0 {
		fmt.Fprintf(a.stderr, "keel serve: resuming %d run(s) interrupted by the last stop\n", len(resumed))
	}
	if dispatcher != nil {
		// Temporal Schedules time the fires; this server records them.
		stopFires, err := (&cluster.Fires{Scheduler: svc.Scheduler()}).Start(dispatcher.Client())
		if err != nil {
			ln.Close()
			return err
		}
		defer stopFires()
	}
	reqCtx, stopRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRequests()
	mux := http.NewServeMux()
	// On the API's listener, metrics need a token (metrics:read or
	// admin), as Prometheus sends with authorization: credentials_file.
	mux.Handle("GET /metrics", h.RequireScope(api.ScopeMetricsRead, metrics.Handler()))
	// Keel as an MCP server (streamable HTTP), behind the API's tokens.
	mux.Handle("/mcp", a.mcpHandler(tokens, base))
	mux.Handle("/", a.withJWKS(h, store))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return reqCtx },
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if exposed {
		where := ln.Addr().String()
		if tcp, ok := ln.Addr().(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
			where = fmt.Sprintf("every network interface (port %d)", tcp.Port)
		}
		fmt.Fprintf(a.stderr, "keel serve: WARNING: listening on %s, reachable from other machines over plain HTTP: API tokens and the web UI's session cross the network unencrypted; serve it behind a TLS proxy (or listen on 127.0.0.1)\n", where)
	}
	if len(roots) == 0 {
		fmt.Fprintln(a.stderr, "keel serve: no workspace roots: clients can start only the demo run; name the directories runs may use with --workspace-root DIR (or workspace_roots in the [serve] table of config.toml)")
	} else {
		fmt.Fprintf(a.stderr, "keel serve: workspace roots: %s\n", strings.Join(roots, ", "))
	}

	fmt.Fprintf(a.stderr, "keel serve: listening on %s · web UI %s/ui/ · journal %s · %d workers · sandbox %s\n", base, base, redact.DSN(a.dbPath()), f.workers, sbKind)

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
	if err := svc.Shutdown(sctx); err != nil {
		return err
	}
	fmt.Fprintln(a.stderr, "keel serve: stopped; executing runs were paused and resume at the next start")
	return nil
}

// serveMetrics serves /metrics, without a token, on a listener of its own
// at addr (--metrics-addr) until the returned function is called.
func (a *app) serveMetrics(ctx context.Context, addr string, metrics *telemetry.Metrics, logger *slog.Logger) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	go func() { _ = srv.Serve(ln) }()
	where := ln.Addr().String()
	if _, exposed := serverURLs(ln.Addr()); exposed {
		fmt.Fprintf(a.stderr, "keel: metrics at http://%s/metrics without a token, reachable from other machines (agent and user names, counts; never content): keep it on a private network\n", where)
	} else {
		fmt.Fprintf(a.stderr, "keel: metrics at http://%s/metrics (no token)\n", where)
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}

// serverURLs returns the URLs this machine reaches a listener at, the one
// to print first, and whether other machines can reach it too. A
// listener on every interface (0.0.0.0, ::) is reached locally at
// 127.0.0.1 (never printed as http://[::]:PORT, which browsers refuse).
func serverURLs(addr net.Addr) (urls []string, exposed bool) {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return []string{"http://" + addr.String()}, false
	}
	port := strconv.Itoa(tcp.Port)
	switch {
	case tcp.IP.IsUnspecified():
		return []string{"http://127.0.0.1:" + port, "http://localhost:" + port, "http://[::1]:" + port}, true
	case tcp.IP.IsLoopback():
		urls = []string{"http://" + net.JoinHostPort(tcp.IP.String(), port), "http://localhost:" + port}
		return urls, false
	}
	return []string{"http://" + net.JoinHostPort(tcp.IP.String(), port)}, true
}

// savedToken is the content of $KEEL_HOME/server-token: the admin token
// keel serve made, and the server URLs it may be sent to. The command line
// sends it to no other server.
type savedToken struct {
	// Servers are base URLs ("http://127.0.0.1:8420") this token is for.
	Servers []string `json:"servers"`
	Token   string   `json:"token"`
	// Others are the tokens of other servers (other journals) started
	// from this KEEL_HOME before, each for its own URLs: a second keel
	// serve does not take the first one's token away.
	Others []savedToken `json:"others,omitempty"`
}

// lookup returns the saved token for the server at raw, or nil.
func (st *savedToken) lookup(raw string) *savedToken {
	if st.isFor(raw) {
		return st
	}
	for i := range st.Others {
		if st.Others[i].isFor(raw) {
			return &st.Others[i]
		}
	}
	return nil
}

// allServers returns every URL a saved token is for.
func (st *savedToken) allServers() []string {
	all := slices.Clone(st.Servers)
	for _, o := range st.Others {
		all = append(all, o.Servers...)
	}
	return all
}

// with returns the file with e as its newest token: the others keep
// their URLs but those of e (which now name e's server).
func (st *savedToken) with(e savedToken) *savedToken {
	out := &savedToken{Servers: e.Servers, Token: e.Token}
	for _, o := range append([]savedToken{{Servers: st.Servers, Token: st.Token}}, st.Others...) {
		if o.Token == "" || o.Token == e.Token {
			continue
		}
		o.Servers = slices.DeleteFunc(slices.Clone(o.Servers), func(u string) bool {
			return slices.ContainsFunc(e.Servers, func(v string) bool { return origin(u) == origin(v) })
		})
		if len(o.Servers) > 0 {
			out.Others = append(out.Others, savedToken{Servers: o.Servers, Token: o.Token})
		}
	}
	return out
}

// readSavedToken reads the token file; a file in the old format (the
// token alone) has no servers and is sent nowhere.
func readSavedToken(path string) (*savedToken, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var st savedToken
	if json.Unmarshal(b, &st) != nil {
		return &savedToken{Token: strings.TrimSpace(string(b))}, nil
	}
	return &st, nil
}

// writeSavedToken writes the token file (mode 0600).
func writeSavedToken(path string, st *savedToken) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// origin returns a URL's scheme, host and port in canonical form
// ("http://127.0.0.1:8420"), or "" if it is not an http(s) URL.
func origin(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ""
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return strings.ToLower(u.Scheme) + "://" + net.JoinHostPort(strings.ToLower(host), port)
}

// isFor reports whether the saved token is for the server at raw.
func (st *savedToken) isFor(raw string) bool {
	o := origin(raw)
	return o != "" && slices.ContainsFunc(st.Servers, func(s string) bool { return origin(s) == o })
}

// firstToken creates an admin token when the journal has none, prints it
// once with a one-time sign-in link, and saves it for the local command
// line, bound to this server's URLs. When the saved token is still valid
// on this journal (a restart, perhaps on another port), it binds it to
// the URLs of this start instead.
func (a *app) firstToken(ctx context.Context, h *server.Handler, tokens *token.Set, urls []string) error {
	saved := a.serverTokenFile()
	n, err := tokens.Count(ctx)
	if err != nil {
		return err
	}
	st, err := readSavedToken(saved)
	if err != nil {
		st = &savedToken{}
	}
	if n > 0 {
		for _, e := range append([]savedToken{{Servers: st.Servers, Token: st.Token}}, st.Others...) {
			if e.Token == "" {
				continue
			}
			if _, err := tokens.Authenticate(ctx, e.Token); err != nil {
				continue // a token of another journal, or revoked
			}
			if !slices.Equal(e.Servers, urls) || e.Token != st.Token {
				e.Servers = urls
				if err := writeSavedToken(saved, st.with(e)); err != nil {
					fmt.Fprintf(a.stderr, "keel serve: could not update %s: %v\n", saved, err)
				}
			}
			return nil
		}
		return nil
	}
	name := a.person("")
	if token.CheckName(name) != nil {
		name = "admin"
	}
	tok, err := tokens.Create(ctx, &token.Params{Name: name, Scopes: []string{api.ScopeAdmin}, By: "keel serve"})
	if err != nil {
		return err
	}
	if err := writeSavedToken(saved, st.with(savedToken{Servers: urls, Token: tok.Secret})); err != nil {
		saved = ""
	}
	fmt.Fprintf(a.stderr, "keel serve: created the first API token (admin, for %s). It is shown only this once:\n\n    %s\n\n", visible.String(tok.Name), tok.Secret)
	if code, err := h.LoginCode(ctx, tok.Secret); err == nil {
		fmt.Fprintf(a.stderr, "  sign in to the web UI:  %s/ui/login?code=%s\n  (a one-time link, valid for 15 minutes; later, paste the token at %s/ui/login)\n", urls[0], code, urls[0])
	}
	if saved != "" {
		fmt.Fprintf(a.stderr, "  saved for the command line in %s, for %s only: keel --server %s runs list\n", saved, urls[0], urls[0])
	}
	fmt.Fprintf(a.stderr, "  more tokens: keel tokens create --name NAME --scope runs:read,runs:write,approvals:write --agent AGENT\n\n")
	return nil
}

// serverLeaseID is the lease a server holds on a SQLite journal: no
// run's id (run ids have no spaces).
const serverLeaseID = "keel serve"

// serverLease makes this process the only server of a SQLite journal: a
// second keel serve on it would resume the first one's runs as
// interrupted and rebind the saved CLI token. It is the journal's own
// lease (flock(2) beside the database, released when the process dies),
// taken on a name that is no run's (keel scheduler takes it too). Several
// servers on one PostgreSQL journal stay allowed: they share it by the
// run leases and --adopt. note says who holds it ("keel serve at URL").
func (a *app) serverLease(ctx context.Context, store journal.Store, note string) (func(), error) {
	s, ok := store.(interface {
		LockAs(ctx context.Context, id, note string) (func(), error)
		Holder(ctx context.Context, id string) (string, error)
	})
	if !ok || isPostgres(a.dbPath()) {
		return func() {}, nil
	}
	unlock, err := s.LockAs(ctx, serverLeaseID, note)
	if errors.Is(err, journal.ErrLocked) {
		holder, _ := s.Holder(ctx, serverLeaseID)
		if holder == "" {
			holder = "holder unknown"
		}
		return nil, usagef("the journal %s already has a server (%s): a SQLite journal takes one keel serve; stop that one, or give this one another --db (several servers share a PostgreSQL journal)", redact.DSN(a.dbPath()), holder)
	}
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	return unlock, nil
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
