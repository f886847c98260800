package server_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/policy"
)

// A run stopped at its step limit is continued from the run page as
// `keel runs resume --max-steps N` and the API's limits do: the Resume
// form says which limit stopped it and proposes a raised one, and the
// limits it sends reach the service's resume (journaled in run.resumed)
// with the message, which then reaches the model. A bad limit is refused
// in the service's words and nothing is journaled (newuser report 15, R7).
func TestUIResumeRaisesLimit(t *testing.T) {
	e := newEnv(t, nil)
	e.models.set("test:more", modeltest.NewScripted([]modeltest.Turn{modeltest.Text("done")}, nil))
	c := &agent.RunCreated{Task: "look", Model: "test:more", Workspace: t.TempDir(), MountPath: "/workspace", Sandbox: "none",
		Principal: identity.LocalAgent, Policy: agent.NewPolicyRef(policy.Default()), Limits: agent.Limits{MaxSteps: 1, MaxTokens: 1e6}}
	id := e.journalRun(c,
		draft(t, journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, Content: "thinking"}}),
		draft(t, journal.RunFailed, &agent.RunEnded{Reason: agent.ReasonMaxSteps, Message: "step limit reached: 1 model calls"}))
	page := e.page("/ui/runs/" + id)
	for _, want := range []string{`id="limit-stop"`, "step limit reached: 1 model calls", `name="max_steps" type="number" min="0" placeholder="the run's" value="2"`, `name="max_tokens"`, `name="max_cost"`, `name="timeout"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the run page of a run stopped at its step limit lacks %s", want)
		}
	}
	before := len(e.events(id))
	bad := url.Values{"message": {"go on"}, "max_tokens": {"-5"}}
	if code, body := e.uiDo(http.MethodPost, "/ui/runs/"+id+"/resume", e.secret, bad, "same-origin"); code != http.StatusBadRequest ||
		!strings.Contains(body, "limits.max_tokens -5: want 0 (no limit) or more") || !strings.Contains(body, `value="-5"`) {
		t.Errorf("a negative max tokens: %d, want 400 in the service's words, keeping the form\n%s", code, body)
	}
	if code, body := e.uiDo(http.MethodPost, "/ui/runs/"+id+"/resume", e.secret, url.Values{"max_cost": {"lots"}}, "same-origin"); code != http.StatusBadRequest ||
		!strings.Contains(body, "max cost &#34;lots&#34;: want a number") {
		t.Errorf("a max cost not a number: %d, want 400\n%s", code, body)
	}
	if n := len(e.events(id)); n != before {
		t.Fatalf("refused resumes journaled %d event(s)", n-before)
	}
	form := url.Values{"message": {"go on"}, "max_steps": {"3"}, "timeout": {"20m"}}
	if code, body := e.uiDo(http.MethodPost, "/ui/runs/"+id+"/resume", e.secret, form, "same-origin"); code != http.StatusSeeOther {
		t.Fatalf("resume with max_steps 3: %d, want 303\n%s", code, body)
	}
	e.waitType(id, journal.RunCompleted)
	var resumed *agent.RunResumed
	for _, ev := range e.events(id) {
		if ev.Type == journal.RunResumed {
			v, err := agent.Decode(&ev)
			if err != nil {
				t.Fatal(err)
			}
			resumed = v.(*agent.RunResumed)
		}
	}
	want := agent.Limits{MaxSteps: 3, MaxTokens: 1e6, Timeout: agent.Duration(20 * 60e9)}
	if resumed == nil || resumed.Limits == nil || *resumed.Limits != want {
		t.Errorf("run.resumed = %+v, want limits %+v", resumed, want)
	}
}

// The New-run form takes the limits the API, the CLI and MCP start_run
// take (max_tokens, max_cost, timeout besides max_steps), checked by the
// service.
func TestNewRunFormLimits(t *testing.T) {
	e := newEnv(t, nil)
	e.models.set("test:idle", modeltest.NewScripted([]modeltest.Turn{modeltest.Text("done")}, nil))
	form := url.Values{"task": {"t"}, "model": {"test:idle"}, "workspace": {t.TempDir()}, "sandbox": {"none"},
		"max_tokens": {"5000"}, "max_cost": {"-1"}, "timeout": {"30m"}}
	if code, body := e.uiDo(http.MethodPost, "/ui/runs/new", e.secret, form, "same-origin"); code != http.StatusBadRequest ||
		!strings.Contains(body, "limits.max_cost -1: want 0 (no limit) or more") || !strings.Contains(body, `value="5000"`) {
		t.Fatalf("a negative max cost: %d, want 400 in the service's words\n%s", code, body)
	}
	form.Set("max_cost", "2.5")
	code, body, resp := e.uiResp(http.MethodPost, "/ui/runs/new", e.secret, form, "same-origin")
	id, ok := strings.CutPrefix(resp.Header.Get("Location"), "/ui/runs/")
	if code != http.StatusSeeOther || !ok {
		t.Fatalf("a good form: %d to %q\n%s", code, resp.Header.Get("Location"), body)
	}
	v, err := agent.Decode(&e.events(id)[0])
	if err != nil {
		t.Fatal(err)
	}
	l := v.(*agent.RunCreated).Limits
	if l.MaxTokens != 5000 || l.MaxCost != 2.5 || l.Timeout != agent.Duration(30*60e9) {
		t.Errorf("run.created limits = %+v, want 5000 tokens, $2.5, 30m", l)
	}
	e.waitStop(id, 1)
}
