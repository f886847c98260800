package server_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/server/api"
)

// The web UI undoes what it does to agents: the Agents page lists each
// agent's standing approvals (an approval card's "Always for agent")
// with Ungrant for approvals:write, and a revoked built-in agent has
// Restore for an admin, each through the service operation the API
// uses; a demo refused because keel-demo is revoked names the fix
// (newuser report 15, R8).
func TestUIAgentGrantsAndRestore(t *testing.T) {
	e := newEnv(t, nil)
	reader := e.newToken("rita", nil, api.ScopeRunsRead)
	alice := e.newToken("alice", nil, api.ScopeRunsRead, api.ScopeApprovalsWrite)
	id := e.askingRun(t.TempDir(), modeltest.Call("w1", "write_file", map[string]string{"path": "README", "content": "a"}))
	if code, body := e.uiDo(http.MethodPost, "/ui/approvals/"+id+"/w1", alice, url.Values{"decision": {"allow-agent"}, "call": {"w1"}}, "same-origin"); code != http.StatusSeeOther {
		t.Fatalf("Always for agent: %d\n%s", code, body)
	}
	list, err := e.admin.Grants(t.Context(), identity.LocalAgent)
	if err != nil || len(list.Grants) != 1 {
		t.Fatalf("grants after Always for agent: %+v, %v", list, err)
	}
	gid := list.Grants[0].ID
	_, page := e.uiGet("/ui/agents", reader)
	if !strings.Contains(page, `data-grant="`+gid+`"`) || !strings.Contains(page, "<code>README</code>") || !strings.Contains(page, "approved by alice") {
		t.Errorf("the Agents page does not show the grant %s to a reader", gid)
	}
	if strings.Contains(page, "Ungrant") || strings.Contains(page, "Restore") {
		t.Error("the Agents page offers a runs:read token Ungrant or Restore")
	}
	ungrant := "/ui/agents/" + identity.LocalAgent + "/grants/" + url.PathEscape(gid) + "/revoke"
	if code, _ := e.uiDo(http.MethodPost, ungrant, reader, url.Values{"reason": {"no"}}, "same-origin"); code != http.StatusForbidden {
		t.Errorf("a reader's Ungrant: %d, want 403", code)
	}
	if _, page := e.uiGet("/ui/agents", alice); !strings.Contains(page, `id="ungrant-`+gid+`"`) {
		t.Error("the Agents page offers approvals:write no Ungrant")
	}
	if code, body := e.uiDo(http.MethodPost, ungrant, alice, url.Values{"reason": {"too broad"}}, "same-origin"); code != http.StatusSeeOther {
		t.Fatalf("Ungrant: %d\n%s", code, body)
	}
	if list, err := e.admin.Grants(t.Context(), identity.LocalAgent); err != nil || len(list.Grants) != 0 {
		t.Errorf("after Ungrant: %+v, %v", list, err)
	}

	// Revoked from the UI, keel-demo cannot start the demo; the error
	// names the fix, and the Agents page restores it.
	if code, body := e.uiDo(http.MethodPost, "/ui/agents/"+identity.DemoAgent+"/revoke", e.secret, url.Values{"reason": {"test"}}, "same-origin"); code != http.StatusSeeOther {
		t.Fatalf("Revoke: %d\n%s", code, body)
	}
	if code, body := e.uiDo(http.MethodPost, "/ui/runs/demo", e.secret, url.Values{}, "same-origin"); code != http.StatusBadRequest ||
		!strings.Contains(body, "keel agents restore "+identity.DemoAgent) || !strings.Contains(body, "Restore on the web UI") {
		t.Errorf("the demo of a revoked keel-demo: %d, want 400 naming the restore\n%s", code, body)
	}
	if _, page := e.uiGet("/ui/agents", alice); strings.Contains(page, "Restore") {
		t.Error("the Agents page offers a non-admin Restore")
	}
	if _, page := e.uiGet("/ui/agents", e.secret); !strings.Contains(page, `id="restore-`+identity.DemoAgent+`"`) {
		t.Error("the Agents page offers an admin no Restore of the revoked keel-demo")
	}
	restore := "/ui/agents/" + identity.DemoAgent + "/restore"
	if code, _ := e.uiDo(http.MethodPost, restore, alice, url.Values{}, "same-origin"); code != http.StatusForbidden {
		t.Errorf("a non-admin's Restore: %d, want 403", code)
	}
	if code, body := e.uiDo(http.MethodPost, restore, e.secret, url.Values{"reason": {"demos again"}}, "same-origin"); code != http.StatusSeeOther {
		t.Fatalf("Restore: %d\n%s", code, body)
	}
	code, body, resp := e.uiResp(http.MethodPost, "/ui/runs/demo", e.secret, url.Values{}, "same-origin")
	run, ok := strings.CutPrefix(resp.Header.Get("Location"), "/ui/runs/")
	if code != http.StatusSeeOther || !ok {
		t.Fatalf("the demo after Restore: %d\n%s", code, body)
	}
	e.waitStop(run, 1)
}
