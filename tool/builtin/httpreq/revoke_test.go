package httpreq_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/oauthtest"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin/httpreq"
)

// Revocation during a run fails closed at the next call: the grant is
// revoked (by another vault on the same database, as keel auth revoke in
// another process would) while the run's first request is served; the
// second call gets no credential and waits in auth.required (reason
// revoked) instead of failing or reaching the resource; revoking the
// agent then pauses the run at its next gate decision.
func TestRevocationDuringRunFailsClosed(t *testing.T) {
	ctx := t.Context()
	op := oauthtest.Start(t)
	path := filepath.Join(t.TempDir(), "keel.db")
	store, err := sqlite.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	key, _ := credential.ParseKey(credential.GenerateKey())
	dir := identity.NewDirectory(store, nil)
	check := func(ctx context.Context, a, u string) error { _, err := dir.Check(ctx, a, u); return err }
	v, _ := credential.New(store, &credential.Options{Keys: []*credential.Key{key}, Check: check})
	admin, _ := credential.New(store, &credential.Options{Keys: []*credential.Key{key}})
	var mu sync.Mutex
	var served []string
	rs := httptest.NewServer(op.ResourceServer(func(w http.ResponseWriter, r *http.Request, in *oauthtest.Introspection) {
		mu.Lock()
		served = append(served, r.URL.Path)
		mu.Unlock()
		if r.URL.Path == "/api/a" {
			if _, err := admin.Revoke(r.Context(), credential.Selector{User: "ann"}, &credential.RevokeParams{By: "sec", Reason: "test"}); err != nil {
				t.Error(err)
			}
		}
		fmt.Fprint(w, "ok")
	}))
	defer rs.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(rs.URL, "http://"))
	base := "http://localhost:" + port
	if _, err := v.AddProvider(ctx, &credential.ProviderParams{Name: "op", Issuer: op.Issuer, ClientID: oauthtest.NativeClient,
		Scopes: []string{"openid", "offline_access"}, Resources: []string{base + "/api"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := dir.Create(ctx, &identity.CreateParams{Name: "helper", Kind: identity.Assistant}); err != nil {
		t.Fatal(err)
	}
	pend, _ := v.BeginConnect(ctx, &credential.ConnectParams{Provider: "op", Agent: "helper", User: "ann", RedirectURL: oauthtest.RedirectURL})
	cb, err := oauthtest.Login(ctx, pend.URL, op.User(), oauthtest.Password)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.CompleteConnect(ctx, credential.ResponseFrom(cb.Query())); err != nil {
		t.Fatal(err)
	}

	reg := tool.NewRegistry()
	httpreq.Register(reg, &httpreq.Options{Vault: v})
	ws, _ := tool.NewWorkspace(t.TempDir(), "/workspace", nil)
	defer ws.Close()
	rt := agent.NewRuntime(store, nil)
	var infos []agent.ToolInfo
	for _, s := range reg.Specs() {
		infos = append(infos, agent.ToolInfo{ToolSpec: s, Effect: reg.Tool(s.Name).Effect.String()})
	}
	id, err := rt.Create(ctx, &agent.RunCreated{Task: "two requests", Tools: infos, Workspace: ws.Root(), MountPath: "/workspace",
		Principal: "helper", OnBehalfOf: "ann", Network: []string{"localhost:" + port}})
	if err != nil {
		t.Fatal(err)
	}
	m := modeltest.NewScripted([]modeltest.Turn{
		modeltest.Calls("", modeltest.Call("c1", "http_request", map[string]string{"url": base + "/api/a"})),
		modeltest.Calls("", modeltest.Call("c2", "http_request", map[string]string{"url": base + "/api/b"})),
		modeltest.Text("done"),
	}, nil)
	params := &agent.ExecParams{Wiring: agent.Wiring{Model: m, Tools: reg, Env: &tool.Env{Workspace: ws, Network: sandbox.Network{Allow: []string{"localhost:" + port}}}, Principals: dir.Check}}
	out, err := rt.Execute(ctx, id, params)
	if err != nil {
		t.Fatal(err)
	}
	st, _, _ := rt.Load(ctx, id)
	waits := st.PendingAuths()
	if out.Status != journal.StatusPaused || len(waits) != 1 || waits[0].CallID != "c2" || waits[0].Reason != tool.AuthRevoked {
		t.Fatalf("after a revocation during the run: %s, waits %+v", out.Status, waits)
	}
	if len(served) != 1 {
		t.Errorf("the resource served %v; want only /api/a", served)
	}
	// Revoking the agent: the resumed run pauses at its next gate decision.
	if _, err := dir.Revoke(ctx, "helper", &identity.RevokeParams{By: "sec"}); err != nil {
		t.Fatal(err)
	}
	if err := rt.ResolveAuth(ctx, id, "c2", &agent.AuthResolved{By: "ann"}); err != nil {
		t.Fatal(err)
	}
	out, err = rt.Execute(ctx, id, params)
	if err != nil || out.Status != journal.StatusPaused || out.End == nil || out.End.Reason != "revoked" {
		t.Fatalf("after the agent's revocation: %v %+v", err, out)
	}
	if len(served) != 1 {
		t.Errorf("the resource served %v after the agent's revocation", served)
	}
}
