package server_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/demo"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// wantAPIError fails the test unless err is an API error with code whose
// message contains want.
func wantAPIError(t *testing.T, err error, code, want string) {
	t.Helper()
	var ae *api.Error
	if !client.IsCode(err, code) {
		t.Errorf("err = %v, want code %s", err, code)
		return
	}
	_ = ae
	if msg := err.Error(); !strings.Contains(msg, want) {
		t.Errorf("err = %q, want it to say %q", msg, want)
	}
}

// A run's workspace must be under a workspace root, with symlinks
// resolved; the server's own files (its home, the journal's directory)
// are never a workspace, nor inside one, whoever asks.
func TestWorkspaceConfinement(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	e.models.set("test:idle", modeltest.NewScripted([]modeltest.Turn{modeltest.Text("done")}, nil))
	root := filepath.Dir(e.dir)
	outside, err := os.MkdirTemp("", "keel-outside-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(outside) })
	inJournal := filepath.Join(e.dir, "sub")
	links := t.TempDir()
	toJournal, toOutside := filepath.Join(links, "to-journal"), filepath.Join(links, "to-outside")
	for _, dir := range []string{inJournal} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(e.dir, toJournal); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, toOutside); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, workspace, want string }{
		{"the journal's directory", e.dir, "the server's own files"},
		{"inside the journal's directory", inJournal, "the server's own files"},
		{"a directory holding the journal", root, "the server's own files"},
		{"a symlink to the journal's directory", toJournal, "the server's own files"},
		{"outside the roots", outside, "not under one of this server's workspace roots"},
		{"a symlink out of the roots", toOutside, "not under one of this server's workspace roots"},
		{"a system directory", "/etc", "not under one of this server's workspace roots"},
		{"a missing directory outside the roots", "/nonexistent/dir", "not under one of this server's workspace roots"},
		{"a missing directory under a root", filepath.Join(root, "missing"), "not a directory"},
		{"a relative path", "work/dir", "want an absolute directory"},
		{"no workspace", "", "want an absolute directory"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.admin.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "test:idle", Workspace: tt.workspace, Setup: "cat server-token"})
			wantAPIError(t, err, api.CodeInvalidRequest, tt.want)
		})
	}
	ws := t.TempDir()
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "test:idle", Workspace: ws})
	if err != nil {
		t.Fatalf("a workspace under the root: %v", err)
	}
	if end := e.waitStop(run.ID, 1); end.Type != journal.RunCompleted {
		t.Errorf("run ended with %s", end.Type)
	}

	// Without roots the API starts only the demo, and says how to
	// configure a root.
	bare := newEnv(t, &envOptions{opts: func(o *service.Options) { o.WorkspaceRoots = nil }})
	_, err = bare.admin.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "test:idle", Workspace: t.TempDir()})
	wantAPIError(t, err, api.CodeInvalidRequest, "--workspace-root DIR")
	if _, err := bare.admin.CreateRun(ctx, &api.CreateRun{Demo: true}); err != nil {
		t.Errorf("the demo without workspace roots: %v", err)
	}
}

// Fork and resume check what create checks: the caller's agents, the
// server's sandbox and policy, and the workspace roots.
func TestForkAndResumeCheckAsCreate(t *testing.T) {
	e := newEnv(t, &envOptions{sandbox: "linux"})
	ctx := t.Context()
	writer := e.bound("wendy", []string{identity.LocalAgent}, api.ScopeRunsWrite)
	ws := t.TempDir()
	// A run made on the server's machine (keel run --sandbox none on the
	// same journal), paused.
	local := e.journalRun(&agent.RunCreated{Task: "local", Model: "test:none", Workspace: ws, MountPath: "/workspace", Sandbox: "none",
		Principal: identity.LocalAgent, Policy: agent.NewPolicyRef(policy.Default())},
		draft(t, journal.RunPaused, &agent.RunEnded{Reason: "user"}))
	_, err := writer.Fork(ctx, local, &api.ForkRun{Seq: 2, Start: true})
	wantAPIError(t, err, api.CodeForbidden, "sandbox none")
	_, err = writer.Resume(ctx, local, &api.ResumeRun{Message: "cat ~/.keel/server-token"})
	wantAPIError(t, err, api.CodeForbidden, "sandbox none")
	// Not even an admin on a server that does not allow it.
	_, err = e.admin.Resume(ctx, local, nil)
	wantAPIError(t, err, api.CodeForbidden, "sandbox none")

	// A run with another policy (made locally with --policy).
	loose := e.journalRun(&agent.RunCreated{Task: "loose", Model: "test:none", Workspace: ws, MountPath: "/workspace", Sandbox: "linux",
		Principal: identity.LocalAgent, Policy: agent.NewPolicyRef(service.DemoPolicy())},
		draft(t, journal.RunPaused, &agent.RunEnded{Reason: "user"}))
	_, err = writer.Resume(ctx, loose, nil)
	wantAPIError(t, err, api.CodeForbidden, "operator's policy")
	_, err = writer.Fork(ctx, loose, &api.ForkRun{Seq: 2})
	wantAPIError(t, err, api.CodeForbidden, "operator's policy")

	// A run of the server's own settings: the fork's workspace is checked
	// like a create's.
	ok := e.journalRun(&agent.RunCreated{Task: "ok", Model: "test:none", Workspace: ws, MountPath: "/workspace", Sandbox: "linux",
		Principal: identity.LocalAgent, Policy: agent.NewPolicyRef(policy.Default())},
		draft(t, journal.RunPaused, &agent.RunEnded{Reason: "user"}))
	outside, err := os.MkdirTemp("", "keel-outside-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(outside) })
	for _, tt := range []struct{ name, workspace, want string }{
		{"relative", "ws", "want an absolute directory"},
		{"missing parent", filepath.Join(ws, "missing", "fork"), "parent directory"},
		{"outside the roots", outside, "not under one of this server's workspace roots"},
		{"new, outside the roots", filepath.Join(outside, "fork"), "not under one of this server's workspace roots"},
		{"the journal's directory", e.dir, "the server's own files"},
		{"a directory holding the journal", filepath.Dir(e.dir), "the server's own files"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := writer.Fork(ctx, ok, &api.ForkRun{Seq: 1, Workspace: tt.workspace})
			wantAPIError(t, err, api.CodeInvalidRequest, tt.want)
		})
	}
	if _, err := os.Stat(filepath.Join(outside, "fork")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the refused fork made a directory outside the roots: %v", err)
	}
	fork, err := writer.Fork(ctx, ok, &api.ForkRun{Seq: 1, Workspace: t.TempDir()})
	if err != nil {
		t.Fatalf("fork into a workspace under the root: %v", err)
	}
	// A new directory under a root: the fork makes it.
	made, err := writer.Fork(ctx, ok, &api.ForkRun{Seq: 1, Workspace: filepath.Join(ws, "new-fork")})
	if fi, serr := os.Stat(filepath.Join(ws, "new-fork")); err != nil || serr != nil || !fi.IsDir() {
		t.Fatalf("fork into a new directory under the root: %v", err)
	}
	if made.CreatedBy != "wendy" {
		t.Errorf("fork created by %q, want wendy", made.CreatedBy)
	}
	if fork.CreatedBy != "wendy" {
		t.Errorf("fork created by %q, want wendy", fork.CreatedBy)
	}
	// Someone else's agent: refused.
	other := e.bound("olga", []string{identity.DemoAgent}, api.ScopeRunsWrite)
	_, err = other.Fork(ctx, ok, &api.ForkRun{Seq: 1})
	wantAPIError(t, err, api.CodeForbidden, "not as agent keel-cli")
	_, err = other.Resume(ctx, ok, nil)
	wantAPIError(t, err, api.CodeForbidden, "not as agent keel-cli")
}

// A fork never carries over a decision on a call that had not run by the
// fork point: forked just after someone approved an edit (and before it
// ran), the fork asks again instead of editing another workspace under
// their approval. Copied decisions lose their remembered approvals.
func TestForkDoesNotInheritApprovals(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	asked := e.waitStop(run.ID, 1)
	if _, err := e.admin.Approve(ctx, run.ID, "demo_4", &api.Decide{Remember: policy.ScopeRun}); err != nil {
		t.Fatal(err)
	}
	if end := e.waitStop(run.ID, asked.Seq+1); end.Type != journal.RunCompleted {
		t.Fatalf("the demo ended with %s", end.Type)
	}
	var resolved, finished int64
	for _, ev := range e.events(run.ID) {
		v, _ := agent.Decode(&ev)
		switch x := v.(type) {
		case *agent.ApprovalResolved:
			resolved = ev.Seq
		case *agent.ToolFinished:
			if x.CallID == "demo_4" {
				finished = ev.Seq
			}
		}
	}
	if resolved == 0 || finished == 0 {
		t.Fatal("the demo has no approval or no edit")
	}
	// A writer bound to the demo's agent forks at the approval into a
	// fresh copy of the project and starts it.
	copyWS := t.TempDir()
	writeDemo(t, copyWS)
	writer := e.bound("wendy", []string{identity.DemoAgent}, api.ScopeRunsWrite)
	fork, err := writer.Fork(ctx, run.ID, &api.ForkRun{Seq: resolved, Workspace: copyWS, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	// The fork decides demo_4 again: the gate asks (approval.requested
	// pauses the run without a run.paused).
	stop := e.waitFor(fork.ID, func(ev journal.Event) bool {
		return ev.Type == journal.RunPaused || ev.Type == journal.ApprovalRequested
	})
	st, err := agent.Fold(fork.ID, e.events(fork.ID))
	if err != nil {
		t.Fatal(err)
	}
	if p := st.Pending(); len(p) != 1 || p[0].CallID != "demo_4" {
		t.Fatalf("the fork (stopped at %d with %s) waits for %+v, want the edit demo_4 asked again", stop.Seq, stop.Type, p)
	}
	for _, ev := range e.events(fork.ID) {
		if ev.Type == journal.ApprovalResolved || ev.Type == journal.ToolStarted && strings.Contains(string(ev.Payload), "demo_4") {
			t.Errorf("the fork copied %s %s of a call that had not run", ev.Type, ev.Payload)
		}
	}
	b, err := os.ReadFile(filepath.Join(copyWS, "textstats.py"))
	if err != nil || strings.Contains(string(b), "text.split()") {
		t.Errorf("the fork's workspace was edited without an approval:\n%s", b)
	}
	// Forked after the edit ran, the decision is history, without its
	// remembered approval.
	after, err := e.admin.Fork(ctx, run.ID, &api.ForkRun{Seq: finished})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range e.events(after.ID) {
		if ev.Type == journal.ApprovalResolved {
			n++
			var r agent.ApprovalResolved
			if err := json.Unmarshal(ev.Payload, &r); err != nil {
				t.Fatal(err)
			}
			if r.Remember != "" || len(r.Grants) > 0 || r.By != "ada" {
				t.Errorf("copied decision %+v: want ada's decision without remembered approvals", r)
			}
		}
	}
	if n != 1 {
		t.Errorf("the fork after the edit has %d decisions, want 1", n)
	}
	st, err = agent.Fold(after.ID, e.events(after.ID))
	if err != nil || len(st.Grants) != 0 {
		t.Errorf("fork grants %v, %v", st.Grants, err)
	}
}

// The server's policy is the operator's: a client cannot pick another
// (the default, the demo's, or any text); an admin can, and the override
// is journaled.
func TestClientCannotChangePolicy(t *testing.T) {
	e := newEnv(t, &envOptions{opts: func(o *service.Options) { o.Policy = service.DemoPolicy() }})
	ctx := t.Context()
	e.models.set("test:idle", modeltest.NewScripted([]modeltest.Turn{modeltest.Text("done")}, nil))
	writer := e.bound("wendy", []string{identity.LocalAgent}, api.ScopeRunsWrite)
	ws := t.TempDir()
	_, err := writer.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "test:idle", Workspace: ws, Policy: string(policy.Default().Source())})
	wantAPIError(t, err, api.CodeForbidden, "operator's policy")
	run, err := writer.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "test:idle", Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	c := created(t, e, run.ID)
	if c.Policy.SHA256 != service.DemoPolicy().Hash() {
		t.Errorf("the writer's run decides by %s, want the server's policy", c.Policy.Name)
	}
	if c.Labels[service.LabelOverride] != "" || c.Labels[service.LabelCreatedBy] != "wendy" {
		t.Errorf("labels %v", c.Labels)
	}
	// An admin may, journaled.
	run, err = e.admin.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "test:idle", Workspace: ws, Policy: string(policy.Default().Source())})
	if err != nil {
		t.Fatal(err)
	}
	if c := created(t, e, run.ID); c.Labels[service.LabelOverride] != "policy" || c.Policy.SHA256 != policy.Default().Hash() {
		t.Errorf("admin override: labels %v, policy %s", c.Labels, c.Policy.Name)
	}
	if !strings.Contains(actionDetail(t, e, run.ID, "run.create"), "admin override: policy") {
		t.Errorf("the api.action of the admin's create does not record the override")
	}
}

// created returns run id's run.created payload.
func created(t *testing.T, e *env, id string) *agent.RunCreated {
	t.Helper()
	v, err := agent.Decode(&e.events(id)[0])
	if err != nil {
		t.Fatal(err)
	}
	return v.(*agent.RunCreated)
}

// actionDetail returns the detail of the api.action act on run id.
func actionDetail(t *testing.T, e *env, id, act string) string {
	t.Helper()
	for _, ev := range e.events(service.ActionStream) {
		var a struct{ Action, Detail, RunID string }
		if err := json.Unmarshal(ev.Payload, &a); err != nil {
			t.Fatal(err)
		}
		var raw map[string]string
		_ = json.Unmarshal(ev.Payload, &raw)
		if raw["run_id"] == id && raw["action"] == act {
			return raw["detail"]
		}
	}
	return ""
}

// A token acts only as the agents bound to it, and on behalf of its own
// person; so an agent's standing approvals serve only those tokens.
func TestTokensActOnlyAsTheirAgents(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	for _, a := range []api.CreateAgent{{Name: "ci-bot", Kind: "employee"}, {Name: "helper", Kind: "assistant"}} {
		if _, err := e.admin.CreateAgent(ctx, &a); err != nil {
			t.Fatal(err)
		}
	}
	e.models.set("test:push", modeltest.NewScripted([]modeltest.Turn{
		modeltest.Calls("push", modeltest.Call("p1", "bash", map[string]string{"command": "echo pushed > pushed.txt"})),
		modeltest.Text("done"),
	}, nil))
	ws := t.TempDir()
	unbound := e.bound("ursula", nil, api.ScopeRunsWrite)
	bot := e.bound("bob", []string{"ci-bot"}, api.ScopeRunsWrite)
	help := e.bound("hana", []string{"helper"}, api.ScopeRunsWrite)

	_, err := unbound.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "test:push", Workspace: ws, Agent: "ci-bot"})
	wantAPIError(t, err, api.CodeForbidden, "not as agent ci-bot")
	_, err = unbound.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "test:push", Workspace: ws})
	wantAPIError(t, err, api.CodeForbidden, "bound to no agent")
	if _, err := unbound.CreateRun(ctx, &api.CreateRun{Demo: true}); err != nil {
		t.Errorf("an unbound writer starts the demo: %v", err)
	}
	_, err = bot.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "test:push", Workspace: ws, Agent: "helper", OnBehalfOf: "bob"})
	wantAPIError(t, err, api.CodeForbidden, "not as agent helper")
	_, err = help.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "test:push", Workspace: ws, OnBehalfOf: "root"})
	wantAPIError(t, err, api.CodeForbidden, "on behalf of the person whose token starts it (hana)")

	run, err := bot.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "test:push", Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if run.Agent != "ci-bot" || run.OnBehalfOf != "" || run.CreatedBy != "bob" {
		t.Errorf("bound writer's run: agent %q for %q by %q", run.Agent, run.OnBehalfOf, run.CreatedBy)
	}
	e.waitStop(run.ID, 1)
	run, err = help.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "test:push", Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if run.Agent != "helper" || run.OnBehalfOf != "hana" {
		t.Errorf("assistant run: agent %q on behalf of %q, want helper for hana", run.Agent, run.OnBehalfOf)
	}
	// Tokens may be bound only to agents that exist.
	_, err = e.admin.CreateToken(ctx, &api.CreateToken{Name: "x", Scopes: []string{api.ScopeRunsWrite}, Agents: []string{"nobody"}})
	wantAPIError(t, err, api.CodeNotFound, "nobody")
	who, err := bot.Whoami(ctx)
	if err != nil || len(who.Agents) != 1 || who.Agents[0] != "ci-bot" {
		t.Errorf("Whoami() = %+v, %v", who, err)
	}
}

func writeDemo(t *testing.T, dir string) {
	t.Helper()
	if err := demo.WriteProject(dir); err != nil {
		t.Fatal(err)
	}
}

// A decision made through the API on a run that a local keel run started
// on the server's journal with another policy is journaled, but the server
// does not execute the run: the process that started it continues it, as
// the run page says.
func TestApprovalDoesNotExecuteForeignRun(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	ws := t.TempDir()
	c := &agent.RunCreated{Task: "local", Model: "test:none", Workspace: ws, MountPath: "/workspace", Sandbox: e.sandbox,
		Principal: identity.LocalAgent, Policy: agent.NewPolicyRef(service.DemoPolicy()), Limits: agent.Limits{MaxSteps: 10}}
	call := modeltest.Call("w1", "write_file", map[string]string{"path": "log.txt", "content": "ran"})
	part := policy.Part{Text: "log.txt", Effect: policy.Ask, Policies: []string{"ask"}, Reason: "a person approves this"}
	d := policy.Decision{Effect: policy.Ask, Policies: part.Policies, Reason: part.Reason, Parts: []policy.Part{part}}
	id := e.journalRun(c,
		draft(t, journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{call}}}),
		draft(t, journal.GateDecided, &agent.GateDecided{CallID: "w1", Tool: "write_file", Decision: d}),
		draft(t, journal.ApprovalRequested, &agent.ApprovalRequested{CallID: "w1", Tool: "write_file", Arguments: json.RawMessage(call.Arguments),
			Reason: part.Reason, Action: "log.txt", Parts: d.Parts}),
		draft(t, journal.RunPaused, &agent.RunEnded{Reason: "approval", Message: "waiting"}))
	carol := e.token("carol", api.ScopeRunsRead, api.ScopeApprovalsWrite)
	run, err := carol.Approve(ctx, id, "w1", &api.Decide{})
	if err != nil {
		t.Fatal(err)
	}
	if run.Queued || run.Executing {
		t.Errorf("the server queued a run started elsewhere with another policy: %+v", run)
	}
	resolved := false
	for _, ev := range e.events(id) {
		switch ev.Type {
		case journal.ApprovalResolved:
			resolved = true
		case journal.ToolStarted, journal.RunResumed:
			t.Errorf("the server executed the foreign run: %s %s", ev.Type, ev.Payload)
		}
	}
	if !resolved {
		t.Error("the decision was not journaled")
	}
	if _, err := os.Stat(filepath.Join(ws, "log.txt")); err == nil {
		t.Error("the approved write ran on the server")
	}
	// The run page says where it goes on, not only "paused" (fresh-user
	// trial 6, F3).
	body := e.page("/ui/runs/" + id)
	for _, want := range []string{"Decisions made here are recorded; this server does not continue this run: it was started outside this server",
		"keel runs resume " + id + " without --server"} {
		if !strings.Contains(body, want) {
			t.Errorf("the run page lacks %q", want)
		}
	}
}

// The new-run form offers the models, workspaces and agents the server
// knows: the demo's model, the directories under its workspace roots a
// run may use and its agents.
func TestNewRunFormOffersChoices(t *testing.T) {
	e := newEnv(t, nil)
	root := filepath.Dir(e.dir)
	if err := os.Mkdir(filepath.Join(root, "project-a"), 0o755); err != nil {
		t.Fatal(err)
	}
	body := e.page("/ui/runs")
	for _, want := range []string{
		`<datalist id="models"><option value="scripted:demo">`,
		`<option value="` + filepath.Join(root, "project-a") + `">`,
		`<option value="` + identity.LocalAgent + `">`,
		`list="workspaces"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the runs page lacks %s", want)
		}
	}
	if strings.Contains(body, `name="max_steps" type="number" min="0" value=`) {
		t.Error("the form still fills in a max steps of its own instead of the server's default")
	}
	// The server's own directory is under the root too, but no run may
	// use it (fresh-user trial 6, F11).
	if strings.Contains(body, `<option value="`+e.dir+`">`) {
		t.Errorf("the form offers the server's own directory %s as a workspace", e.dir)
	}
}

// A demo run, or a fork of one, that is refused leaves no copy of the
// demo project behind: the service removes the workspace it made.
func TestRefusedDemoLeavesNoWorkspace(t *testing.T) {
	demos := t.TempDir()
	e := newEnv(t, &envOptions{sandbox: "linux", opts: func(o *service.Options) { o.DemoDir = demos }})
	ctx := t.Context()
	list := func() []string {
		ents, err := os.ReadDir(demos)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}
	// A demo run made on the server's machine without a sandbox: its
	// fork (a fresh copy of the demo project) is refused.
	local := e.journalRun(&agent.RunCreated{Task: demo.Task, Model: "scripted:demo", Workspace: t.TempDir(), MountPath: "/workspace", Sandbox: "none",
		Principal: identity.DemoAgent, Policy: agent.NewPolicyRef(service.DemoPolicy()), Labels: map[string]string{service.LabelDemo: demo.Label}},
		draft(t, journal.RunPaused, &agent.RunEnded{Reason: "user"}))
	_, err := e.admin.Fork(ctx, local, &api.ForkRun{Seq: 2})
	wantAPIError(t, err, api.CodeForbidden, "sandbox none")
	if left := list(); len(left) > 0 {
		t.Errorf("the refused fork left its copy of the demo project: %v", left)
	}
	// A new demo run of a revoked demo agent is refused.
	if _, err := e.admin.RevokeAgent(ctx, identity.DemoAgent, "no more demos"); err != nil {
		t.Fatal(err)
	}
	_, err = e.admin.CreateRun(ctx, &api.CreateRun{Demo: true})
	wantAPIError(t, err, api.CodeInvalidRequest, "revoked")
	if left := list(); len(left) > 0 {
		t.Errorf("the refused demo run left its copy of the demo project: %v", left)
	}
	// Restored through the API, it makes demo runs again; restoring it
	// twice is refused.
	if ag, err := e.admin.RestoreAgent(ctx, identity.DemoAgent, "demos again"); err != nil || ag.Revoked || ag.RestoredAt == nil {
		t.Fatalf("RestoreAgent = %+v, %v", ag, err)
	}
	_, err = e.admin.RestoreAgent(ctx, identity.DemoAgent, "")
	wantAPIError(t, err, api.CodeInvalidRequest, "is not revoked")
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	e.waitStop(run.ID, 1)
}

// The server's demo directory may be inside its protected home (keel
// serve keeps demo workspaces in $KEEL_HOME/demos, not in the system's
// temporary directory): its copies of the demo project are admitted,
// and only they: a run created there is refused.
func TestDemoDirInsideProtectedHome(t *testing.T) {
	var demos string
	e := newEnv(t, &envOptions{opts: func(o *service.Options) { demos = filepath.Join(o.Protected[0], "demos"); o.DemoDir = demos }})
	run, err := e.admin.CreateRun(t.Context(), &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatalf("a demo run in %s: %v", demos, err)
	}
	if filepath.Dir(run.Workspace) != demos {
		t.Errorf("the demo run's workspace is %s, want one in %s", run.Workspace, demos)
	}
	e.waitStop(run.ID, 1)
	_, err = e.admin.CreateRun(t.Context(), &api.CreateRun{Task: "t", Model: "test:none", Workspace: run.Workspace})
	wantAPIError(t, err, api.CodeInvalidRequest, "inside the server's own files")
}
