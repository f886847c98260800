package httpreq_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/oauthtest"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin/httpreq"
)

// A long task on the real OP with an injected clock: an assistant agent
// makes eight requests for its user, the clock moving six minutes before
// each (every access token expires in between, and every refresh rotates
// the refresh token); a POST asks a person (Cedar: writes with a user's
// credential) and is approved; the execution is stopped and resumed
// (a new Runtime and vault on the same file) in the middle. The run
// completes; every request reached the resource with a token the OP
// accepted; the audit trail has one credential.used per request with its
// scopes; no token the OP issued is in the database files.
func TestLongTaskRefreshesAndApproval(t *testing.T) {
	ctx := t.Context()
	op := oauthtest.Start(t)
	path := filepath.Join(t.TempDir(), "keel.db")
	var clockMu sync.Mutex
	now := time.Now()
	clock := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	advance := func(d time.Duration) { clockMu.Lock(); now = now.Add(d); clockMu.Unlock() }
	key, _ := credential.ParseKey(credential.GenerateKey())
	openAll := func() (journal.Store, *credential.Vault, *identity.Directory) {
		s, err := sqlite.Open(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		dir := identity.NewDirectory(s, nil)
		v, _ := credential.New(s, &credential.Options{Keys: []*credential.Key{key}, Clock: clock,
			Check: func(ctx context.Context, a, u string) error { _, err := dir.Check(ctx, a, u); return err }})
		return s, v, dir
	}
	store, v, dir := openAll()
	var mu sync.Mutex
	var served []string
	rs := httptest.NewServer(op.ResourceServer(func(w http.ResponseWriter, r *http.Request, in *oauthtest.Introspection) {
		mu.Lock()
		served = append(served, r.Method+" "+r.URL.Path)
		mu.Unlock()
		fmt.Fprintf(w, `{"ok":true,"scope":%q}`, in.Scope)
	}))
	defer rs.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(rs.URL, "http://"))
	base := "http://localhost:" + port
	if _, err := v.AddProvider(ctx, &credential.ProviderParams{Name: "op", Issuer: op.Issuer, ClientID: oauthtest.NativeClient,
		Scopes: []string{"openid", "offline_access"}, Resources: []string{base + "/api"}}); err != nil {
		t.Fatal(err)
	}
	dir.Create(ctx, &identity.CreateParams{Name: "helper", Kind: identity.Assistant})
	pend, _ := v.BeginConnect(ctx, &credential.ConnectParams{Provider: "op", Agent: "helper", User: "ann", RedirectURL: oauthtest.RedirectURL})
	cb, err := oauthtest.Login(ctx, pend.URL, op.User(), oauthtest.Password)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.CompleteConnect(ctx, credential.ResponseFrom(cb.Query())); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Parse("writes.cedar", []byte(`
@id("all") permit (principal, action, resource);
@id("credential-writes") @ask @reason("changes data with a user's credential")
forbid (principal, action, resource)
when { context.credential && !(["GET", "HEAD"].contains(context.method)) };
`))
	if err != nil {
		t.Fatal(err)
	}
	var turns []modeltest.Turn
	for i := range 8 {
		args := map[string]string{"url": fmt.Sprintf("%s/api/items/%d", base, i)}
		if i == 4 {
			args = map[string]string{"method": "POST", "url": base + "/api/items", "body": `{"name":"new"}`}
		}
		turns = append(turns, modeltest.Calls("", modeltest.Call(fmt.Sprintf("c%d", i), "http_request", args)))
	}
	turns = append(turns, modeltest.Text("done"))
	ws, _ := tool.NewWorkspace(t.TempDir(), "/workspace", nil)
	defer ws.Close()
	var theRun string
	exec := func(store journal.Store, v *credential.Vault, dir *identity.Directory, m model.Model, stopAfter int) *agent.Outcome {
		reg := tool.NewRegistry()
		t0, h := httpreq.New(&httpreq.Options{Vault: v})
		reg.Add(t0, func(ctx context.Context, req *tool.Request) (*tool.Result, error) {
			advance(6 * time.Minute) // every token expires between two calls
			return h(ctx, req)
		})
		rt := agent.NewRuntime(store, nil)
		ectx, cancel := context.WithCancel(ctx)
		defer cancel()
		params := &agent.ExecParams{Wiring: agent.Wiring{Model: m, Tools: reg, Env: &tool.Env{Workspace: ws, Network: sandbox.Network{Allow: []string{"localhost:" + port}}}, Principals: dir.Check}, OnEvent: func(e journal.Event) {
			if stopAfter > 0 && e.Type == journal.ToolFinished {
				if stopAfter--; stopAfter == 0 {
					cancel() // a stop in the middle of the task
				}
			}
		}}
		out, err := rt.Execute(ectx, theRun, params)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	rt := agent.NewRuntime(store, nil)
	reg := tool.NewRegistry()
	httpreq.Register(reg, nil)
	var infos []agent.ToolInfo
	for _, s := range reg.Specs() {
		infos = append(infos, agent.ToolInfo{ToolSpec: s, Effect: reg.Tool(s.Name).Effect.String()})
	}
	theRun, err = rt.Create(ctx, &agent.RunCreated{Task: "a long task", Tools: infos, Workspace: ws.Root(), MountPath: "/workspace",
		Principal: "helper", OnBehalfOf: "ann", Network: []string{"localhost:" + port}, Policy: agent.NewPolicyRef(pol)})
	if err != nil {
		t.Fatal(err)
	}
	m := modeltest.NewScripted(turns, nil)
	out := exec(store, v, dir, m, 2) // stopped after two calls
	if out.Status == journal.StatusCompleted {
		t.Fatal("the run completed before its stop")
	}
	// Another process: a new store, vault and runtime on the same file.
	store2, v2, dir2 := openAll()
	out = exec(store2, v2, dir2, m, 0)
	if out.Status != journal.StatusPaused {
		t.Fatalf("at the POST: %s, want paused for approval", out.Status)
	}
	pending, _ := agent.NewRuntime(store2, nil).Approvals(ctx, &agent.ApprovalsParams{RunID: theRun})
	if len(pending) != 1 || pending[0].CallID != "c4" {
		t.Fatalf("approvals = %+v, want the POST", pending)
	}
	if err := agent.NewRuntime(store2, nil).Resolve(ctx, theRun, "c4", &agent.ApprovalResolved{Decision: policy.Allow, By: "ann"}); err != nil {
		t.Fatal(err)
	}
	out = exec(store2, v2, dir2, m, 0)
	if out.Status != journal.StatusCompleted {
		t.Fatalf("final: %s %+v", out.Status, out.End)
	}
	if len(served) != 8 || served[4] != "POST /api/items" {
		t.Errorf("served %v", served)
	}
	gs, _ := v2.Grants(ctx)
	if len(gs) != 1 || gs[0].Refreshes < 7 || gs[0].Rotations != gs[0].Refreshes || gs[0].Status != "active" {
		t.Errorf("grant after the task: %+v (want ≥7 refreshes, each rotating)", gs)
	}
	evs, _ := store2.Read(ctx, credential.StreamID, 1)
	used := 0
	for _, e := range evs {
		if e.Type == credential.EventUsed && strings.Contains(string(e.Payload), `"scopes":["offline_access","openid"]`) {
			used++
		}
	}
	if used != 8 {
		t.Errorf("%d credential.used events with scopes, want 8", used)
	}
	var files [][]byte
	for _, f := range []string{path, path + "-wal"} {
		if b, err := os.ReadFile(f); err == nil {
			files = append(files, b)
		}
	}
	for _, tok := range op.Issued() {
		for _, b := range files {
			if bytes.Contains(b, []byte(tok)) {
				t.Errorf("a token the OP issued is in the database files")
			}
		}
	}
	t.Logf("%d requests, %d refreshes (%d rotations), %d tokens issued by the OP, 0 in the database", len(served), gs[0].Refreshes, gs[0].Rotations, len(op.Issued()))
}
