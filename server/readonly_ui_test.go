package server_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/server/api"
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
	if code != http.StatusForbidden || !strings.Contains(body, "lacks the approvals:write scope") ||
		!strings.Contains(body, `<a href="/ui/runs/`+url.PathEscape(run)+`" id="back">`) {
		t.Errorf("a decision posted by a runs:read token: %d, want 403 with a link back to the run\n%s", code, body)
	}
}
