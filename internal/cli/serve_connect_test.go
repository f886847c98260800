package cli_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/internal/oauthtest"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// connectFixture is a keel serve process with a vault key, the real
// zitadel OP registered as provider "op", an assistant agent "helper",
// and a resource server at the OP's mercy (it introspects every token).
type connectFixture struct {
	db, ws, base, hostPort string
	op                     *oauthtest.OP
	s                      *serveProc
	outputs                *bytes.Buffer
	// served lists the requests the resource server accepted ("METHOD
	// PATH"), and tokens the distinct tokens they carried (by hash).
	mu     sync.Mutex
	served []string
	tokens map[string]bool
}

// newConnectFixture makes the fixture; before, if given, runs after the
// test's KEEL_HOME is set and before keel serve starts.
func newConnectFixture(t *testing.T, before ...func()) *connectFixture {
	t.Helper()
	f := &connectFixture{db: setup(t), ws: t.TempDir(), op: oauthtest.Start(t), outputs: &bytes.Buffer{}, tokens: map[string]bool{}}
	for _, fn := range before {
		fn()
	}
	rs := httptest.NewServer(f.op.ResourceServer(func(w http.ResponseWriter, r *http.Request, in *oauthtest.Introspection) {
		f.mu.Lock()
		f.served = append(f.served, r.Method+" "+r.URL.Path)
		f.tokens[credential.TokenHash(r.Header.Get("Authorization"))] = true
		f.mu.Unlock()
		fmt.Fprintf(w, `{"profile":%q,"scope":%q,"echo":%q}`, in.Username, in.Scope, r.Header.Get("Authorization"))
	}))
	t.Cleanup(rs.Close)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(rs.URL, "http://"))
	f.base, f.hostPort = "http://localhost:"+port, "localhost:"+port
	f.keel(t, 0, "auth", "key", "generate")
	f.keel(t, 0, "auth", "providers", "add", "op", "--issuer", f.op.Issuer, "--client-id", oauthtest.NativeClient,
		"--scope", "openid", "--scope", "offline_access", "--resource", f.base+"/api")
	f.keel(t, 0, "agents", "create", "helper", "--kind", "assistant")
	f.s = startServe(t)
	return f
}

func (f *connectFixture) keel(t *testing.T, want int, args ...string) string {
	t.Helper()
	code, out, errOut := keel(t, args...)
	f.outputs.WriteString(out + errOut)
	if code != want {
		t.Fatalf("keel %s = %d, want %d\n%s%s", strings.Join(args, " "), code, want, out, errOut)
	}
	return out
}

// startWaitingRun creates a run through the API whose first call needs
// ann's grant, and returns it once it waits.
func (f *connectFixture) startWaitingRun(t *testing.T) *api.Run {
	t.Helper()
	traj := writeTrajectory(t, "read my profile",
		[]fcall{{"http_request", map[string]any{"url": f.base + "/api/me"}}},
		[]fcall{sh("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo ok")},
	)
	c := f.s.apiClient(t)
	run, err := c.CreateRun(t.Context(), &api.CreateRun{Model: "replay:" + traj, Workspace: f.ws, Agent: "helper", OnBehalfOf: "ann",
		Network: []string{f.hostPort}})
	if err != nil {
		t.Fatal(err)
	}
	untilStopped(t, c, run.ID, 1)
	run, err = c.Run(t.Context(), run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != "paused" || len(run.AuthWaits) != 1 {
		t.Fatalf("run %s: status %s, auth waits %+v\n%s", run.ID, run.Status, run.AuthWaits, f.s.stderr)
	}
	if w := run.AuthWaits[0]; w.Provider != "op" || w.Agent != "helper" || w.User != "ann" || w.Reason != "missing" {
		t.Fatalf("auth wait = %+v", w)
	}
	return run
}

// api calls the server with the saved admin token (or tok).
func (f *connectFixture) api(t *testing.T, method, path, tok string, out any) int {
	t.Helper()
	if tok == "" {
		tok = f.s.savedToken(t)
	}
	req, _ := http.NewRequestWithContext(t.Context(), method, f.s.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	f.outputs.Write(b)
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return resp.StatusCode
}

// finish checks that the run completed with ann's token, and that no
// token the OP issued is anywhere Keel writes: the database and its
// WAL, the server's log, every output, the workspace and KEEL_HOME.
func (f *connectFixture) finish(t *testing.T, id string) {
	t.Helper()
	c := f.s.apiClient(t)
	untilStopped(t, c, id, 1)
	run, err := c.Run(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != "completed" {
		t.Fatalf("run %s: %s %s %s\n%s", id, run.Status, run.Reason, run.Message, f.s.stderr)
	}
	st, _ := loadRun(t, f.db, id)
	call := st.Turns[0].Calls[0]
	if call.Finished == nil || call.Finished.IsError || !strings.Contains(call.Finished.Content, `"scope":"offline_access openid"`) ||
		!strings.Contains(call.Finished.Content, "[REDACTED]") || call.Attempts != 1 {
		t.Fatalf("the http_request call: %+v (attempts %d)", call.Finished, call.Attempts)
	}
	out := f.keel(t, 0, "audit", "calls", "--run", id)
	for _, want := range []string{call.ID, "helper", "ann", "GET " + f.base + "/api/me", "offline_access openid", "allow"} {
		if !strings.Contains(out, want) {
			t.Errorf("audit calls lacks %q:\n%s", want, out)
		}
	}
	f.canary(t)
}

// canary searches every token the OP issued in the database and its WAL,
// the server's log, every output, the workspace and KEEL_HOME, and
// returns how many it searched and how many hits there were (each hit
// is an error).
func (f *connectFixture) canary(t *testing.T) (tokens, files, hits int) {
	t.Helper()
	issued := f.op.Issued()
	if len(issued) < 2 {
		t.Fatalf("the OP issued %d tokens", len(issued))
	}
	hay := map[string][]byte{"outputs": f.outputs.Bytes(), "serve's log": []byte(f.s.stderr.String())}
	for _, dir := range []string{f.ws, os.Getenv("KEEL_HOME")} {
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				b, _ := os.ReadFile(p)
				hay[p] = b
			}
			return nil
		})
	}
	for _, tok := range issued {
		for where, b := range hay {
			if bytes.Contains(b, []byte(tok)) {
				hits++
				t.Errorf("a token the OP issued (%d bytes) is in %s", len(tok), where)
			}
		}
	}
	t.Logf("canary: %d tokens searched in %d files, the outputs and the server's log: %d hits", len(issued), len(hay)-2, hits)
	return len(issued), len(hay) - 2, hits
}

// Connect through the API, without a browser or the command line: POST
// .../auth/{call}/connect returns the authorization URL (state bound to
// the run and call), the person signs in at the OP, the OP redirects to
// the server's callback, which stores the grant and executes the run.
// A replayed or forged callback, another user's connect, and a connect
// of a call that waits for nothing are refused.
func TestServeConnectThroughAPI(t *testing.T) {
	f := newConnectFixture(t)
	run := f.startWaitingRun(t)
	call := run.AuthWaits[0].CallID
	var waits api.AuthWaitList
	if code := f.api(t, "GET", "/v1/auth/waits", "", &waits); code != 200 || len(waits.Waits) != 1 || waits.Waits[0].RunID != run.ID {
		t.Fatalf("GET /v1/auth/waits = %d %+v", code, waits)
	}
	// Bob may not connect ann's grant: whoever consents gives the agent
	// their account.
	nt, err := f.s.apiClient(t).CreateToken(t.Context(), &api.CreateToken{Name: "bob", Scopes: []string{api.ScopeApprovalsWrite}})
	if err != nil {
		t.Fatal(err)
	}
	path := "/v1/runs/" + run.ID + "/auth/" + url.PathEscape(call) + "/connect"
	if code := f.api(t, "POST", path, nt.Secret, nil); code != http.StatusForbidden {
		t.Errorf("bob's connect of ann's grant = %d, want 403", code)
	}
	if code := f.api(t, "POST", "/v1/runs/"+run.ID+"/auth/nosuchcall/connect", "", nil); code != http.StatusConflict {
		t.Errorf("connect of a call that waits for nothing = %d, want 409", code)
	}
	var st api.AuthStarted
	if code := f.api(t, "POST", path, "", &st); code != 200 {
		t.Fatalf("POST connect = %d", code)
	}
	if st.RedirectURL != f.s.url+"/v1/auth/callback" || st.RunID != run.ID || st.CallID != call || !strings.Contains(st.URL, "code_challenge_method=S256") {
		t.Errorf("connect answered %+v", st)
	}
	// A forged state changes nothing.
	resp, err := http.Get(f.s.url + "/v1/auth/callback?state=forged&code=x&iss=" + url.QueryEscape(f.op.Issuer))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("callback with a forged state = %s", resp.Status)
	}
	cb, err := oauthtest.Login(t.Context(), st.URL, f.op.User(), oauthtest.Password)
	if err != nil {
		t.Fatal(err)
	}
	// A response from another issuer (a mix-up, RFC 9207) is refused
	// before its code is redeemed; the example OP sends no iss itself.
	// (This one started from the command line, with --server.)
	out := f.keel(t, 0, "--server", f.s.url, "auth", "waits")
	if !strings.Contains(out, "run "+run.ID+" call "+call) || !strings.Contains(out, "keel --server "+f.s.url+" auth connect --run "+run.ID) {
		t.Errorf("keel --server auth waits = %q", out)
	}
	out = f.keel(t, 0, "--server", f.s.url, "auth", "connect", "--run", run.ID)
	if !strings.Contains(out, "the server completes it at "+f.s.url+"/v1/auth/callback") {
		t.Errorf("keel --server auth connect = %q", out)
	}
	state := regexp.MustCompile(`[?&]state=([^&\s]+)`).FindStringSubmatch(out)
	resp, err = http.Get(f.s.url + "/v1/auth/callback?code=x&iss=" + url.QueryEscape("http://evil.test/") + "&state=" + state[1])
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(page), "wrong issuer") {
		t.Errorf("callback from another issuer = %s: %s", resp.Status, page)
	}
	get := func() (int, string) {
		resp, err := http.Get(cb.String())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		f.outputs.Write(b)
		return resp.StatusCode, string(b)
	}
	if code, page := get(); code != 200 || !strings.Contains(page, "is connected for helper acting for ann") || !strings.Contains(page, run.ID[:8]) {
		t.Fatalf("callback = %d:\n%s", code, page)
	}
	if code, page := get(); code != http.StatusBadRequest || !strings.Contains(page, "used already") {
		t.Errorf("the same response again = %d:\n%s", code, page)
	}
	f.finish(t, run.ID)
	if code := f.api(t, "GET", "/v1/auth/waits", "", &waits); code != 200 || len(waits.Waits) != 0 {
		t.Errorf("after connect: waits %+v", waits)
	}
	// Revoking the agent through the API revokes its grants, as keel
	// agents revoke does on the journal.
	if _, err := f.s.apiClient(t).RevokeAgent(t.Context(), "helper", "left"); err != nil {
		t.Fatalf("revoke helper through the API: %v", err)
	}
	if out := f.keel(t, 0, "auth", "list", "--json"); !strings.Contains(out, `"agent":"helper"`) || !strings.Contains(out, `"status":"revoked"`) || strings.Contains(out, `"status":"active"`) {
		t.Errorf("the revoked agent's grants:\n%s", out)
	}
}

// The same from the web UI, in headless Chromium: the inbox shows the
// wait with a Connect button; the button leads to the OP's own login
// page; after signing in there, the OP sends the browser to the server's
// callback, which says the provider is connected and links the run,
// whose timeline then shows it completed.
func TestServeConnectInBrowser(t *testing.T) {
	f := newConnectFixture(t)
	run := f.startWaitingRun(t)
	link := regexp.MustCompile(`sign in to the web UI:\s+(\S+)`).FindStringSubmatch(f.s.stderr.String())
	if link == nil {
		t.Fatalf("keel serve printed no sign-in link:\n%s", f.s.stderr)
	}
	ctx, cancel := testenv.Browser(t)
	defer cancel()
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	card := `section.authwait[data-run="` + run.ID + `"]`
	var connected, resumed string
	if err := chromedp.Do(ctx,
		chromedp.Navigate(link[1]),
		chromedp.Click(css(`#sign-in`)),
		chromedp.WaitVisible(css(`#runrows`)), // signed in: the runs page
		chromedp.Navigate(f.s.url+"/ui/approvals"),
	); err != nil {
		t.Fatalf("sign in: %v\n%s", err, f.s.stderr)
	}
	// The inbox refreshes itself, replacing its cards: find the card and
	// press its button in the page, in one step, once it is there.
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`(() => { const b = document.querySelector('`+card+` button.connect'); if (!b) return false; setTimeout(() => b.click(), 0); return true })()`)); err != nil {
		t.Fatalf("press Connect: %v\n%s", err, f.s.stderr)
	}
	if err := chromedp.Do(ctx,
		// The OP's login page.
		chromedp.WaitVisible(css(`#username`)),
		chromedp.SendKeys(css(`#username`), f.op.User()),
		chromedp.SendKeys(css(`#password`), oauthtest.Password),
		chromedp.Click(css(`button[type=submit]`)),
		// Back at keel serve.
		chromedp.WaitVisible(css(`#connected`)),
	); err != nil {
		t.Fatalf("connect in the browser: %v\n%s", err, f.s.stderr)
	}
	// Its text, once there (read at once after WaitVisible, it was empty
	// once under load).
	connected, _ = chromedp.Run(ctx, chromedp.Poll[string](`(document.querySelector('#connected') || {}).textContent || ''`))
	if err := chromedp.Do(ctx,
		chromedp.Click(css(`a.resumed`)),
		chromedp.WaitVisible(css(`#timeline tr.ev.end.completed`)),
	); err != nil {
		t.Fatalf("connect in the browser: %v\n%s", err, f.s.stderr)
	}
	resumed, _ = chromedp.Run(ctx, chromedp.Location())
	if !strings.Contains(connected, "op is connected for helper acting for ann") || !strings.HasSuffix(resumed, "/ui/runs/"+run.ID) {
		t.Errorf("callback page: %q; then at %q", connected, resumed)
	}
	f.outputs.WriteString(connected)
	st, evs := loadRun(t, f.db, run.ID)
	if st.Status != journal.StatusCompleted {
		t.Fatalf("run %s", st.Status)
	}
	var by string
	for _, e := range evs {
		if e.Type == journal.AuthResolved {
			by = string(e.Payload)
		}
	}
	if !strings.Contains(by, `"grant":"grant_`) {
		t.Errorf("auth.resolved = %s", by)
	}
	f.finish(t, run.ID)
}
