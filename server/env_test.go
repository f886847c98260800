package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/assemble/builder"
	"github.com/keel-run/keel/internal/checkpoint"
	"github.com/keel-run/keel/internal/demo"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/linux"
	"github.com/keel-run/keel/sandbox/none"
	"github.com/keel-run/keel/server"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
	"github.com/keel-run/keel/service"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin"
)

func TestMain(m *testing.M) {
	linux.Init()
	// A TMPDIR of the tests' own: they fail when they leave anything
	// there (a demo run's workspace, say).
	os.Exit(testenv.Main(m))
}

// env is a server over a real SQLite journal in a temporary directory,
// served over real HTTP, with an admin token.
type env struct {
	t      testing.TB
	dir    string
	db     string
	store  journal.Store
	rt     *agent.Runtime
	svc    *service.Service
	h      *server.Handler
	srv    *httptest.Server
	admin  *client.Client
	secret string
	models *models
	// policy is the server's policy (Options.Policy), which the test's
	// Prepare gives runs that name none.
	policy *policy.Engine
	// sandbox is the server's sandbox kind (Options.Sandbox), which the
	// test's Prepare gives runs that name none; the test's wiring runs
	// every command without isolation either way.
	sandbox string
	// sessions are the web UI sessions of e.cookie, by token secret.
	sessions sync.Map
	// checkpoints: see envOptions.
	checkpoints bool
	// validate is envOptions.validate.
	validate func(context.Context, *agent.RunCreated) error
}

// cookie returns a web UI session cookie for the token secret, the same
// one for every call with that secret (a session started while the token
// was valid); for a token that is not valid, a cookie of no session.
func (e *env) cookie(secret string) *http.Cookie {
	if c, ok := e.sessions.Load(secret); ok {
		return c.(*http.Cookie)
	}
	c, err := e.h.Session(e.t.Context(), secret)
	if err != nil {
		return &http.Cookie{Name: "keel_session", Value: "no-such-session"}
	}
	e.sessions.Store(secret, c)
	return c
}

// models holds the fake models of an env's runs by model spec.
type models struct {
	mu sync.Mutex
	m  map[string]model.Model
}

func (ms *models) set(spec string, m model.Model) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	ms.m[spec] = m
}

func (ms *models) get(spec string) (model.Model, error) {
	if spec == "scripted:demo" {
		return demo.NewModel(), nil
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if m := ms.m[spec]; m != nil {
		return m, nil
	}
	return nil, fmt.Errorf("no test model %q", spec)
}

type envOptions struct {
	workers int
	// dir and db reuse another env's files (a restart).
	dir, db string
	models  *models
	// clock, if set, gives the runtime's and the server's time.
	clock func() time.Time
	// opts, if set, adjusts the service's options before it starts
	// (withWire replaces the env's wiring); server the server's.
	opts   func(*service.Options)
	server func(*server.Options)
	// sandbox is the server's sandbox kind; "" means "none".
	sandbox string
	// validate, if set, checks a run the service admits (see
	// service.Validator); nil admits every run.
	validate func(context.Context, *agent.RunCreated) error
	// store, if set, is the journal (on db in dir) instead of a new one.
	store journal.Store
	// checkpoints snapshots the runs' workspaces (internal/checkpoint),
	// into a store in dir, as keel serve does.
	checkpoints bool
	// addr, if set, is the address the server listens at (a restart at
	// the same URL); "" picks a free port.
	addr string
}

func newEnv(t testing.TB, o *envOptions) *env {
	t.Helper()
	if o == nil {
		o = &envOptions{}
	}
	e := &env{t: t, dir: o.dir, db: o.db, models: o.models, sandbox: o.sandbox, checkpoints: o.checkpoints, validate: o.validate}
	if e.sandbox == "" {
		e.sandbox = "none"
	}
	if e.dir == "" {
		e.dir = t.TempDir()
		e.db = filepath.Join(e.dir, "keel.db")
	}
	if e.models == nil {
		e.models = &models{m: map[string]model.Model{}}
	}
	store := o.store
	if store == nil {
		var err error
		if store, err = sqlite.Open(e.db, &sqlite.Options{Sync: sqlite.SyncNormal}); err != nil {
			t.Fatal(err)
		}
	}
	e.store = store
	e.rt = agent.NewRuntime(store, &agent.RuntimeOptions{Clock: o.clock})
	logger := slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// The test's workspaces (t.TempDir) are siblings of the journal's
	// directory: their parent is the workspace root, and the journal's
	// directory is protected.
	// The listener first, so that the service knows its public URL
	// (links in notifications, webhook triggers' URLs).
	var handler http.Handler
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	if o.addr != "" {
		srv.Listener.Close()
		ln, err := net.Listen("tcp", o.addr)
		if err != nil {
			t.Fatal(err)
		}
		srv.Listener = ln
	}
	so := &service.Options{Builder: (*testBuilder)(e), Workers: o.workers, Logger: logger, Clock: o.clock,
		WorkspaceRoots: []string{filepath.Dir(e.dir)}, Protected: []string{e.dir}, Sandbox: e.sandbox, Policy: policy.Default(),
		DemoDir:   t.TempDir(),
		PublicURL: "http://" + srv.Listener.Addr().String()}
	if o.opts != nil {
		o.opts(so)
	}
	e.policy = so.Policy
	e.svc = service.New(e.rt, so)
	ho := &server.Options{Heartbeat: time.Hour, Logger: logger}
	if o.server != nil {
		o.server(ho)
	}
	e.h = server.NewHandler(e.svc, ho)
	handler = e.h
	srv.Start()
	e.srv = srv
	t.Cleanup(e.stop)
	tok, err := e.svc.Tokens().Create(t.Context(), &token.Params{Name: "ada", Scopes: []string{api.ScopeAdmin}, By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	e.secret = tok.Secret
	e.admin = e.client(tok.Secret)
	return e
}

// tlogWriter sends the server's log to the test's log.
type tlogWriter struct{ t testing.TB }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// stop shuts the env down as `keel serve` does: HTTP first, then the
// executions (which journal run.paused). It is idempotent.
func (e *env) stop() {
	if e.srv == nil {
		return
	}
	e.srv.CloseClientConnections()
	e.srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.svc.Shutdown(ctx); err != nil {
		e.t.Errorf("Shutdown: %v", err)
	}
	e.store.Close()
	e.srv = nil
}

// restart stops e and returns a new env on the same journal and
// workspaces, after calling Start.
func (e *env) restart() (*env, []string) {
	e.stop()
	n := newEnv(e.t, &envOptions{dir: e.dir, db: e.db, models: e.models, sandbox: e.sandbox})
	ids, err := n.svc.Start(e.t.Context())
	if err != nil {
		e.t.Fatal(err)
	}
	return n, ids
}

func (e *env) client(secret string) *client.Client {
	c, err := client.New(e.srv.URL, &client.Options{Token: secret, Retry: 10 * time.Millisecond})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// token creates a token for name with scopes and returns a client using
// it.
func (e *env) token(name string, scopes ...string) *client.Client {
	return e.bound(name, nil, scopes...)
}

// bound creates a token for name with scopes, bound to agents, and returns
// a client using it.
func (e *env) bound(name string, agents []string, scopes ...string) *client.Client {
	e.t.Helper()
	tok, err := e.admin.CreateToken(e.t.Context(), &api.CreateToken{Name: name, Scopes: scopes, Agents: agents})
	if err != nil {
		e.t.Fatal(err)
	}
	return e.client(tok.Secret)
}

type closers []io.Closer

// closerFunc is a release function as an io.Closer.
type closerFunc func()

func (f closerFunc) Close() error { f(); return nil }

func (cs closers) Close() error {
	var errs []error
	for _, c := range slices.Backward(cs) {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// wire builds the live parts of a test run: the built-in tools on the
// run's workspace with no sandbox isolation and the model the env holds
// for the run's model spec. The policy is the run's own (run.created).
func (e *env) wire(_ context.Context, c *agent.RunCreated) (*agent.Wiring, io.Closer, error) {
	m, err := e.models.get(c.Model)
	if err != nil {
		return nil, nil, err
	}
	ws, err := tool.NewWorkspace(c.Workspace, c.MountPath, nil)
	if err != nil {
		return nil, nil, err
	}
	sb, err := none.New(&sandbox.Spec{Workspace: ws.Root(), MountPath: c.MountPath, Env: c.Env})
	if err != nil {
		ws.Close()
		return nil, nil, err
	}
	reg := tool.NewRegistry()
	builtin.Register(reg, &builtin.Options{NoWeb: true})
	p := &agent.Wiring{Model: m, ModelName: c.Model, Tools: reg, Env: &tool.Env{Sandbox: sb, Workspace: ws}}
	cs := closers{ws, sb}
	if e.checkpoints {
		var release func()
		p.Checkpoint, release = checkpoint.Hook(filepath.Join(e.dir, "checkpoints"), ws.Root())
		cs = append(cs, closerFunc(release))
	}
	return p, cs, nil
}

// testBuilder is the service's builder of an env: the models the env
// holds, the built-in tools without the web, and the env's wiring.
type testBuilder env

// Model implements service.Builder: a model the env holds.
func (b *testBuilder) Model(_ context.Context, spec string) (*service.ModelInfo, error) {
	if _, err := b.models.get(spec); err != nil && spec != "test:unwirable" {
		return nil, service.Invalid(err)
	}
	return &service.ModelInfo{Family: spec}, nil
}

// Complete implements service.Builder: the built-in tools, and the
// commit a workspace that is a git repository starts on (as the real
// builder records it).
func (b *testBuilder) Complete(ctx context.Context, c *agent.RunCreated, _ *service.CreateRun, _ string) error {
	reg := tool.NewRegistry()
	builtin.Register(reg, &builtin.Options{NoWeb: true})
	c.Tools = agent.ToolInfos(reg)
	c.Git = builder.GitStart(ctx, c.Workspace)
	return nil
}

// Validate implements service.Validator: the env's check, else none (a
// run whose wiring fails fails when it executes).
func (b *testBuilder) Validate(ctx context.Context, c *agent.RunCreated) error {
	if b.validate != nil {
		return b.validate(ctx, c)
	}
	return nil
}

// withWire sets o's builder to wire runs with wire instead.
func withWire(o *service.Options, wire agent.WireFunc) { o.Builder = builderWith{o.Builder, wire} }

// builderWith is a builder with another wiring.
type builderWith struct {
	service.Builder
	wire agent.WireFunc
}

func (b builderWith) Wire(ctx context.Context, c *agent.RunCreated) (*agent.Wiring, io.Closer, error) {
	return b.wire(ctx, c)
}

func (b builderWith) Validate(ctx context.Context, c *agent.RunCreated) error {
	return b.Builder.(service.Validator).Validate(ctx, c)
}

// Wire implements service.Builder (see env.wire).
func (b *testBuilder) Wire(ctx context.Context, c *agent.RunCreated) (*agent.Wiring, io.Closer, error) {
	return (*env)(b).wire(ctx, c)
}

// waitFor follows run id's journal until an event satisfies ok, and
// returns it. It fails the test if the journal breaks or a minute passes.
func (e *env) waitFor(id string, ok func(journal.Event) bool) journal.Event {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), time.Minute)
	defer cancel()
	for ev, err := range journal.Follow(ctx, e.store, id, 1, 0) {
		if err != nil {
			e.t.Fatalf("follow %s: %v", id, err)
		}
		if ok(ev) {
			return ev
		}
	}
	e.t.Fatalf("run %s: no awaited event within a minute", id)
	return journal.Event{}
}

// waitIdle waits until the service neither queues nor executes run id.
// A run's execution ends after its journal says it stopped (the loop
// returns, the sandbox is torn down): a test that changes what the
// execution reads (the clock) waits for it to end first.
func (e *env) waitIdle(id string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), time.Minute)
	defer cancel()
	for ch := e.svc.Watch(id); ch != nil; ch = e.svc.Watch(id) {
		select {
		case <-ch:
		case <-ctx.Done():
			e.t.Fatalf("run %s: still executing after a minute", id)
		}
	}
}

// waitType waits for the first event of run id with one of types.
func (e *env) waitType(id string, types ...journal.Type) journal.Event {
	e.t.Helper()
	return e.waitFor(id, func(ev journal.Event) bool { return slices.Contains(types, ev.Type) })
}

// waitStop waits for the first event at or after seq from that leaves
// the run stopped: paused (run.paused, approval.requested) or ended.
func (e *env) waitStop(id string, from int64) journal.Event {
	e.t.Helper()
	return e.waitFor(id, func(ev journal.Event) bool {
		st := journal.StatusOf(ev.Type)
		return ev.Seq >= from && (st == journal.StatusPaused || st.Terminal())
	})
}

// raw sends a request with the token secret (none if empty) and returns
// the status and body.
func (e *env) raw(method, path, secret, body string, header ...string) (int, string) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// newToken creates a token with the admin client and returns its secret.
func (e *env) newToken(name string, agents []string, scopes ...string) string {
	e.t.Helper()
	tok, err := e.admin.CreateToken(e.t.Context(), &api.CreateToken{Name: name, Scopes: scopes, Agents: agents})
	if err != nil {
		e.t.Fatal(err)
	}
	return tok.Secret
}

// journalRun appends a run directly to the journal (as another process,
// or an older Keel, would have written it) and returns its id: created
// with c, then each of events in order.
func (e *env) journalRun(c *agent.RunCreated, events ...journal.Draft) string {
	e.t.Helper()
	id, err := e.rt.Create(e.t.Context(), c)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(events) > 0 {
		now := time.Now()
		for i := range events {
			if events[i].Time.IsZero() {
				events[i].Time = now
			}
		}
		if _, err := e.store.Append(e.t.Context(), id, 1, events...); err != nil {
			e.t.Fatal(err)
		}
	}
	return id
}

// draft encodes v as an event of type typ.
func draft(t testing.TB, typ journal.Type, v any) journal.Draft {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return journal.Draft{Type: typ, Payload: b}
}

// askingRun journals a run on workspace ws paused at one turn whose
// calls each wait for approval, as the demo policy asks for writes and a
// strict policy for commands. The call ids are written as given (the
// runtime replaces unsafe ones today; an older journal may hold them).
func (e *env) askingRun(ws string, calls ...model.ToolCall) string {
	e.t.Helper()
	return e.askingRunLabeled(ws, nil, calls...)
}

// askingRunLabeled is askingRun with the run's labels (a run created
// through the API has service.LabelCreatedBy).
func (e *env) askingRunLabeled(ws string, labels map[string]string, calls ...model.ToolCall) string {
	e.t.Helper()
	c := &agent.RunCreated{Task: "change files", Model: "test:none", Workspace: ws, MountPath: "/workspace", Sandbox: e.sandbox,
		Principal: identity.LocalAgent, Policy: agent.NewPolicyRef(e.policy), Limits: agent.Limits{MaxSteps: 10}, Labels: labels}
	drafts := []journal.Draft{draft(e.t, journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, ToolCalls: calls}})}
	for _, c := range calls {
		var args map[string]string
		_ = json.Unmarshal([]byte(c.Arguments), &args)
		text := args["command"] + args["path"]
		part := policy.Part{Text: text, Effect: policy.Ask, Policies: []string{"ask"}, Reason: "a person approves this"}
		d := policy.Decision{Effect: policy.Ask, Policies: part.Policies, Reason: part.Reason, Parts: []policy.Part{part}}
		drafts = append(drafts, draft(e.t, journal.GateDecided, &agent.GateDecided{CallID: c.ID, Tool: c.Name, Decision: d}),
			draft(e.t, journal.ApprovalRequested, &agent.ApprovalRequested{CallID: c.ID, Tool: c.Name, Arguments: json.RawMessage(c.Arguments),
				Reason: part.Reason, Action: text, Parts: d.Parts}))
	}
	drafts = append(drafts, draft(e.t, journal.RunPaused, &agent.RunEnded{Reason: "approval", Message: "waiting"}))
	return e.journalRun(c, drafts...)
}

// events reads run id's whole journal, verified.
func (e *env) events(id string) []journal.Event {
	e.t.Helper()
	evs, err := journal.ReadVerified(e.t.Context(), e.store, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return evs
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
