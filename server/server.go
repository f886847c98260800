package server

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
	"github.com/keel-run/keel/service"
)

// Options configures [NewHandler]: what the HTTP layer itself does
// (event streams, sign-in). What runs may be created, how they are
// executed and everything else is the service's ([service.Options]). The
// zero value is valid.
type Options struct {
	// Logger receives the server's log; nil discards it.
	Logger *slog.Logger
	// Poll is how often event streams re-read a run that no in-process
	// append woke, to see appends by other processes; 0 means one
	// second. Appends through this server wake streams at once.
	Poll time.Duration
	// Heartbeat is the interval of keep-alive comments on idle event
	// streams; 0 means 15 seconds.
	Heartbeat time.Duration
	// TokenCheck is how often an open event stream (API or web UI)
	// checks that its token is still valid, besides before each batch
	// of events; 0 means one second. A revocation through this server
	// ends the token's streams at once; one by another process sharing
	// the journal within TokenCheck plus the token refresh (one second).
	TokenCheck time.Duration
	// LoginCodeTTL is how long a sign-in code of [Handler.LoginCode]
	// stays valid; 0 means 15 minutes.
	LoginCodeTTL time.Duration
	// SessionTTL is how long a web UI session lasts after sign-in; 0
	// means 12 hours.
	SessionTTL time.Duration
}

// Handler is Keel's team server over a [service.Service]: the HTTP API
// under /v1, its event streams, and the web UI under /ui. Every
// operation is the service's; the handler decodes requests, calls it and
// encodes its answers. It implements [http.Handler].
type Handler struct {
	svc    *service.Service
	rt     *agent.Runtime
	opts   Options
	mux    *http.ServeMux
	tokens *token.Set
	logger *slog.Logger
	ui     *uiPages
	logins *logins
}

// NewHandler returns the server of svc. opts may be nil.
func NewHandler(svc *service.Service, opts *Options) *Handler {
	h := &Handler{svc: svc, rt: svc.Runtime(), tokens: svc.Tokens()}
	if opts != nil {
		h.opts = *opts
	}
	if h.opts.Poll <= 0 {
		h.opts.Poll = time.Second
	}
	if h.opts.Heartbeat <= 0 {
		h.opts.Heartbeat = 15 * time.Second
	}
	if h.opts.TokenCheck <= 0 {
		h.opts.TokenCheck = time.Second
	}
	h.logger = h.opts.Logger
	if h.logger == nil {
		h.logger = slog.New(slog.DiscardHandler)
	}
	if h.opts.LoginCodeTTL <= 0 {
		h.opts.LoginCodeTTL = 15 * time.Minute
	}
	h.logins = &logins{codes: map[string]loginCode{}, sessions: map[string]loginCode{}}
	if h.opts.SessionTTL <= 0 {
		h.opts.SessionTTL = 12 * time.Hour
	}
	h.ui = newUIPages(h.proposedDiff)
	h.mux = http.NewServeMux()
	for _, rt := range routes {
		h.mux.Handle(rt.method+" "+rt.pattern, h.endpoint(rt))
	}
	h.mux.HandleFunc("/v1/", h.noRoute)
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	h.registerUI(h.mux)
	return h
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	h.mux.ServeHTTP(w, r)
}

// Service returns the handler's service.
func (h *Handler) Service() *service.Service { return h.svc }

// caller is the authenticated identity of a request.
type caller = service.Caller

// route is one API endpoint.
type route struct {
	method, pattern string
	// scope is the token scope the endpoint needs ("" for none).
	scope string
	serve func(h *Handler, w http.ResponseWriter, r *http.Request, who *caller) error
}

// endpoint wraps a route with authentication, its scope check and error
// mapping.
func (h *Handler) endpoint(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var who *caller
		if rt.scope != "" {
			var err error
			who, err = h.authenticate(r)
			if err != nil {
				h.fail(w, r, err)
				return
			}
			if err := service.NeedScope(&who.Token, rt.scope); err != nil {
				h.fail(w, r, err)
				return
			}
		}
		if err := h.resolveRun(r); err != nil {
			h.fail(w, r, err)
			return
		}
		if err := rt.serve(h, w, r, who); err != nil {
			h.fail(w, r, err)
		}
	})
}

// RequireScope serves next only to requests with an API token (bearer
// or the web UI's cookie) that has scope, answering others as the API
// does (401, 403). keel serve puts /metrics behind it.
func (h *Handler) RequireScope(scope string, next http.Handler) http.Handler {
	return h.endpoint(route{scope: scope, serve: func(_ *Handler, w http.ResponseWriter, r *http.Request, _ *caller) error {
		next.ServeHTTP(w, r)
		return nil
	}})
}

// fail writes err as an API error, logging internal ones.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	e, internal := classify(err)
	if internal {
		h.logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeError(w, e)
}

// noRoute answers requests under /v1/ that match no route: 405 with an
// Allow header when the path exists for other methods, else 404.
func (h *Handler) noRoute(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		r2 := r.Clone(r.Context())
		r2.Method = m
		if _, pat := h.mux.Handler(r2); pat != "/v1/" && pat != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, &apiError{http.StatusMethodNotAllowed, api.CodeInvalidRequest, fmt.Sprintf("%s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", "))})
		return
	}
	writeError(w, &apiError{http.StatusNotFound, api.CodeNotFound, "no API route " + r.Method + " " + r.URL.Path})
}

// cookieName is the web UI's session cookie: a random session id, never
// the token itself (see Handler.Session).
const cookieName = "keel_session"

// authenticate finds the request's token: "Authorization: Bearer
// keel_...", or the web UI's session cookie. A cookie authenticates a
// request that changes state only if the browser says it comes from this
// site (Sec-Fetch-Site, Origin or Referer: sameOrigin), so another site
// cannot act with it.
func (h *Handler) authenticate(r *http.Request) (*caller, error) {
	if a := r.Header.Get("Authorization"); a != "" {
		// The scheme is case-insensitive (RFC 9110, section 11.1).
		scheme, secret, ok := strings.Cut(strings.TrimSpace(a), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return nil, &apiError{http.StatusUnauthorized, api.CodeUnauthenticated, `the Authorization header must be "Bearer TOKEN"`}
		}
		return asCaller(h.tokens.Authenticate(r.Context(), strings.TrimSpace(secret)))
	}
	c, err := r.Cookie(cookieName)
	if err != nil {
		return nil, &apiError{http.StatusUnauthorized, api.CodeUnauthenticated, "no API token: send Authorization: Bearer TOKEN (create one with `keel tokens create`)"}
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead && !sameOrigin(r) {
		return nil, &apiError{http.StatusForbidden, api.CodeForbidden, "cross-site request refused: a session cookie changes state only from this server's own pages (Sec-Fetch-Site, Origin or Referer); API clients send Authorization: Bearer TOKEN"}
	}
	secret, ok := h.sessionSecret(c.Value)
	if !ok {
		return nil, &apiError{http.StatusUnauthorized, api.CodeUnauthenticated, "your session has ended: sign in again"}
	}
	return asCaller(h.tokens.Authenticate(r.Context(), secret))
}

// crossOrigin is net/http's check of Sec-Fetch-Site, else Origin.
var crossOrigin = http.NewCrossOriginProtection()

// sameOrigin reports whether a state-changing browser request (a session
// cookie's, or a sign-in form's) comes from this server's own pages:
// Sec-Fetch-Site says same-origin, else Origin names this host (both
// net/http's CrossOriginProtection), else Referer is a page of this
// host. A request with none of the three is refused: a browser sends
// at least one on a POST (Referrer-Policy can drop only the Referer),
// and a client that is not a browser authenticates with "Authorization:
// Bearer" (never asked this).
func sameOrigin(r *http.Request) bool {
	if r.Header.Get("Sec-Fetch-Site") != "" || r.Header.Get("Origin") != "" {
		if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
			return false // "same-site" is another origin; "none" is no page's
		}
		return crossOrigin.Check(r) == nil
	}
	ref := r.Header.Get("Referer")
	if ref == "" {
		return false
	}
	u, err := url.Parse(ref)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.User == nil && strings.EqualFold(u.Host, r.Host)
}
