package server_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
	"github.com/keel-run/keel/service"
	"github.com/keel-run/keel/visible"
)

// pendingCalls returns the call ids of list for run id.
func pendingCalls(list []api.Approval, id string) []string {
	var out []string
	for _, a := range list {
		if a.RunID == id {
			out = append(out, a.CallID)
		}
	}
	return out
}

// A run that asked for two approvals still waits for the second after
// the first is decided: the inbox (API and web UI), the run's status and
// the approval deadlines all see it, whatever the run's newest event is.
func TestEveryPendingApprovalStaysInTheInbox(t *testing.T) {
	clock := &fakeClock{t: time.Now()}
	e := newEnv(t, &envOptions{clock: clock.now})
	ctx := t.Context()
	e.models.set("test:two", modeltest.NewScripted([]modeltest.Turn{
		modeltest.Calls("two files", modeltest.Call("w1", "write_file", map[string]string{"path": "a.txt", "content": "a"}),
			modeltest.Call("w2", "write_file", map[string]string{"path": "b.txt", "content": "b"})),
		modeltest.Text("done"),
	}, nil))
	src := strings.Replace(string(service.DemoPolicy().Source()), "[approval]\ndefault = \"deny\"", "[approval]\ndefault = \"deny\"\ntimeout = \"1h\"", 1)
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Task: "two files", Model: "test:two", Workspace: t.TempDir(), Policy: src})
	if err != nil {
		t.Fatal(err)
	}
	e.waitFor(run.ID, func(ev journal.Event) bool {
		return ev.Type == journal.ApprovalRequested && strings.Contains(string(ev.Payload), `"w2"`)
	})
	bob := e.token("bob", api.ScopeApprovalsWrite)
	list, err := bob.Approvals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"w1", "w2"}, pendingCalls(list, run.ID)); diff != "" {
		t.Fatalf("inbox before (-want +got):\n%s", diff)
	}
	got, err := bob.Approve(ctx, run.ID, "w1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != "paused" || len(got.Pending) != 1 {
		t.Errorf("after one of two decisions: status %s, pending %d; want paused with 1", got.Status, len(got.Pending))
	}
	list, err = bob.Approvals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"w2"}, pendingCalls(list, run.ID)); diff != "" {
		t.Errorf("inbox after deciding w1 (-want +got):\n%s", diff)
	}
	paused, err := bob.Runs(ctx, &client.RunsParams{Status: []string{"paused"}})
	if err != nil || len(paused) != 1 || paused[0].ID != run.ID {
		t.Errorf("Runs(paused) = %v, %v; want the run", paused, err)
	}
	if code, body := e.uiGet("/ui/approvals?fragment=1", e.secret); code != http.StatusOK || !strings.Contains(body, `data-call="w2"`) || strings.Contains(body, `data-call="w1"`) {
		t.Errorf("the web inbox after deciding w1 (%d):\n%s", code, body)
	}
	// The approval names the person and the token they used.
	for _, ev := range e.events(run.ID) {
		if ev.Type == journal.ApprovalResolved {
			v, _ := agent.Decode(&ev)
			r := v.(*agent.ApprovalResolved)
			who, _ := bob.Whoami(ctx)
			if r.By != "bob" || r.Token != who.ID {
				t.Errorf("approval.resolved by %q token %q, want bob %s", r.By, r.Token, who.ID)
			}
		}
	}
	// The second approval's deadline applies.
	clock.add(2 * time.Hour)
	ids, err := e.svc.ExpireApprovals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{run.ID}, ids); diff != "" {
		t.Fatalf("ExpireApprovals() (-want +got):\n%s", diff)
	}
	if end := e.waitType(run.ID, journal.RunCompleted, journal.RunFailed, journal.RunCanceled); end.Type != journal.RunCompleted {
		t.Errorf("run ended with %s", end.Type)
	}
	st, err := agent.Fold(run.ID, e.events(run.ID))
	if err != nil {
		t.Fatal(err)
	}
	c := st.Turns[0].Calls[1]
	if c.Resolved == nil || c.Resolved.By != agent.ByTimeout || c.Resolved.Decision != policy.Deny {
		t.Errorf("w2 decided %+v, want deny by %s", c.Resolved, agent.ByTimeout)
	}
}

// uiGet fetches a web UI page with the session cookie of secret.
func (e *env) uiGet(path, secret string) (int, string) {
	e.t.Helper()
	return e.uiDo(http.MethodGet, path, secret, nil, "same-origin")
}

// uiDo sends a web UI request with the session cookie of secret (none if
// empty), form values (a POST) and Sec-Fetch-Site site. It does not
// follow redirects.
func (e *env) uiDo(method, path, secret string, form url.Values, site string) (int, string) {
	e.t.Helper()
	code, body, _ := e.uiResp(method, path, secret, form, site)
	return code, body
}

func (e *env) uiResp(method, path, secret string, form url.Values, site string) (int, string, *http.Response) {
	e.t.Helper()
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.srv.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if site != "" {
		req.Header.Set("Sec-Fetch-Site", site)
	}
	if secret != "" {
		req.AddCookie(e.cookie(secret))
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = io.Copy(&b, resp.Body)
	return resp.StatusCode, b.String(), resp
}

// The approval card's form posts to the call it shows, whatever its id
// holds ("/../", "?", "#"): the id is one escaped path segment, and the
// server also checks the id the form carries. The card shows the call
// id, the run's workspace and who started it; the Go client reaches such
// calls too.
func TestApprovalFormsPostToTheirCall(t *testing.T) {
	e := newEnv(t, nil)
	ws := t.TempDir()
	ids := []string{"A", "B/../A", "q?x=1#frag", "sp ace%2F"}
	var calls []model.ToolCall
	for i, id := range ids {
		calls = append(calls, modeltest.Call(id, "write_file", map[string]string{"path": fmt.Sprintf("f%d.txt", i), "content": "x"}))
	}
	run := e.askingRun(ws, calls...)
	code, body := e.uiGet("/ui/approvals", e.secret)
	if code != http.StatusOK {
		t.Fatalf("inbox: %d\n%s", code, body)
	}
	for _, id := range ids {
		action := `action="/ui/approvals/` + url.PathEscape(run) + `/` + url.PathEscape(id) + `"`
		if !strings.Contains(body, action) {
			t.Errorf("the inbox has no form %s", action)
		}
	}
	for _, want := range []string{`<code class="call-id">B/../A</code>`, `<code class="workspace">` + ws + `</code>`, "Started by</dt><dd class=\"created-by\">the server"} {
		if !strings.Contains(body, want) {
			t.Errorf("the card lacks %s", want)
		}
	}
	// What a browser sends for the B/../A card: the escaped segment.
	form := url.Values{"decision": {"allow"}, "call": {"B/../A"}, "reason": {"ok"}}
	if code, body := e.uiDo(http.MethodPost, "/ui/approvals/"+run+"/"+url.PathEscape("B/../A"), e.secret, form, "same-origin"); code != http.StatusSeeOther {
		t.Fatalf("approve B/../A: %d\n%s", code, body)
	}
	// The unescaped action a normalising browser would have posted to
	// decides nothing.
	if code, _ := e.uiDo(http.MethodPost, "/ui/approvals/"+run+"/A", e.secret, url.Values{"decision": {"allow"}, "call": {"q?x=1#frag"}}, "same-origin"); code != http.StatusBadRequest {
		t.Errorf("a form posted to another call's path: %d, want 400", code)
	}
	// A denial from the web UI needs a reason (the model is told it).
	if code, body := e.uiDo(http.MethodPost, "/ui/approvals/"+run+"/"+url.PathEscape("q?x=1#frag"), e.secret, url.Values{"decision": {"deny"}, "call": {"q?x=1#frag"}, "reason": {"  "}}, "same-origin"); code != http.StatusBadRequest || !strings.Contains(body, "a denial needs a reason") {
		t.Errorf("a deny without a reason: %d, want 400 saying it needs one\n%s", code, body)
	}
	// The Go client escapes each segment once.
	if _, err := e.admin.Approve(t.Context(), run, "q?x=1#frag", nil); err != nil {
		t.Errorf("Approve(q?x=1#frag): %v", err)
	}
	if _, err := e.admin.Deny(t.Context(), run, "sp ace%2F", &api.Decide{Reason: "no"}); err != nil {
		t.Errorf("Deny(sp ace%%2F): %v", err)
	}
	var decided []string
	for _, ev := range e.events(run) {
		if ev.Type == journal.ApprovalResolved {
			v, _ := agent.Decode(&ev)
			decided = append(decided, v.(*agent.ApprovalResolved).CallID)
		}
	}
	if diff := cmp.Diff([]string{"B/../A", "q?x=1#frag", "sp ace%2F"}, decided); diff != "" {
		t.Errorf("decided calls (-want +got):\n%s", diff)
	}
	list, err := e.admin.Approvals(t.Context())
	if err != nil || len(list) != 1 || list[0].CallID != "A" || list[0].Workspace != ws || list[0].CreatedBy != "" {
		t.Errorf("still pending: %+v, %v; want only A, with its workspace", list, err)
	}
}

// Text that reorders or hides characters is shown escaped in the inbox,
// in the API's own fields untouched.
func TestApprovalShowsHiddenCharacters(t *testing.T) {
	e := newEnv(t, nil)
	cmd := "rm -rf ./data \u202e# pmt eht naelc\u202c\u200b"
	run := e.askingRun(t.TempDir(), modeltest.Call("c1", "bash", map[string]string{"command": cmd}))
	_, body := e.uiGet("/ui/approvals", e.secret)
	if strings.ContainsAny(body, "\u202e\u202c\u200b") {
		t.Errorf("the inbox holds raw bidi or zero-width characters")
	}
	if !strings.Contains(body, `rm -rf ./data \u202e# pmt eht naelc\u202c\u200b`) {
		t.Errorf("the inbox does not show them escaped:\n%s", body)
	}
	list, err := e.admin.Approvals(t.Context())
	if err != nil || len(list) != 1 || list[0].Action != cmd || list[0].RunID != run {
		t.Errorf("API approval: %+v, %v; want the raw action", list, err)
	}
	if got := visible.String("a\u202eb\u2066c\u200dd\ufeffe\x1bf\ng"); got != `a\u202eb\u2066c\u200dd\ufeffe\x1bf`+"\ng" {
		t.Errorf("visible.String() = %q", got)
	}
}

// Token names are people's names: no control or invisible characters, and
// nothing that looks like one of Keel's own principals.
func TestTokenNames(t *testing.T) {
	e := newEnv(t, nil)
	for _, name := range []string{"eve\x1b[2K\rroot", "keel.timeout", "Keel-cli", "keel serve", "ali\u202ece", "a\u200bb", "x\ny", strings.Repeat("n", 101),
		// Look-alikes: a Cyrillic е, fullwidth and mathematical letters.
		"k\u0435el.timeout", "\uff2bEEL.timeout", "\U0001d424eel-cli", "\uff4b\uff45\uff45\uff4c\uff0etimeout", "P\u0430ul"} {
		_, err := e.admin.CreateToken(t.Context(), &api.CreateToken{Name: name, Scopes: []string{api.ScopeRunsRead}})
		if !client.IsCode(err, api.CodeInvalidRequest) {
			t.Errorf("CreateToken(%q) = %v, want invalid_request", name, err)
		}
		if _, err := e.svc.Tokens().Create(t.Context(), &token.Params{Name: name, Scopes: []string{api.ScopeRunsRead}}); err == nil {
			t.Errorf("Tokens.Create(%q): no error", name)
		}
	}
	for _, name := range []string{"eve", "Ada Lovelace <ada@example.com>", "zoë", "keelan", "Алёна", "José Núñez", "李雷", "ci-bot 2"} {
		if _, err := e.admin.CreateToken(t.Context(), &api.CreateToken{Name: name, Scopes: []string{api.ScopeRunsRead}}); err != nil {
			t.Errorf("CreateToken(%q) = %v", name, err)
		}
	}
}

// TestTokenScopes: a token asked for without a scope gets runs:read, as
// keel tokens create does; a scope given twice is stored once; an unknown
// scope is refused in plain words (report 15, R10 and R16).
func TestTokenScopes(t *testing.T) {
	e := newEnv(t, nil)
	for _, c := range []struct {
		scopes, want []string
	}{
		{nil, []string{api.ScopeRunsRead}},
		{[]string{api.ScopeRunsRead, api.ScopeRunsRead}, []string{api.ScopeRunsRead}},
		{[]string{api.ScopeRunsWrite, " runs:read", api.ScopeRunsWrite}, []string{api.ScopeRunsWrite, api.ScopeRunsRead}},
	} {
		tok, err := e.admin.CreateToken(t.Context(), &api.CreateToken{Name: "ci", Scopes: c.scopes})
		if err != nil {
			t.Errorf("CreateToken(%q) = %v", c.scopes, err)
			continue
		}
		if !slices.Equal(tok.Scopes, c.want) {
			t.Errorf("CreateToken(%q): scopes %q, want %q", c.scopes, tok.Scopes, c.want)
		}
	}
	_, err := e.admin.CreateToken(t.Context(), &api.CreateToken{Name: "ci", Scopes: []string{"runs:reed"}})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeInvalidRequest || !strings.HasPrefix(ae.Message, `unknown scope "runs:reed"`) {
		t.Errorf("CreateToken(runs:reed) = %v, want invalid_request starting with unknown scope", err)
	}
}

// Signing in: a link carries a one-time code, never the token; following
// it shows whom it signs in as and changes nothing until the person
// presses the button (a same-site POST), so a page on another site that
// sends a signed-in browser there cannot replace the session.
func TestSignInWithOneTimeCode(t *testing.T) {
	clock := &fakeClock{t: time.Now()}
	e := newEnv(t, &envOptions{clock: clock.now})
	writer := e.newToken("wendy", nil, api.ScopeRunsWrite)
	// A token in a link is refused.
	_, body, resp := e.uiResp(http.MethodGet, "/ui/login?token="+url.QueryEscape(writer), "", nil, "cross-site")
	if len(resp.Cookies()) > 0 || !strings.Contains(body, "not accepted in links") {
		t.Errorf("GET ?token= set %v:\n%s", resp.Cookies(), body)
	}
	code, err := e.h.LoginCode(t.Context(), writer)
	if err != nil {
		t.Fatal(err)
	}
	// A cross-site navigation to the link while ada is signed in.
	_, body, resp = e.uiResp(http.MethodGet, "/ui/login?code="+code, e.secret, nil, "cross-site")
	if len(resp.Cookies()) > 0 {
		t.Errorf("GET ?code= set a cookie: %v", resp.Cookies())
	}
	for _, want := range []string{`id="code-for">wendy<`, `You are signed in as <strong>ada</strong>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the sign-in page lacks %q:\n%s", want, body)
		}
	}
	form := url.Values{"code": {code}, "next": {"/ui/runs"}}
	if status, _, resp := e.uiResp(http.MethodPost, "/ui/login", e.secret, form, "cross-site"); status != http.StatusForbidden || len(resp.Cookies()) > 0 {
		t.Errorf("a cross-site POST: %d %v, want 403 and no cookie", status, resp.Cookies())
	}
	status, _, resp := e.uiResp(http.MethodPost, "/ui/login", e.secret, form, "same-origin")
	if status != http.StatusSeeOther || len(resp.Cookies()) != 1 || !resp.Cookies()[0].HttpOnly || resp.Cookies()[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("the button: %d %v, want a redirect setting a session cookie", status, resp.Cookies())
	}
	// The cookie is a session, not the token, and it ends: at sign-out,
	// and 12 hours after sign-in.
	session := resp.Cookies()[0]
	if strings.Contains(session.Value, writer) || strings.HasPrefix(session.Value, "keel_") || session.MaxAge > 12*3600 {
		t.Errorf("the session cookie %v holds the token or outlives 12 hours", session)
	}
	get := func(c *http.Cookie) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, e.srv.URL+"/ui/runs", nil)
		req.AddCookie(c)
		hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		r, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	if code, body := get(session); code != http.StatusOK || !strings.Contains(body, "wendy") {
		t.Errorf("the session: %d, want wendy's runs page", code)
	}
	if code, _ := get(&http.Cookie{Name: session.Name, Value: writer}); code != http.StatusSeeOther {
		t.Errorf("the raw token as the cookie: %d, want the sign-in redirect", code)
	}
	other, err := e.h.Session(t.Context(), writer)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.srv.URL+"/ui/logout", nil)
	out.Header.Set("Sec-Fetch-Site", "same-origin")
	out.AddCookie(other)
	if r, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(out); err == nil {
		r.Body.Close()
	}
	if code, _ := get(other); code != http.StatusSeeOther {
		t.Errorf("a session after sign-out: %d, want the sign-in redirect", code)
	}
	defer func() {
		clock.add(12*time.Hour + time.Minute)
		if code, _ := get(session); code != http.StatusSeeOther {
			t.Errorf("a session after 12 hours: %d, want the sign-in redirect", code)
		}
	}()
	if status, _ := e.uiDo(http.MethodPost, "/ui/login", "", form, "same-origin"); status != http.StatusUnauthorized {
		t.Errorf("a used code: %d, want 401", status)
	}
	late, err := e.h.LoginCode(t.Context(), writer)
	if err != nil {
		t.Fatal(err)
	}
	clock.add(16 * time.Minute)
	if status, _ := e.uiDo(http.MethodPost, "/ui/login", "", url.Values{"code": {late}}, "same-origin"); status != http.StatusUnauthorized {
		t.Errorf("an expired code: %d, want 401", status)
	}
	if _, err := e.h.LoginCode(t.Context(), "keel_nosuch_token"); err == nil {
		t.Errorf("LoginCode of a bad token: no error")
	}
}
