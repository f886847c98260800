package server_test

import (
	"html"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/server/api"
)

// postForms finds the actions of the forms a page offers that post.
var postForms = regexp.MustCompile(`<form method="post" action="([^"]+)"`)

// The web UI offers a token only the forms it may use: on every page (the
// runs and their New-run form, a run that completed with checkpoints and
// its Follow-up, Rewind and Fork, a paused run's Cancel and approvals,
// agents, schedules, memory, audit), each form a read-only
// token, a runs:write one and an approvals:write one is shown, posted by
// that token, is not refused for its scope (fresh-user report, Q14).
func TestUIFormsOnlyForTokensThatMayUseThem(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: .ci/run installs it")
	}
	e := newEnv(t, &envOptions{checkpoints: true})
	e.models.set("test:a", modeltest.NewScripted([]modeltest.Turn{
		modeltest.Calls("write", modeltest.Call("w1", "write_file", map[string]any{"path": "a.txt", "content": "x\n"})),
		modeltest.Text("done"),
	}, nil))
	done, err := e.admin.CreateRun(t.Context(), &api.CreateRun{Task: "t", Model: "test:a", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if end := e.waitStop(done.ID, 1); end.Type != journal.RunCompleted {
		t.Fatalf("the run stopped with %s: %s", end.Type, end.Payload)
	}
	asking := e.askingRun(t.TempDir(), modeltest.Call("c1", "bash", map[string]string{"command": "make"}))
	pages := []string{"/ui/runs", "/ui/runs/" + done.ID, "/ui/runs/" + asking, "/ui/approvals", "/ui/agents", "/ui/schedules",
		"/ui/memory", "/ui/audit"}
	type offer struct{ who, secret, page, action string }
	var offers []offer
	for _, tok := range []struct{ name, scope string }{{"reader", api.ScopeRunsRead}, {"writer", api.ScopeRunsWrite}, {"decider", api.ScopeApprovalsWrite}} {
		secret := e.newToken(tok.name, nil, tok.scope)
		for _, p := range pages {
			code, body := e.uiGet(p, secret)
			if code != http.StatusOK {
				t.Fatalf("%s as %s: %d", p, tok.name, code)
			}
			for _, m := range postForms.FindAllStringSubmatch(body, -1) {
				if a := html.UnescapeString(m[1]); a != "/ui/logout" {
					offers = append(offers, offer{tok.name, secret, p, a})
				}
			}
		}
	}
	seen := map[string]bool{}
	for _, o := range offers {
		if seen[o.who+" "+o.action] {
			continue
		}
		seen[o.who+" "+o.action] = true
		code, body := e.uiDo(http.MethodPost, o.action, o.secret, url.Values{}, "same-origin")
		if code == http.StatusForbidden {
			flash := regexp.MustCompile(`(?s)class="flash bad"[^>]*>(.*?)<`).FindStringSubmatch(body)
			t.Errorf("%s offers %s the form %s, which refuses it: %v", o.page, o.who, o.action, flash)
		}
	}
}

// A child agent's run page offers neither Fork nor a Follow-up (Resume):
// the service refuses both for a child (its team goes on through its
// lead), and the page says so, naming the lead (Q9, Q14).
func TestUIChildRunOffersNoForkOrResume(t *testing.T) {
	e := newEnv(t, nil)
	lead := e.askingRun(t.TempDir(), modeltest.Call("c1", "bash", map[string]string{"command": "make"}))
	c := &agent.RunCreated{Task: "part", Model: "test:none", Workspace: t.TempDir(), MountPath: "/workspace", Sandbox: e.sandbox,
		Principal: identity.LocalAgent + "/a", Policy: agent.NewPolicyRef(e.policy), Limits: agent.Limits{MaxSteps: 10},
		Parent: &agent.ParentLink{Run: lead, Call: "c1", Root: lead, Depth: 1}}
	child := e.journalRun(c, draft(t, journal.RunCompleted, &agent.RunEnded{Reason: agent.ReasonAnswer, Message: "done"}))
	code, body := e.uiGet("/ui/runs/"+child, e.secret)
	if code != http.StatusOK {
		t.Fatalf("child page: %d", code)
	}
	for _, a := range []string{"/fork", "/resume"} {
		if strings.Contains(body, `action="/ui/runs/`+url.PathEscape(child)+a+`"`) {
			t.Errorf("the child's page offers %s, which the service refuses for a child", a)
		}
	}
	if !strings.Contains(body, "a child agent of run") || !strings.Contains(body, `href="/ui/runs/`+url.PathEscape(lead)+`"`) {
		t.Errorf("the child's page does not say it is a child agent, linking its lead")
	}
}
