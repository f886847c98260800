package server_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
)

// The web UI's approval card of a command takes the word prefix an
// "Always" remembers, as keel approvals approve --prefix and the API's
// prefix do, checked by the service; and a token that may not list the
// approvals (metrics:read) is not shown how many wait (newuser report
// 15, R17).
func TestUIApprovalPrefixAndInboxCount(t *testing.T) {
	e := newEnv(t, nil)
	args, _ := json.Marshal(map[string]string{"command": "go test ./..."})
	part := policy.Part{Text: "go test ./...", Command: "go", Words: []string{"go", "test", "./..."}, Effect: policy.Ask, Policies: []string{"ask"}, Reason: "a person approves this"}
	d := policy.Decision{Effect: policy.Ask, Policies: part.Policies, Reason: part.Reason, Parts: []policy.Part{part}}
	id := e.journalRun(&agent.RunCreated{Task: "test", Model: "test:none", Workspace: t.TempDir(), MountPath: "/workspace", Sandbox: e.sandbox,
		Principal: identity.LocalAgent, Policy: agent.NewPolicyRef(e.policy), Limits: agent.Limits{MaxSteps: 10}},
		draft(t, journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "b1", Name: "bash", Arguments: string(args)}}}}),
		draft(t, journal.GateDecided, &agent.GateDecided{CallID: "b1", Tool: "bash", Decision: d}),
		draft(t, journal.ApprovalRequested, &agent.ApprovalRequested{CallID: "b1", Tool: "bash", Arguments: args, Reason: part.Reason, Action: part.Text, Parts: d.Parts}),
		draft(t, journal.RunPaused, &agent.RunEnded{Reason: "approval", Message: "waiting"}))

	metrics := e.newToken("prom", nil, api.ScopeMetricsRead)
	if _, page := e.uiGet("/ui/runs", metrics); strings.Contains(page, `class="count"`) {
		t.Error("a metrics:read token's header shows the count of approvals it may not list")
	}
	if _, page := e.uiGet("/ui/runs", e.secret); !strings.Contains(page, `<span class="count">1</span>`) {
		t.Error("an admin's header does not count the waiting approval")
	}
	if _, page := e.uiGet("/ui/approvals", e.secret); !strings.Contains(page, `name="prefix"`) {
		t.Fatal("the approval card of a command has no prefix field")
	}
	// A prefix that does not start the command is refused in the
	// service's words, keeping what was typed.
	bad := url.Values{"decision": {"allow-agent"}, "call": {"b1"}, "from": {"run"}, "prefix": {"go build"}}
	if code, body := e.uiDo(http.MethodPost, "/ui/approvals/"+id+"/b1", e.secret, bad, "same-origin"); code != http.StatusBadRequest ||
		!strings.Contains(body, "is not a prefix of part 1") || !strings.Contains(body, `value="go build"`) {
		t.Errorf("a prefix that does not fit: %d, want 400 keeping it\n%s", code, body)
	}
	good := url.Values{"decision": {"allow-agent"}, "call": {"b1"}, "from": {"run"}, "prefix": {" go  test "}}
	if code, body := e.uiDo(http.MethodPost, "/ui/approvals/"+id+"/b1", e.secret, good, "same-origin"); code != http.StatusSeeOther {
		t.Fatalf("Always for agent with prefix go test: %d\n%s", code, body)
	}
	list, err := e.admin.Grants(t.Context(), identity.LocalAgent)
	if err != nil || len(list.Grants) != 1 || !slices.Equal(list.Grants[0].Prefix, []string{"go", "test"}) {
		t.Errorf("the agent's grants = %+v, %v; want one of prefix go test", list, err)
	}
}
