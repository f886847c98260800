// Package serve runs Keel's long-lived processes over a service whose
// options the command line built: keel serve (the team server's
// listener, its first token, the journal's lease, the hand-over to
// Temporal, a clean shutdown), keel worker and keel scheduler. It reads
// no flags or configuration: internal/cli parses them and prints its
// usage; this package starts, serves and stops.
package serve

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/cluster"
	"github.com/keel-run/keel/internal/mcpserver"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/redact"
	"github.com/keel-run/keel/server"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
	"github.com/keel-run/keel/service"
	"github.com/keel-run/keel/visible"
)

// Server is one keel serve: the HTTP API, the web UI, Keel's MCP tools
// at /mcp and /metrics on one listener, over a service on the journal.
type Server struct {
	// Addr is the address to listen on (host:port; port 0 picks one).
	Addr string
	// Store is the journal, at the address Journal (printed redacted).
	Store   journal.Store
	Journal string
	Runtime *agent.Runtime
	// Service are the options of the server's service. Run sets
	// PublicURL when it is empty (to the listening address), and, with
	// Temporal, Dispatcher and ScheduleDriver.
	Service *service.Options
	// Temporal is the Temporal frontend (HOST:PORT) runs are handed to,
	// for keel worker processes to execute; "" executes them here.
	Temporal string
	// Metrics are served at /metrics to tokens with metrics:read; nil
	// serves none.
	Metrics *Metrics
	// TokenFile is where the admin token the server makes on a journal
	// with none is saved for the local command line (bound to the
	// server's URLs); FirstTokenName names that token's person.
	TokenFile      string
	FirstTokenName string
	// Wrap, when set, wraps the API's and the web UI's handler (the
	// vault's public keys beside it).
	Wrap func(http.Handler) http.Handler
	// ShutdownTimeout bounds how long a shutdown waits for executing
	// runs to pause; 0 means one minute.
	ShutdownTimeout time.Duration
	Logger          *slog.Logger
	// Out receives what the server tells the person who started it (its
	// address, the first token, warnings).
	Out io.Writer
}

// Run serves until ctx ends, then stops taking requests and pauses the
// runs it executes (they resume at the next start).
func (s *Server) Run(ctx context.Context) error {
	so := s.Service
	if s.Temporal != "" {
		c, err := dialTemporal(ctx, s.Temporal, s.Logger)
		if err != nil {
			return err
		}
		defer c.Close()
		fmt.Fprintf(s.Out, "keel serve: handing runs to keel workers through Temporal at %s\n", s.Temporal)
		d := cluster.NewDispatcher(c)
		so.Dispatcher, so.ScheduleDriver = d, cluster.NewSchedules(c)
	}
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer ln.Close()
	urls, exposed := URLs(ln.Addr())
	base := urls[0]
	release, err := Lease(ctx, s.Store, s.Journal, "keel serve at "+base)
	if err != nil {
		return err
	}
	defer release()
	if so.PublicURL == "" {
		so.PublicURL = base
	}
	svc := service.New(s.Runtime, so)
	h := server.NewHandler(svc, &server.Options{Logger: s.Logger})
	s.Metrics.setActive(func() int { n, _ := svc.Load(); return n })
	if err := s.firstToken(ctx, h, svc.Tokens(), urls); err != nil {
		return err
	}
	resumed, err := svc.Start(ctx)
	if err != nil {
		return err
	}
	if len(resumed) > 0 {
		fmt.Fprintf(s.Out, "keel serve: resuming %d run(s) interrupted by the last stop\n", len(resumed))
	}
	if d, ok := so.Dispatcher.(*cluster.Dispatcher); ok {
		// Temporal Schedules time the fires; this server records them.
		stopFires, err := (&cluster.Fires{Scheduler: svc.Scheduler()}).Start(d.Client())
		if err != nil {
			return err
		}
		defer stopFires()
	}
	reqCtx, stopRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRequests()
	mux := http.NewServeMux()
	if s.Metrics != nil {
		// On the API's listener, metrics need a token (metrics:read or
		// admin), as Prometheus sends with authorization: credentials_file.
		mux.Handle("GET /metrics", h.RequireScope(api.ScopeMetricsRead, s.Metrics.Handler()))
	}
	// Keel as an MCP server (streamable HTTP), behind the API's tokens.
	mux.Handle("/mcp", mcpserver.Handler(svc.Tokens(), base))
	var root http.Handler = h
	if s.Wrap != nil {
		root = s.Wrap(h)
	}
	mux.Handle("/", root)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return reqCtx },
		ErrorLog: slog.NewLogLogger(s.Logger.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if exposed {
		where := ln.Addr().String()
		if tcp, ok := ln.Addr().(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
			where = fmt.Sprintf("every network interface (port %d)", tcp.Port)
		}
		fmt.Fprintf(s.Out, "keel serve: WARNING: listening on %s, reachable from other machines over plain HTTP: API tokens and the web UI's session cross the network unencrypted; serve it behind a TLS proxy (or listen on 127.0.0.1)\n", where)
	}
	if len(so.WorkspaceRoots) == 0 {
		fmt.Fprintln(s.Out, "keel serve: no workspace roots: clients can start only the demo run; name the directories runs may use with --workspace-root DIR (or workspace_roots in the [serve] table of config.toml)")
	} else {
		fmt.Fprintf(s.Out, "keel serve: workspace roots: %s\n", strings.Join(so.WorkspaceRoots, ", "))
	}

	fmt.Fprintf(s.Out, "keel serve: listening on %s · web UI %s/ui/ · journal %s · %d workers · sandbox %s\n", base, base, redact.DSN(s.Journal), so.Workers, so.Sandbox)

	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	}
	fmt.Fprintln(s.Out, "keel serve: shutting down: no new requests; pausing executing runs (a second Ctrl-C exits at once)")
	timeout := s.ShutdownTimeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	stopRequests() // ends event streams, which never finish on their own
	if err := srv.Shutdown(sctx); err != nil {
		s.Logger.Warn("http shutdown", "err", err)
	}
	if err := svc.Shutdown(sctx); err != nil {
		return err
	}
	fmt.Fprintln(s.Out, "keel serve: stopped; executing runs were paused and resume at the next start")
	return nil
}

// firstToken creates an admin token when the journal has none, prints it
// once with a one-time sign-in link, and saves it for the local command
// line, bound to this server's URLs. When the saved token is still valid
// on this journal (a restart, perhaps on another port), it binds it to
// the URLs of this start instead and prints a new sign-in link for it.
func (s *Server) firstToken(ctx context.Context, h *server.Handler, tokens *token.Set, urls []string) error {
	saved := s.TokenFile
	n, err := tokens.Count(ctx)
	if err != nil {
		return err
	}
	st, err := ReadTokens(saved)
	if err != nil {
		st = &Tokens{}
	}
	if n > 0 {
		for _, e := range append([]Tokens{{Servers: st.Servers, Token: st.Token}}, st.Others...) {
			if e.Token == "" {
				continue
			}
			if _, err := tokens.Authenticate(ctx, e.Token); err != nil {
				continue // a token of another journal, or revoked
			}
			if !slices.Equal(e.Servers, urls) || e.Token != st.Token {
				e.Servers = urls
				if err := writeTokens(saved, st.with(e)); err != nil {
					fmt.Fprintf(s.Out, "keel serve: could not update %s: %v\n", saved, err)
				}
			}
			// Web UI sessions live in memory: a restart signs everyone
			// out. The person who started the server holds the saved
			// token already; a new one-time link gets them back in.
			if code, err := h.LoginCode(ctx, e.Token); err == nil {
				fmt.Fprintf(s.Out, "keel serve: sign in to the web UI:  %s/ui/login?code=%s\n  (a one-time link, valid for 15 minutes, for the admin token saved in %s; every start prints a new one)\n", urls[0], code, saved)
			}
			return nil
		}
		return nil
	}
	name := s.FirstTokenName
	if token.CheckName(name) != nil {
		name = "admin"
	}
	tok, err := tokens.Create(ctx, &token.Params{Name: name, Scopes: []string{api.ScopeAdmin}, By: "keel serve"})
	if err != nil {
		return err
	}
	if err := writeTokens(saved, st.with(Tokens{Servers: urls, Token: tok.Secret})); err != nil {
		saved = ""
	}
	fmt.Fprintf(s.Out, "keel serve: created the first API token (admin, for %s). It is shown only this once:\n\n    %s\n\n", visible.String(tok.Name), tok.Secret)
	if code, err := h.LoginCode(ctx, tok.Secret); err == nil {
		fmt.Fprintf(s.Out, "  sign in to the web UI:  %s/ui/login?code=%s\n  (a one-time link, valid for 15 minutes; later, paste the token at %s/ui/login)\n", urls[0], code, urls[0])
	}
	if saved != "" {
		fmt.Fprintf(s.Out, "  saved for the command line in %s, for %s only: keel --server %s runs list\n", saved, urls[0], urls[0])
	}
	fmt.Fprintf(s.Out, "  more tokens: keel tokens create --name NAME --scope runs:read,runs:write,approvals:write --agent AGENT\n\n")
	return nil
}
