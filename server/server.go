package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
)

// Options configures [NewHandler]. The zero value serves a read-only
// API: creating runs needs Prepare, executing them needs Wire.
type Options struct {
	// Wire builds the live parts of one execution of a run from its
	// run.created payload (model client, tools, sandbox, policy). Without
	// it, runs are journaled but never executed.
	Wire agent.WireFunc
	// Prepare turns a create request into a run.created payload:
	// validates it and fills in defaults (system prompt, tools,
	// completion marker, sandbox), creating a workspace for a demo run.
	// Errors it returns wrapped in [ErrInvalid] are the caller's fault
	// (HTTP 400). Without it, POST /v1/runs answers 503.
	Prepare func(ctx context.Context, req *api.CreateRun) (*agent.RunCreated, error)
	// Workers bounds the runs executing at once; 0 means 4. Further runs
	// queue in submission order.
	Workers int
	// Tokens authenticates requests; nil means [token.New] on the
	// runtime's store.
	Tokens *token.Set
	// Directory is the agent directory behind /v1/agents and the gate's
	// principal checks; nil means identity.NewDirectory on the runtime's
	// store (the directory lives in the journal).
	Directory *identity.Directory
	// ExpiryInterval is how often the server looks for approvals whose
	// deadline passed, to apply their default decision; 0 means 10
	// seconds.
	ExpiryInterval time.Duration
	// Logger receives the server's log; nil discards it.
	Logger *slog.Logger
	// Clock gives the times of the server's own events; nil means
	// time.Now.
	Clock journal.Clock
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

	// WorkspaceRoots are the directories runs created or forked through
	// the API may work in: a workspace must be one of them or below one,
	// symlinks resolved. Empty means the API creates no run but the demo
	// (whose workspace Prepare makes). See docs/server.md.
	WorkspaceRoots []string
	// Protected are paths no run's workspace may be, be inside, or
	// contain, whoever asks: Keel's home directory, files holding the
	// server's secrets or configuration.
	Protected []string
	// JournalFiles are the journal's files (the database and the files
	// beside it: -wal, -shm, the lock directory): no run's workspace may
	// be or contain one. A workspace may be elsewhere in the journal's
	// directory (a root /srv/work beside /srv/keel.db).
	JournalFiles []string
	// Sandbox is the sandbox every run of the server uses: "linux" (the
	// default) or "none". A client may not ask for less isolation.
	Sandbox string
	// AllowSandboxOverride lets admin tokens ask for runs without
	// isolation (sandbox none) on a server whose sandbox is linux; the
	// override is journaled in run.created ([LabelOverride]). No other
	// token can, ever.
	AllowSandboxOverride bool
	// Policy is the server's policy: runs created through the API decide
	// by it, and a run resumed or forked through the API must decide by
	// it (or, for the demo run, by [DemoPolicy]). Only admin tokens may
	// choose another (journaled as an override). nil means
	// policy.Default().
	Policy *policy.Engine
	// ReplayDirs are the directories "replay:" model specs of non-admin
	// tokens may name recordings in (by file name, or by a path inside
	// one). Empty: only admin tokens may use replay models.
	ReplayDirs []string
	// DefaultModel is the model spec runs get when they name none (the
	// operator's choice, so always allowed); "" means none.
	DefaultModel string
	// ModelBaseURLs are the base URLs "openai-compatible:" model specs of
	// non-admin tokens may name (the server would send them its API
	// key). Empty: only admin tokens may name such endpoints.
	ModelBaseURLs []string
	// Validate, if set, checks that a run can be executed as it is (its
	// model, sandbox, workspace and network settings wire), for runs the
	// API creates, forks and resumes, so that a run that would fail at
	// once is refused with HTTP 400 instead. Errors wrapped in
	// [ErrInvalid] are the request's fault; others are internal.
	Validate func(ctx context.Context, c *agent.RunCreated) error
	// LoginCodeTTL is how long a sign-in code of [Handler.LoginCode]
	// stays valid; 0 means 15 minutes.
	LoginCodeTTL time.Duration
	// SessionTTL is how long a web UI session lasts after sign-in; 0
	// means 12 hours.
	SessionTTL time.Duration
	// Adopt is how often the server looks for runs that should be
	// executing but whose lease no process holds (their server died),
	// and executes them; 0 means never (only Start does, once). Set it
	// when several servers share the journal (see cluster.go).
	Adopt time.Duration
	// CancelWait bounds how long a cancel of a run that another server
	// executes waits for that server to record it; 0 means 30 seconds.
	CancelWait time.Duration
	// Vault, if set, lets the API and the web UI authorize the calls
	// that wait in auth.required (POST /v1/runs/{id}/auth/{call}/connect,
	// the Connect button); the authorization server redirects the
	// browser to PublicURL + [CallbackPath]. Without both, those answer
	// 503 and keel auth connect is the way.
	Vault Connector
	// PublicURL is the base URL browsers reach the server at
	// ("https://keel.example.com"), for the authorization callback.
	PublicURL string
	// Dispatch, if set, hands runs to other processes instead of
	// executing them here: each run the server would execute is passed
	// to Dispatch (keel serve --temporal signals the run's Temporal
	// workflow; see package cluster). Wire is then unused.
	Dispatch func(ctx context.Context, runID string) error
	// Adopted, if set with Dispatch, is used instead of it for the runs
	// the server adopts ([Options.Adopt]: running, no lease held, quiet
	// for a while), which between two steps on a busy worker are many:
	// keel serve --temporal wakes a run's workflow only when it has no
	// step pending.
	Adopted func(ctx context.Context, runID string) error
}

// ErrInvalid marks an error from [Options.Prepare] that is the request's
// fault; the API answers 400 with its message.
var ErrInvalid = errors.New("server: invalid request")

// Handler is Keel's team server: the HTTP API under /v1, the web UI under
// /ui, and the worker pool that executes runs. It implements
// [http.Handler]. Call [Handler.Start] to resume runs interrupted by a
// previous stop, and [Handler.Shutdown] to pause executions cleanly.
type Handler struct {
	rt      *agent.Runtime
	opts    Options
	mux     *http.ServeMux
	pool    *pool
	live    *liveHub
	sums    *summaries
	tokens  *token.Set
	actions *journal.Stream
	control *journal.Stream
	logger  *slog.Logger
	ui      *uiPages
	conf    *confinement
	logins  *logins
	// policyRef and demoPolicyRef identify the server's policy and the
	// demo's, as runs record them.
	policyRef, demoPolicyRef *agent.PolicyRef

	// idleWait, if set, is called when a resume starts waiting for an
	// execution that is ending (tests).
	idleWait func(runID string)
	// adoptSwept, if set, is called after each adoption sweep with the
	// number of runs it submitted (tests).
	adoptSwept func(n int)

	stopOnce sync.Once
	stop     chan struct{} // closed by Shutdown
	sweeping sync.WaitGroup
}

// NewHandler returns the server for rt. opts may be nil. The worker pool
// starts at once (idle until runs are submitted).
func NewHandler(rt *agent.Runtime, opts *Options) *Handler {
	h := &Handler{rt: rt}
	if opts != nil {
		h.opts = *opts
	}
	if h.opts.Workers <= 0 {
		h.opts.Workers = 4
	}
	if h.opts.Clock == nil {
		h.opts.Clock = time.Now
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
	h.tokens = h.opts.Tokens
	if h.tokens == nil {
		h.tokens = token.New(rt.Store(), &token.Options{Clock: h.opts.Clock})
	}
	if h.opts.Directory == nil {
		h.opts.Directory = identity.NewDirectory(rt.Store(), &identity.Options{Clock: h.opts.Clock})
	}
	if h.opts.ExpiryInterval <= 0 {
		h.opts.ExpiryInterval = 10 * time.Second
	}
	if h.opts.Policy == nil {
		h.opts.Policy = policy.Default()
	}
	if h.opts.LoginCodeTTL <= 0 {
		h.opts.LoginCodeTTL = 15 * time.Minute
	}
	h.policyRef, h.demoPolicyRef = agent.NewPolicyRef(h.opts.Policy), agent.NewPolicyRef(DemoPolicy())
	h.conf = newConfinement(&h.opts)
	h.logins = &logins{codes: map[string]loginCode{}, sessions: map[string]loginCode{}}
	if h.opts.SessionTTL <= 0 {
		h.opts.SessionTTL = 12 * time.Hour
	}
	h.stop = make(chan struct{})
	h.sums = newSummaries(rt.Store())
	h.actions = journal.NewStream(rt.Store(), ActionStream, h.opts.Clock, func(*journal.Event) error { return nil })
	h.control = journal.NewStream(rt.Store(), ControlStream, h.opts.Clock, func(*journal.Event) error { return nil })
	wire := h.opts.Wire
	if wire == nil {
		wire = func(context.Context, *agent.RunCreated) (*agent.Wiring, io.Closer, error) {
			return nil, nil, errors.New("this server executes no runs (no wiring configured)")
		}
	}
	h.pool = newPool(rt, wire, principals(h.opts.Directory), h.sums, h.executable, h.opts.Workers, h.logger)
	h.live = newLiveHub()
	h.pool.live = h.live
	h.pool.dispatch = h.opts.Dispatch
	h.pool.adopted = h.opts.Adopted
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

// principals is the gate's principal check of the server's runs: the
// directory's, except that the shared demo agent has no standing
// approvals here (every token may start demo runs, so one person's
// remembered approval would skip the approval of everyone's demo; the
// API refuses to make such grants, and this ignores older ones).
func principals(d *identity.Directory) policy.PrincipalCheck {
	return func(ctx context.Context, principal, onBehalfOf string) ([]policy.Grant, error) {
		grants, err := d.Check(ctx, principal, onBehalfOf)
		if principal == identity.DemoAgent {
			grants = nil
		}
		return grants, err
	}
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	h.mux.ServeHTTP(w, r)
}

// Tokens returns the server's token set.
func (h *Handler) Tokens() *token.Set { return h.tokens }

// Start submits for execution every run that was executing when the
// server (or another process) stopped: runs that are running by their
// folded state (their newest event is neither an end nor a pause, and
// they wait for no approval), and runs paused by a shutdown. Runs paused
// for an approval stay paused until someone decides, and forks that were
// not started stay so (also those made before forks were journaled
// paused: a fork with no event past its fork point). It returns the ids
// submitted, oldest first.
func (h *Handler) Start(ctx context.Context) ([]string, error) {
	ids, err := h.orphans(ctx, time.Time{}, nil)
	if err != nil {
		return nil, err
	}
	for i, id := range ids {
		if err := h.pool.submit(id); err != nil {
			return ids[:i], err
		}
	}
	if len(ids) > 0 {
		h.logger.Info("resuming interrupted runs", "runs", len(ids))
	}
	h.sweeping.Add(2)
	go h.sweep()
	go h.followControl()
	if h.opts.Adopt > 0 {
		h.sweeping.Add(1)
		go h.adopt()
	}
	return ids, nil
}

// orphans returns, oldest first, the runs that should be executing (see
// Start) but that no process executes: neither this server (queued or
// executing here) nor another holding the run's lease. With a non-zero
// before, only runs whose newest event is older count (a run another
// server just created is about to take its lease).
//
// skip, if not nil, is asked before the lease of a run is looked up
// (seq is the run's newest event): a run it skips is not returned.
func (h *Handler) orphans(ctx context.Context, before time.Time, skip func(id string, seq int64) bool) ([]string, error) {
	runs, err := h.rt.Store().Runs(ctx, &journal.ListParams{Status: []journal.Status{journal.StatusRunning, journal.StatusPaused}})
	if err != nil {
		return nil, fmt.Errorf("server: start: %w", err)
	}
	var ids []string
	for _, r := range slices.Backward(runs) {
		if journal.IsSystem(r.RunID) {
			continue
		}
		if !before.IsZero() && !r.Updated.Before(before) {
			continue
		}
		if queued, executing, _ := h.pool.state(r.RunID); queued || executing {
			continue
		}
		s, err := h.sums.get(ctx, r.RunID, r.LastSeq)
		if err != nil || len(s.Pending) > 0 {
			continue
		}
		if s.Status == string(journal.StatusPaused) && s.Reason != "shutdown" {
			continue
		}
		if _, at, ok := strings.Cut(s.ForkOf, "@"); ok && at == strconv.FormatInt(s.Events, 10) {
			// A fork that never executed: made without start by a server
			// that did not yet journal such forks paused (ReasonForked).
			continue
		}
		if skip != nil && skip(r.RunID, r.LastSeq) {
			continue
		}
		if !h.leaseFree(ctx, r.RunID) {
			continue // another process executes it
		}
		ids = append(ids, r.RunID)
	}
	return ids, nil
}

// sweep applies approval deadlines every ExpiryInterval until Shutdown.
func (h *Handler) sweep() {
	defer h.sweeping.Done()
	t := time.NewTicker(h.opts.ExpiryInterval)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			if _, err := h.ExpireApprovals(context.Background()); err != nil {
				h.logger.Error("apply approval deadlines", "err", err)
			}
			if _, err := h.ResumeAuthorized(context.Background()); err != nil {
				h.logger.Error("resume authorized runs", "err", err)
			}
		}
	}
}

// ExpireApprovals submits for execution every run with an approval whose
// deadline (approval.requested's expires) has passed, so that its
// executor journals the default decision and goes on. [Handler.Start]
// runs it every [Options.ExpiryInterval]. It returns the runs submitted.
func (h *Handler) ExpireApprovals(ctx context.Context) ([]string, error) {
	list, err := h.approvals(ctx)
	if err != nil {
		return nil, err
	}
	now := h.opts.Clock()
	var ids []string
	for _, a := range list {
		if a.Expires == nil || now.Before(*a.Expires) || slices.Contains(ids, a.RunID) {
			continue
		}
		if err := h.pool.submit(a.RunID); err != nil && !errors.Is(err, errCanceling) {
			return ids, err
		}
		ids = append(ids, a.RunID)
	}
	return ids, nil
}

// ResumeAuthorized submits every run whose newest event is
// auth.resolved: a person authorized what it waited for, with keel auth
// connect in another process sharing the journal. [Handler.Start] runs it
// every [Options.ExpiryInterval]. It returns the runs submitted.
func (h *Handler) ResumeAuthorized(ctx context.Context) ([]string, error) {
	runs, err := h.rt.Store().Runs(ctx, &journal.ListParams{Status: []journal.Status{journal.StatusRunning}})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, r := range runs {
		if r.LastType != journal.AuthResolved {
			continue
		}
		if err := h.pool.submit(r.RunID); err != nil && !errors.Is(err, errCanceling) {
			return ids, err
		}
		ids = append(ids, r.RunID)
	}
	return ids, nil
}

// Shutdown stops taking work and pauses every executing run: each
// execution is canceled with cause [agent.ErrShutdown], so its executor
// journals run.paused (never a torn state) and the next [Handler.Start]
// resumes it. It waits for the executions until ctx is done. Stop the
// HTTP server first (http.Server.Shutdown) so no request submits more
// work; event streams end when their requests' contexts do.
func (h *Handler) Shutdown(ctx context.Context) error {
	h.stopOnce.Do(func() { close(h.stop) })
	h.sweeping.Wait()
	return h.pool.shutdown(ctx)
}

// caller is the authenticated identity of a request.
type caller = api.Token

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
			if !token.HasScope(who, rt.scope) {
				writeError(w, &apiError{http.StatusForbidden, api.CodeForbidden, fmt.Sprintf("this needs the %s scope; token %s (%s) has %s", rt.scope, who.ID, who.Name, strings.Join(who.Scopes, ", "))})
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
		return h.tokens.Authenticate(r.Context(), strings.TrimSpace(secret))
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
	return h.tokens.Authenticate(r.Context(), secret)
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

// action is the payload of an api.action event in [ActionStream].
type action struct {
	// By is the token's name (the person); Token its id.
	By     string `json:"by"`
	Token  string `json:"token"`
	Action string `json:"action"`
	RunID  string `json:"run_id,omitempty"`
	CallID string `json:"call_id,omitempty"`
	Target string `json:"target,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Remember and Prefix are an approval's remembered scope and stated
	// word prefix (api.Decide).
	Remember string   `json:"remember,omitempty"`
	Prefix   []string `json:"prefix,omitempty"`
}

// record journals a state-changing API action with who did it. A failure
// to record is logged and returned: the action happened, but the caller
// should know the record is missing.
func (h *Handler) record(ctx context.Context, who *caller, a action) error {
	if who != nil {
		a.By, a.Token = who.Name, who.ID
	}
	if _, err := h.actions.Append(ctx, APIAction, &a, nil); err != nil {
		h.logger.Error("record api action", "action", a.Action, "err", err)
		return err
	}
	return nil
}
