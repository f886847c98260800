package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// teamModel plays a lead that spawns one child and answers with what it
// got, and a child that answers (task "child") or waits until it is
// stopped (task "slow", which closes started).
type teamModel struct{ started chan struct{} }

func (m teamModel) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	task := req.Messages[0].Content
	last := req.Messages[len(req.Messages)-1]
	switch {
	case task == "slow":
		close(m.started)
		<-ctx.Done()
		return nil, ctx.Err()
	case task != "lead-child" && task != "lead-slow":
		return &model.Response{Message: model.Message{Role: model.RoleAssistant, Content: "child says 42"}}, nil
	case last.Role == model.RoleTool:
		return &model.Response{Message: model.Message{Role: model.RoleAssistant, Content: "lead got: " + last.Content}}, nil
	}
	args, _ := json.Marshal(map[string]any{"task": strings.TrimPrefix(task, "lead-")})
	return &model.Response{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "s1", Name: agent.SpawnTool, Arguments: string(args)}}}}, nil
}

// TestTeamOnTheServer: the server's pool executes a run's children, gives
// the lead its child's result, and a cancel of the lead stops its child.
func TestTeamOnTheServer(t *testing.T) {
	e := newEnv(t, nil)
	started := make(chan struct{})
	e.models.set("test:team", teamModel{started: started})
	ctx := t.Context()
	lead := func(task string) string {
		return e.journalRun(&agent.RunCreated{Task: task, Model: "test:team", Workspace: t.TempDir(), MountPath: "/workspace", Sandbox: "none",
			Tools: agent.TeamTools(), Limits: agent.Limits{MaxSteps: 10, MaxChildren: 2},
			Principal: identity.LocalAgent, Policy: agent.NewPolicyRef(policy.Default())})
	}

	id := lead("lead-child")
	if _, err := e.admin.Resume(ctx, id, nil); err != nil {
		t.Fatal(err)
	}
	end := e.waitType(id, journal.RunCompleted, journal.RunFailed, journal.RunCanceled, journal.RunPaused)
	var ended agent.RunEnded
	json.Unmarshal(end.Payload, &ended)
	if end.Type != journal.RunCompleted || !strings.Contains(ended.Output, "child says 42") {
		t.Fatalf("lead %s %+v", end.Type, ended)
	}
	if run, err := e.admin.Run(ctx, id+".s1"); err != nil || run.Status != string(journal.StatusCompleted) {
		t.Errorf("child: %+v %v", run, err)
	}
	// The tree through the API: the lead with its child, each node's
	// spend and what is left of its limits (the child's: its slice).
	tree, err := e.admin.RunTree(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if tree.ID != id || tree.Status != "completed" || len(tree.Children) != 1 || tree.Parent != "" {
		t.Fatalf("tree %+v", tree)
	}
	c := tree.Children[0]
	if c.ID != id+".s1" || c.Status != "completed" || c.Own.Steps != 1 || c.Limits.Steps == 0 || c.Left.Steps == nil || *c.Left.Steps != c.Limits.Steps-1 {
		t.Errorf("child node %+v", c)
	}
	// Left holds the limited axes only: an axis without a limit is
	// absent, so that 0 means nothing left.
	if left, _ := json.Marshal(tree.Left); tree.Own.Steps != 2 || tree.Used.Steps != 3 || tree.Own.Children != 1 || string(left) != `{"steps":7,"children":1}` {
		t.Errorf("lead node: own %+v used %+v left %s", tree.Own, tree.Used, left)
	}
	// The child is its lead's part: listed with its parent, and, ended
	// (its result delivered, its spend counted in the lead's), not
	// resumed on its own.
	if run, err := e.admin.Run(ctx, id+".s1"); err != nil || run.Parent != id {
		t.Errorf("child run %+v %v, want parent %s", run, err, id)
	}
	if _, err := e.admin.Resume(ctx, id+".s1", &api.ResumeRun{Message: "go on"}); err == nil || !strings.Contains(err.Error(), "is a child agent of run "+id) {
		t.Errorf("resume of the delivered child: %v, want refused", err)
	}
	if sub, err := e.admin.RunTree(ctx, id+".s1"); err != nil || sub.Parent != id || sub.Root != id || len(sub.Children) != 0 {
		t.Errorf("the child's tree %+v %v", sub, err)
	}
	if _, err := e.admin.RunTree(ctx, "nope"); err == nil {
		t.Error("the tree of an unknown run")
	}
	// The web UI's run page shows the team, the child's links up.
	for path, want := range map[string][]string{
		"/ui/runs/" + id:           {`id="tree"`, `href="/ui/runs/` + id + `.s1"`, "1 of 2 children", "with children 3 steps"},
		"/ui/runs/" + id + ".s1":   {`id="tree"`, "A child of", `href="/ui/runs/` + id + `"`},
		"/ui/runs/" + id + "/tree": {`data-refresh="/ui/runs/` + id + `/tree"`, id + `.s1`},
	} {
		body := e.page(path)
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("%s lacks %q:\n%s", path, w, body)
			}
		}
	}

	// The tree's event stream: the lead's events with their ids, and the
	// child's, replayed (follow=false) or until the lead's completion.
	for _, q := range []string{"follow=false", "follow=true"} {
		code, body := e.raw(http.MethodGet, "/v1/runs/"+id+"/events?tree=true&"+q, e.secret, "")
		for _, w := range []string{"id: 1\nevent: run.created", "event: child.spawned", `"run_id":"` + id + `.s1","seq":1`, "event: child.delivered"} {
			if code != 200 || !strings.Contains(body, w) {
				t.Errorf("tree stream (%s): %d, lacks %q:\n%s", q, code, w, body)
			}
		}
		if want := map[string]string{"follow=false": `{"reason":"replayed"}`, "follow=true": `{"reason":"completed"}`}[q]; !strings.HasSuffix(strings.TrimSpace(body), want) {
			t.Errorf("tree stream (%s) ends %q, want %s", q, body[max(0, len(body)-80):], want)
		}
		if n := strings.Count(body, `"type":"run.completed"`); n != 2 {
			t.Errorf("tree stream (%s): %d run.completed, want the lead's and the child's", q, n)
		}
	}
	for _, q := range []string{"tree=maybe", "tree=true&deltas=true"} {
		if code, _ := e.raw(http.MethodGet, "/v1/runs/"+id+"/events?"+q, e.secret, ""); code != 400 {
			t.Errorf("%s: %d, want 400", q, code)
		}
	}

	id = lead("lead-slow")
	if _, err := e.admin.Resume(ctx, id, nil); err != nil {
		t.Fatal(err)
	}
	<-started
	if _, err := e.admin.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	e.waitType(id, journal.RunCanceled)
	e.waitType(id+".s1", journal.RunCanceled)
}

// pausingLead plays a lead that starts a child without waiting, then
// calls wait_agents (which its policy asks about), then answers with
// what it got; the child answers once released.
type pausingLead struct{ release chan struct{} }

func (m pausingLead) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	last := req.Messages[len(req.Messages)-1]
	call := func(name string, args any) (*model.Response, error) {
		b, _ := json.Marshal(args)
		return &model.Response{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: name, Name: name, Arguments: string(b)}}}}, nil
	}
	switch {
	case req.Messages[0].Content == "background":
		select {
		case <-m.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &model.Response{Message: model.Message{Role: model.RoleAssistant, Content: "child says 42"}}, nil
	case last.Role == model.RoleTool && strings.Contains(last.Content, "## child"):
		return &model.Response{Message: model.Message{Role: model.RoleAssistant, Content: "lead got: " + last.Content}}, nil
	case last.Role == model.RoleTool:
		return call(agent.WaitTool, map[string]any{})
	}
	return call(agent.SpawnTool, map[string]any{"task": "background", "wait": false})
}

// A lead on the server that pauses for a person (here its own
// wait_agents call, which its policy asks about) while a child it
// started without waiting works: the child goes on (the end of the
// lead's execution does not stop it), and once the call is approved the
// lead gets the child's result.
func TestTeamOnTheServerLeadPausesChildGoesOn(t *testing.T) {
	pol, err := policy.Parse("ask-wait.cedar", []byte(`@id("all") permit(principal, action, resource);
@id("wait") @ask forbid(principal, action == Keel::Action::"wait_agents", resource);
`))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, &envOptions{opts: func(o *service.Options) { o.Policy = pol }})
	release := make(chan struct{})
	e.models.set("test:pausing", pausingLead{release: release})
	ctx := t.Context()
	id := e.journalRun(&agent.RunCreated{Task: "lead", Model: "test:pausing", Workspace: t.TempDir(), MountPath: "/workspace", Sandbox: "none",
		Tools: agent.TeamTools(), Limits: agent.Limits{MaxSteps: 10, MaxChildren: 2},
		Principal: identity.LocalAgent, Policy: agent.NewPolicyRef(pol)})
	if _, err := e.admin.Resume(ctx, id, nil); err != nil {
		t.Fatal(err)
	}
	e.waitType(id, journal.ApprovalRequested)
	if _, err := e.admin.Approve(ctx, id, agent.WaitTool, nil); err != nil {
		t.Fatal(err)
	}
	close(release)
	end := e.waitType(id, journal.RunCompleted, journal.RunFailed, journal.RunCanceled)
	var ended agent.RunEnded
	json.Unmarshal(end.Payload, &ended)
	if end.Type != journal.RunCompleted || !strings.Contains(ended.Output, "completed") || !strings.Contains(ended.Output, "child says 42") {
		t.Fatalf("lead %s %+v, want completed with its child's result", end.Type, ended)
	}
}
