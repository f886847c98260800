package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	"github.com/keel-run/keel/internal/demo"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/linux"
	"github.com/keel-run/keel/sandbox/none"
	"github.com/keel-run/keel/server"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin"
)

func TestMain(m *testing.M) {
	linux.Init()
	os.Exit(m.Run())
}

// env is a server over a real SQLite journal in a temporary directory,
// served over real HTTP, with an admin token.
type env struct {
	t      *testing.T
	dir    string
	db     string
	store  journal.Store
	rt     *agent.Runtime
	h      *server.Handler
	srv    *httptest.Server
	admin  *client.Client
	secret string
	models *models
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
}

func newEnv(t *testing.T, o *envOptions) *env {
	t.Helper()
	if o == nil {
		o = &envOptions{}
	}
	e := &env{t: t, dir: o.dir, db: o.db, models: o.models}
	if e.dir == "" {
		e.dir = t.TempDir()
		e.db = filepath.Join(e.dir, "keel.db")
	}
	if e.models == nil {
		e.models = &models{m: map[string]model.Model{}}
	}
	store, err := sqlite.Open(e.db, &sqlite.Options{Sync: sqlite.SyncNormal})
	if err != nil {
		t.Fatal(err)
	}
	e.store = store
	e.rt = agent.NewRuntime(store, &agent.RuntimeOptions{Clock: o.clock})
	logger := slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	e.h = server.NewHandler(e.rt, &server.Options{Wire: e.wire, Prepare: e.prepare, Workers: o.workers, Heartbeat: time.Hour, Logger: logger, Clock: o.clock})
	e.srv = httptest.NewServer(e.h)
	t.Cleanup(e.stop)
	tok, err := e.h.Tokens().Create(t.Context(), "ada", []string{api.ScopeAdmin}, "test")
	if err != nil {
		t.Fatal(err)
	}
	e.secret = tok.Secret
	e.admin = e.client(tok.Secret)
	return e
}

// tlogWriter sends the server's log to the test's log.
type tlogWriter struct{ t *testing.T }

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
	if err := e.h.Shutdown(ctx); err != nil {
		e.t.Errorf("Shutdown: %v", err)
	}
	e.store.Close()
	e.srv = nil
}

// restart stops e and returns a new env on the same journal and
// workspaces, after calling Start.
func (e *env) restart() (*env, []string) {
	e.stop()
	n := newEnv(e.t, &envOptions{dir: e.dir, db: e.db, models: e.models})
	ids, err := n.h.Start(e.t.Context())
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
	tok, err := e.admin.CreateToken(e.t.Context(), &api.CreateToken{Name: name, Scopes: scopes})
	if err != nil {
		e.t.Fatal(err)
	}
	return e.client(tok.Secret)
}

type closers []io.Closer

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
func (e *env) wire(_ context.Context, c *agent.RunCreated) (*agent.ExecParams, io.Closer, error) {
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
	return &agent.ExecParams{Model: m, ModelName: c.Model, Tools: reg, Env: &tool.Env{Sandbox: sb, Workspace: ws}}, closers{ws, sb}, nil
}

// prepare turns a create request into a run.created payload as the CLI
// does: a demo run gets a fresh copy of the demo project and the demo
// policy (which asks before edits); other runs need a task and a
// workspace and get Keel's default policy.
func (e *env) prepare(_ context.Context, req *api.CreateRun) (*agent.RunCreated, error) {
	reg := tool.NewRegistry()
	builtin.Register(reg, &builtin.Options{NoWeb: true})
	var infos []agent.ToolInfo
	for _, s := range reg.Specs() {
		t := reg.Tool(s.Name)
		infos = append(infos, agent.ToolInfo{ToolSpec: s, Effect: t.Effect.String(), Idempotent: t.Idempotent})
	}
	c := &agent.RunCreated{Task: req.Task, Model: req.Model, Workspace: req.Workspace, MountPath: "/workspace", Sandbox: "none",
		Tools: infos, Principal: req.Agent, Labels: req.Labels, Limits: agent.Limits{MaxSteps: req.Limits.MaxSteps},
		Policy: agent.NewPolicyRef(policy.Default())}
	if req.Demo {
		ws, err := os.MkdirTemp(e.dir, "demo-")
		if err != nil {
			return nil, err
		}
		if err := demo.WriteProject(ws); err != nil {
			return nil, err
		}
		c.Task, c.Model, c.Workspace, c.Principal = demo.Task, "scripted:demo", ws, identity.DemoAgent
		c.Policy = agent.NewPolicyRef(server.DemoPolicy())
	}
	if req.Policy != "" {
		eng, err := policy.Parse("test", []byte(req.Policy))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", server.ErrInvalid, err)
		}
		c.Policy = agent.NewPolicyRef(eng)
		if set := eng.Approval(); set.Timeout > 0 {
			c.Approval = &agent.ApprovalSettings{Timeout: agent.Duration(set.Timeout), Default: set.Default}
		}
	}
	if c.Principal == "" {
		c.Principal = identity.LocalAgent
	}
	if c.Task == "" || c.Workspace == "" {
		return nil, fmt.Errorf("%w: a run needs a task and a workspace", server.ErrInvalid)
	}
	if _, err := e.models.get(c.Model); err != nil {
		return nil, fmt.Errorf("%w: %v", server.ErrInvalid, err)
	}
	return c, nil
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

// events reads run id's whole journal, verified.
func (e *env) events(id string) []journal.Event {
	e.t.Helper()
	evs, err := journal.ReadVerified(e.t.Context(), e.store, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return evs
}
