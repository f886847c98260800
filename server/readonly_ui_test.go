package server_test

import (
	"encoding/json"
	"html"
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
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/tool"
)

// A token that may not decide approvals sees no Approve or Deny buttons
// (on the inbox, its refresh and the run page), but why; a decision it
// posts anyway is refused on a page that links back to the run
// (fresh-user trial 12, N17).
func TestReadOnlyTokenSeesNoDecideButtons(t *testing.T) {
	e := newEnv(t, nil)
	run := e.askingRun(t.TempDir(), modeltest.Call("c1", "bash", map[string]string{"command": "make"}))
	alice := e.newToken("alice", nil, api.ScopeRunsRead)
	action := `action="/ui/approvals/` + url.PathEscape(run) + `/c1"`
	for _, path := range []string{"/ui/approvals", "/ui/approvals?fragment=1", "/ui/runs/" + run} {
		code, body := e.uiGet(path, alice)
		if code != http.StatusOK {
			t.Fatalf("%s: %d\n%s", path, code, body)
		}
		if strings.Contains(body, action) || strings.Contains(body, `value="allow"`) {
			t.Errorf("%s: a runs:read token is offered the decision form", path)
		}
		if !strings.Contains(body, "Deciding needs a token with the approvals:write scope; yours (alice) has runs:read") {
			t.Errorf("%s: the card does not say why it cannot be decided here", path)
		}
		if _, admin := e.uiGet(path, e.secret); !strings.Contains(admin, action) {
			t.Errorf("%s: the admin is not offered the decision form", path)
		}
	}
	form := url.Values{"call": {"c1"}, "decision": {"allow"}, "from": {"run"}}
	code, body := e.uiDo(http.MethodPost, "/ui/approvals/"+url.PathEscape(run)+"/c1", alice, form, "same-origin")
	// The refusal is the API's, word for word (Q5).
	_, apiBody := e.raw(http.MethodPost, "/v1/runs/"+url.PathEscape(run)+"/approvals/c1/approve", alice, "{}")
	var apiErr struct {
		Error struct{ Message string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(apiBody), &apiErr); err != nil || !strings.HasPrefix(apiErr.Error.Message, "this needs the approvals:write scope; token ") {
		t.Fatalf("the API's refusal: %s (%v)", apiBody, err)
	}
	if code != http.StatusForbidden || !strings.Contains(html.UnescapeString(body), apiErr.Error.Message) ||
		!strings.Contains(body, `<a href="/ui/runs/`+url.PathEscape(run)+`" id="back">`) {
		t.Errorf("a decision posted by a runs:read token: %d, want 403 with a link back to the run\n%s", code, body)
	}
}

// A token that may not answer sees no Accept or Connect buttons on an
// MCP server's question or an authorization wait (the run page and the
// inbox), but why, as for approvals (fresh-user trial 12, N17).
func TestReadOnlyTokenSeesNoAnswerButtons(t *testing.T) {
	e := newEnv(t, nil)
	c := &agent.RunCreated{Task: "ask", Model: "test:none", Workspace: t.TempDir(), MountPath: "/workspace", Sandbox: e.sandbox,
		Principal: identity.LocalAgent, Policy: agent.NewPolicyRef(e.policy), Limits: agent.Limits{MaxSteps: 10}}
	call := modeltest.Call("c1", "gh__issues", map[string]string{"q": "x"})
	run := e.journalRun(c,
		draft(t, journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{call}}}),
		draft(t, journal.GateDecided, &agent.GateDecided{CallID: "c1", Tool: call.Name, Decision: policy.Decision{Effect: policy.Allow}}),
		draft(t, journal.InputRequested, &agent.InputRequested{ID: "input-1", Server: "gh", Mode: "form", Message: "which repository?",
			Schema: json.RawMessage(`{"type":"object","properties":{"repo":{"type":"string","title":"Repository"}}}`), Fingerprint: "f1"}),
		draft(t, journal.AuthRequired, &agent.AuthRequired{CallID: "c1", Tool: call.Name,
			AuthRequiredError: tool.AuthRequiredError{Provider: "github", Agent: identity.LocalAgent, Reason: tool.AuthMissing}}),
		draft(t, journal.RunPaused, &agent.RunEnded{Reason: agent.ReasonAuth, Message: "waiting"}))
	alice := e.newToken("alice", nil, api.ScopeRunsRead)
	answer, connect := `action="/ui/inputs/`+url.PathEscape(run)+`/input-1"`, `action="/ui/runs/`+url.PathEscape(run)+`/auth/c1/connect"`
	for _, tt := range []struct {
		path  string
		forms []string
		says  []string
	}{
		{"/ui/runs/" + run, []string{answer, connect}, []string{"Answering needs", "Connecting needs"}},
		{"/ui/approvals", []string{connect}, []string{"Connecting needs"}},
		{"/ui/approvals?fragment=1", []string{connect}, []string{"Connecting needs"}},
	} {
		code, body := e.uiGet(tt.path, alice)
		if code != http.StatusOK {
			t.Fatalf("%s: %d\n%s", tt.path, code, body)
		}
		_, admin := e.uiGet(tt.path, e.secret)
		for _, form := range tt.forms {
			if strings.Contains(body, form) {
				t.Errorf("%s: a runs:read token is offered the form %s", tt.path, form)
			}
			if !strings.Contains(admin, form) {
				t.Errorf("%s: the admin is not offered the form %s", tt.path, form)
			}
		}
		for _, say := range tt.says {
			if want := say + " a token with the approvals:write scope; yours (alice) has runs:read"; !strings.Contains(body, want) {
				t.Errorf("%s: the card does not say %q", tt.path, want)
			}
		}
	}
}
