package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// apiActions returns the api.action records of run (or, with run "",
// every record).
func (e *env) apiActions(run string) []map[string]any {
	e.t.Helper()
	var out []map[string]any
	for _, ev := range e.events(service.ActionStream) {
		var a map[string]any
		if err := json.Unmarshal(ev.Payload, &a); err != nil {
			e.t.Fatal(err)
		}
		if run == "" || a["run_id"] == run {
			out = append(out, a)
		}
	}
	return out
}

// The shared demo agent gets no standing approvals: remember "agent" on
// a demo run is refused (every token starts demos, so it would skip the
// approval of everyone's demo), and a grant an older server stored does
// not apply. The action log records what was remembered.
func TestDemoAgentHasNoStandingApprovals(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	alice := e.token("alice", api.ScopeRunsRead, api.ScopeApprovalsWrite)
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	asked := e.waitStop(run.ID, 1)
	list, err := alice.Approvals(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("Approvals() = %v, %v", list, err)
	}
	_, err = alice.Approve(ctx, run.ID, "demo_4", &api.Decide{Remember: policy.ScopeAgent})
	wantAPIError(t, err, api.CodeInvalidRequest, "keel-demo is the shared agent of every demo run")
	if _, err := alice.Approve(ctx, run.ID, "demo_4", &api.Decide{Remember: policy.ScopeRun, Reason: "fine"}); err != nil {
		t.Fatal(err)
	}
	e.waitStop(run.ID, asked.Seq+1)
	acts := e.apiActions(run.ID)
	if a := acts[len(acts)-1]; a["action"] != "approval.allow" || a["remember"] != "run" || a["by"] != "alice" {
		t.Errorf("the approval's api.action = %v, want approval.allow by alice remembering run", a)
	}

	// A standing approval of keel-demo stored by an older server (or a
	// local keel approve --remember agent) for exactly this edit.
	g := policy.Grant{ID: "old#0", Scope: policy.ScopeAgent, Tool: list[0].Tool, Exact: list[0].Parts[0].Text, By: "mallory", Run: run.ID, Call: "demo_4"}
	if err := identity.NewDirectory(e.store, nil).Grant(ctx, identity.DemoAgent, g); err != nil {
		t.Fatal(err)
	}
	next, err := e.token("dave", api.ScopeRunsWrite).CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	if stop := e.waitStop(next.ID, 1); stop.Type != journal.ApprovalRequested {
		t.Errorf("another person's demo stopped with %s; want it to ask, as every demo does", stop.Type)
	}
}

// An agent's standing approvals can be listed (runs:read) and removed
// (approvals:write) through the API, as `keel agents grants` and `keel
// agents ungrant` do locally; the removal is journaled with the person.
func TestAgentGrantsAPI(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	reader := e.token("rita", api.ScopeRunsRead)
	alice := e.token("alice", api.ScopeApprovalsWrite)
	id := e.askingRun(t.TempDir(), modeltest.Call("w1", "write_file", map[string]string{"path": "README", "content": "a"}))
	if _, err := alice.Approve(ctx, id, "w1", &api.Decide{Remember: policy.ScopeAgent}); err != nil {
		t.Fatal(err)
	}
	list, err := reader.Grants(ctx, identity.LocalAgent)
	if err != nil {
		t.Fatal(err)
	}
	want := []policy.Grant{{ID: list.Grants[0].ID, Scope: policy.ScopeAgent, Tool: "write_file", Exact: "README", By: "alice", Run: id, Call: "w1"}}
	if diff := cmp.Diff(want, list.Grants); diff != "" || list.Agent != identity.LocalAgent {
		t.Fatalf("Grants(%s) = %s (-want +got):\n%s", identity.LocalAgent, list.Agent, diff)
	}
	for _, tt := range []struct {
		name        string
		c           *client.Client
		agent, gid  string
		code, words string
	}{
		{"a reader cannot remove one", reader, identity.LocalAgent, want[0].ID, api.CodeForbidden, "approvals:write"},
		{"an unknown grant", alice, identity.LocalAgent, "nosuch#0", api.CodeNotFound, "has no standing approval nosuch#0"},
		{"an unknown agent", alice, "nobody", want[0].ID, api.CodeNotFound, "nobody"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.c.Ungrant(ctx, tt.agent, tt.gid, "")
			wantAPIError(t, err, tt.code, tt.words)
		})
	}
	left, err := alice.Ungrant(ctx, identity.LocalAgent, want[0].ID, "too broad")
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Grants) != 0 {
		t.Errorf("after the removal: %+v", left.Grants)
	}
	ag, err := identity.NewDirectory(e.store, nil).Get(ctx, identity.LocalAgent)
	if err != nil || len(ag.Grants) != 0 {
		t.Errorf("the directory still holds %+v (%v)", ag, err)
	}
	acts := e.apiActions("")
	if a := acts[len(acts)-1]; a["action"] != "agent.ungrant" || a["by"] != "alice" || a["target"] != identity.LocalAgent || a["detail"] != want[0].ID+": too broad" {
		t.Errorf("the removal's api.action = %v", a)
	}
}

// A recording's file name is looked up in the server's recording
// directories for every token, admins included (who may also name any
// absolute path).
func TestReplayNamesForAdmins(t *testing.T) {
	recs := t.TempDir()
	if err := os.WriteFile(filepath.Join(recs, "quick.traj.json"), []byte(`{"messages":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, &envOptions{opts: func(o *service.Options) { o.ReplayDirs = []string{recs} }})
	ctx := t.Context()
	writer := e.bound("wendy", []string{identity.LocalAgent}, api.ScopeRunsWrite)
	resolved, _ := filepath.EvalSymlinks(filepath.Join(recs, "quick.traj.json"))
	ws := t.TempDir()
	for _, tt := range []struct {
		name string
		c    *client.Client
		spec string
		want string
	}{
		// The test's Prepare knows no such model and names the spec it
		// got: the resolved recording.
		{"a writer by name", writer, "replay:quick.traj.json", `no test model "replay:` + resolved + `"`},
		{"an admin by name", e.admin, "replay:quick.traj.json", `no test model "replay:` + resolved + `"`},
		{"an admin by absolute path", e.admin, "replay:/srv/elsewhere.traj.json", `no test model "replay:/srv/elsewhere.traj.json"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.c.CreateRun(ctx, &api.CreateRun{Task: "t", Model: tt.spec, Workspace: ws})
			wantAPIError(t, err, api.CodeInvalidRequest, tt.want)
		})
	}
}

// Who resumed a run, who wrote the message sent with it, and who
// canceled it (person and token) are in the run's journal.
func TestResumeAndCancelNameThePerson(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	e.models.set("test:idle", modeltest.NewScripted([]modeltest.Turn{modeltest.Text("done"), modeltest.Text("again")}, nil))
	bobTok, err := e.admin.CreateToken(ctx, &api.CreateToken{Name: "bob", Scopes: []string{api.ScopeRunsWrite}, Agents: []string{identity.LocalAgent}})
	if err != nil {
		t.Fatal(err)
	}
	daveTok, err := e.admin.CreateToken(ctx, &api.CreateToken{Name: "dave", Scopes: []string{api.ScopeRunsWrite}})
	if err != nil {
		t.Fatal(err)
	}
	bob, dave := e.client(bobTok.Secret), e.client(daveTok.Secret)
	// A run of the server's settings that a shutdown paused.
	id := e.journalRun(&agent.RunCreated{Task: "t", Model: "test:idle", Workspace: t.TempDir(), MountPath: "/workspace", Sandbox: e.sandbox,
		Principal: identity.LocalAgent, Policy: agent.NewPolicyRef(e.policy)},
		draft(t, journal.RunPaused, &agent.RunEnded{Reason: "shutdown"}))
	if _, err := dave.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	typ, end := e.lastEnded(id)
	if typ != journal.RunCanceled || end.By != "dave" || end.Token != daveTok.ID || end.Message != "canceled by dave" {
		t.Errorf("run.canceled = %+v, want by dave with token %s", end, daveTok.ID)
	}
	canceled := e.events(id)
	// The run's model answers "done" at once after the resume.
	if _, err := bob.Resume(ctx, id, &api.ResumeRun{Message: "go on"}); err != nil {
		t.Fatal(err)
	}
	e.waitStop(id, int64(len(canceled))+1)
	type who struct{ By, Token string }
	var got []string
	for _, ev := range e.events(id)[len(canceled):] {
		var w who
		switch ev.Type {
		case journal.RunResumed, journal.UserMessage:
			v, _ := agent.Decode(&ev)
			switch x := v.(type) {
			case *agent.RunResumed:
				w = who{x.By, x.Token}
			case *agent.UserMessage:
				w = who{x.By, x.Token}
				if x.Content != "go on" {
					t.Errorf("user.message %q", x.Content)
				}
			}
			got = append(got, fmt.Sprintf("%s %s %s", ev.Type, w.By, w.Token))
		}
	}
	wantSeq := []string{"run.resumed bob " + bobTok.ID, "user.message bob " + bobTok.ID}
	if diff := cmp.Diff(wantSeq, got); diff != "" {
		t.Errorf("attribution after the resume (-want +got):\n%s", diff)
	}
}

// Smaller rules of a create request: labels of the server's in any case
// or look-alike form are refused; the demo takes no other field; a body
// over the limit is 413 in the one error shape.
func TestCreateRequestRules(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	for _, tt := range []struct{ name, body, want string }{
		{"upper-case keel label", `{"task":"t","workspace":"%s","labels":{"KEEL.created_by":"root"}}`, "are Keel's own"},
		{"mixed-case keel label", `{"task":"t","workspace":"%s","labels":{"Keel.Demo":"x"}}`, "are Keel's own"},
		{"fullwidth keel label", `{"task":"t","workspace":"%s","labels":{"ＫEEL.created_by":"root"}}`, "are Keel's own"},
		{"demo with a task", `{"demo":true,"task":"rm -rf / please","workspace":"%s"}`, "remove task, workspace"},
		{"demo with everything", `{"demo":true,"model":"replay:x","env":["A=b"],"setup":"echo hi","limits":{"max_steps":1},"workspace":"%s"}`,
			"remove model, workspace, env, setup, limits"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, body := e.raw(http.MethodPost, "/v1/runs", e.secret, fmt.Sprintf(tt.body, t.TempDir()))
			if code != http.StatusBadRequest || !strings.Contains(body, tt.want) {
				t.Errorf("%d %s, want 400 saying %q", code, body, tt.want)
			}
		})
	}
	if _, err := e.admin.CreateRun(ctx, &api.CreateRun{Demo: true, Labels: map[string]string{"team": "docs"}}); err != nil {
		t.Errorf("a demo with a label: %v", err)
	}
	big := `{"task":"` + strings.Repeat("x", 1<<20) + `"}`
	code, body := e.raw(http.MethodPost, "/v1/runs", e.secret, big)
	var eb api.ErrorBody
	if err := json.Unmarshal([]byte(body), &eb); err != nil || code != http.StatusRequestEntityTooLarge ||
		eb.Error != (api.Error{Code: api.CodeTooLarge, Message: "request body over 1048576 bytes", Status: 413}) {
		t.Errorf("a body over the limit: %d %s, want 413 too_large in the error shape", code, body)
	}
}

// A run the server admitted whose workspace fails the confinement check
// when it is executed (its directory was swapped for a symlink into the
// server's files after it was admitted) ends failed with reason setup
// and the cause journaled, instead of sitting paused with nothing
// pending. (A run a local keel run started is left to it:
// TestServerLeavesLocalRunsItMayNotExecute.)
func TestUnconfinedWorkspaceFailsTheRun(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	ws := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	id := e.askingRunLabeled(ws, map[string]string{service.LabelCreatedBy: "ada"},
		modeltest.Call("w1", "write_file", map[string]string{"path": "README", "content": "a"}))
	asked := e.events(id)
	if err := os.Remove(ws); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(e.dir, ws); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.Approve(ctx, id, "w1", nil); err != nil {
		t.Fatal(err)
	}
	stop := e.waitStop(id, int64(len(asked))+1)
	v, _ := agent.Decode(&stop)
	end, _ := v.(*agent.RunEnded)
	if stop.Type != journal.RunFailed || end == nil || end.Reason != "setup" || !strings.Contains(end.Message, "the server's own files") {
		t.Fatalf("the run stopped with %s %+v, want run.failed (setup) naming the cause", stop.Type, end)
	}
	for _, ev := range e.events(id) {
		if ev.Type == journal.ToolStarted {
			t.Errorf("the call ran in the swapped workspace: %s", ev.Payload)
		}
	}
	if _, err := os.Stat(filepath.Join(e.dir, "README")); err == nil {
		t.Errorf("the call wrote into the journal's directory")
	}
}
