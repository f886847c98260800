package server_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/internal/demo"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
	"github.com/keel-run/keel/service"
)

// The demo run asks before its edit: it pauses, shows in the inbox with
// the raw action, and completes once a person approves; the journal names
// the approver and the action stream records who did what.
func TestDemoRunApprovedThroughAPI(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	bob := e.token("bob", api.ScopeRunsRead, api.ScopeApprovalsWrite)
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	paused := e.waitStop(run.ID, 1)
	if paused.Type != journal.ApprovalRequested {
		t.Fatalf("demo run stopped with %s, want approval.requested", paused.Type)
	}
	list, err := bob.Approvals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].RunID != run.ID || list[0].Tool != "edit_file" || !strings.Contains(string(list[0].Arguments), "text.split()") {
		t.Fatalf("Approvals() = %+v, want the demo's edit_file call", list)
	}
	got, err := bob.Approve(ctx, run.ID, list[0].CallID, &api.Decide{Reason: "looks right"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Pending) != 0 {
		t.Errorf("Approve() run still pending: %+v", got.Pending)
	}
	end := e.waitStop(run.ID, paused.Seq+1)
	if end.Type != journal.RunCompleted {
		t.Fatalf("after approval the run ended with %s", end.Type)
	}
	var resolved *agent.ApprovalResolved
	for _, ev := range e.events(run.ID) {
		if ev.Type == journal.ApprovalResolved {
			v, _ := agent.Decode(&ev)
			resolved = v.(*agent.ApprovalResolved)
		}
	}
	if resolved == nil || resolved.By != "bob" || resolved.Decision != policy.Allow || resolved.Reason != "looks right" {
		t.Errorf("approval.resolved = %+v, want allow by bob", resolved)
	}
	final, err := bob.Run(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if final.Status != "completed" || final.Steps != 5 || final.Reason != "answer" || final.Events != end.Seq || final.Agent != "keel-demo" {
		t.Errorf("Run() = %+v", final)
	}
	// Who did what, in the action stream.
	actions := e.events(service.ActionStream)
	var who []string
	for _, ev := range actions {
		var a struct {
			By     string `json:"by"`
			Action string `json:"action"`
			RunID  string `json:"run_id"`
		}
		if err := json.Unmarshal(ev.Payload, &a); err != nil {
			t.Fatal(err)
		}
		if a.RunID == run.ID {
			who = append(who, a.By+" "+a.Action)
		}
	}
	if diff := cmp.Diff([]string{"ada run.create", "bob approval.allow"}, who); diff != "" {
		t.Errorf("actions on the run (-want +got):\n%s", diff)
	}
}

// A denial reaches the model as the call's result, with the reason.
func TestDenyGivesTheModelTheReason(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	paused := e.waitStop(run.ID, 1)
	list, err := e.admin.Approvals(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("Approvals() = %v, %v", list, err)
	}
	if _, err := e.admin.Deny(ctx, run.ID, list[0].CallID, &api.Decide{Reason: "do not touch textstats.py"}); err != nil {
		t.Fatal(err)
	}
	e.waitStop(run.ID, paused.Seq+1)
	var result string
	for _, ev := range e.events(run.ID) {
		if v, _ := agent.Decode(&ev); v != nil {
			if f, ok := v.(*agent.ToolFinished); ok && f.CallID == list[0].CallID {
				result = f.Content
			}
		}
	}
	if !strings.Contains(result, "a person denied this call: do not touch textstats.py") {
		t.Errorf("denied call's result = %q", result)
	}
	// A second decision on the same call is a conflict with its code.
	_, err = e.admin.Approve(ctx, run.ID, list[0].CallID, nil)
	if !client.IsCode(err, api.CodeNoApproval) {
		t.Errorf("approving a decided call: %v, want %s", err, api.CodeNoApproval)
	}
}

func TestAuthAndScopes(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	reader := e.token("rita", api.ScopeRunsRead)
	anon := e.client("")
	bogus := e.client("keel_nosuchid_secret")
	for _, tt := range []struct {
		name string
		call func() error
		code string
	}{
		{"no token", func() error { _, err := anon.Runs(ctx, nil); return err }, api.CodeUnauthenticated},
		{"unknown token", func() error { _, err := bogus.Runs(ctx, nil); return err }, api.CodeUnauthenticated},
		{"reader cannot create", func() error { _, err := reader.CreateRun(ctx, &api.CreateRun{Demo: true}); return err }, api.CodeForbidden},
		{"reader cannot approve", func() error { _, err := reader.Approve(ctx, "r", "c", nil); return err }, api.CodeForbidden},
		{"reader cannot make tokens", func() error {
			_, err := reader.CreateToken(ctx, &api.CreateToken{Name: "x", Scopes: []string{"admin"}})
			return err
		}, api.CodeForbidden},
		{"reader can list", func() error { _, err := reader.Runs(ctx, nil); return err }, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if tt.code == "" {
				if err != nil {
					t.Errorf("err = %v, want nil", err)
				}
				return
			}
			if !client.IsCode(err, tt.code) {
				t.Errorf("err = %v, want code %s", err, tt.code)
			}
		})
	}
	// A revoked token stops working at once in this server.
	tok, err := e.admin.CreateToken(ctx, &api.CreateToken{Name: "temp", Scopes: []string{api.ScopeRunsRead}})
	if err != nil {
		t.Fatal(err)
	}
	temp := e.client(tok.Secret)
	if _, err := temp.Whoami(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := temp.Whoami(ctx); !client.IsCode(err, api.CodeUnauthenticated) {
		t.Errorf("revoked token: %v, want unauthenticated", err)
	}
	// The secret is not stored; only its digest is.
	for _, ev := range e.events(token.StreamID) {
		if strings.Contains(string(ev.Payload), tok.Secret) || strings.Contains(string(ev.Payload), e.secret) {
			t.Errorf("token stream event %d holds a secret: %s", ev.Seq, ev.Payload)
		}
	}
}

// A browser's cookie authenticates GETs, but a state-changing request
// from another site is refused: Sec-Fetch-Site decides, else Origin,
// else Referer, and a cookie request with none of them is refused. A
// bearer token (an API client, no cookie) needs none of them.
func TestCookieRefusesCrossSite(t *testing.T) {
	e := newEnv(t, nil)
	self := strings.TrimPrefix(e.srv.URL, "http://")
	const ok, refused = http.StatusBadRequest, http.StatusForbidden // authenticated: the empty body is then invalid
	for _, tt := range []struct {
		name                  string
		site, origin, referer string
		bearer                bool
		want                  int
	}{
		{name: "same origin", site: "same-origin", want: ok},
		{name: "cross site", site: "cross-site", want: refused},
		{name: "same site (another origin)", site: "same-site", want: refused},
		{name: "none", site: "none", want: refused},
		{name: "Sec-Fetch-Site over Origin", site: "cross-site", origin: e.srv.URL, want: refused},
		{name: "Origin of this server", origin: e.srv.URL, want: ok},
		{name: "Origin of another", origin: "http://evil.example", want: refused},
		{name: "Origin null", origin: "null", want: refused},
		{name: "Origin over Referer", origin: "http://evil.example", referer: e.srv.URL + "/ui/runs", want: refused},
		{name: "Referer of this server", referer: e.srv.URL + "/ui/runs", want: ok},
		{name: "Referer of another", referer: "http://evil.example/ui/runs", want: refused},
		{name: "Referer naming this host as a user", referer: "http://" + self + "@evil.example/", want: refused},
		{name: "Referer not http", referer: "file:///x", want: refused},
		{name: "nothing", want: refused},
		{name: "bearer, nothing", bearer: true, want: ok},
		{name: "bearer, cross site", bearer: true, site: "cross-site", want: ok},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.srv.URL+"/v1/runs", nil)
			if tt.bearer {
				req.Header.Set("Authorization", "Bearer "+e.secret)
			} else {
				req.AddCookie(e.cookie(e.secret))
			}
			for k, v := range map[string]string{"Sec-Fetch-Site": tt.site, "Origin": tt.origin, "Referer": tt.referer} {
				if v != "" {
					req.Header.Set(k, v)
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.want)
			}
		})
	}
}

// Errors have one JSON shape with a stable code, for every route.
func TestErrorShape(t *testing.T) {
	e := newEnv(t, nil)
	for _, tt := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"unknown run", "GET", "/v1/runs/nosuchrun", "", 404, api.CodeNotFound},
		{"system stream is not a run", "GET", "/v1/runs/" + token.StreamID, "", 404, api.CodeNotFound},
		{"unknown route", "GET", "/v1/nothing", "", 404, api.CodeNotFound},
		{"wrong method", "DELETE", "/v1/runs", "", 405, api.CodeInvalidRequest},
		{"bad json", "POST", "/v1/runs", "{", 400, api.CodeInvalidRequest},
		{"unknown field", "POST", "/v1/runs", `{"tsak": "x"}`, 400, api.CodeInvalidRequest},
		{"no workspace", "POST", "/v1/runs", `{"task": "x", "model": "scripted:demo"}`, 400, api.CodeInvalidRequest},
		{"bad timeout", "POST", "/v1/runs", `{"task": "x", "limits": {"timeout": "soon"}}`, 400, api.CodeInvalidRequest},
		{"bad status filter", "GET", "/v1/runs?status=sleeping", "", 400, api.CodeInvalidRequest},
		{"bad from", "GET", "/v1/runs/x/events?from=0", "", 404, api.CodeNotFound},
		{"no such token", "POST", "/v1/tokens/nope/revoke", "", 404, api.CodeNotFound},
		{"bad scope", "POST", "/v1/tokens", `{"name": "x", "scopes": ["root"]}`, 400, api.CodeInvalidRequest},
		{"unknown agent", "POST", "/v1/agents/nobody/revoke", "", 404, api.CodeNotFound},
		{"restore unknown agent", "POST", "/v1/agents/nobody/restore", "", 404, api.CodeNotFound},
		{"restore agent not revoked", "POST", "/v1/agents/keel-cli/restore", "", 400, api.CodeInvalidRequest},
		{"policy file of no text", "POST", "/v1/runs", `{"task": "x", "policy": "default", "policy_file": "p.toml"}`, 400, api.CodeInvalidRequest},
		{"policy file named as Keel's", "POST", "/v1/runs", `{"task": "x", "policy": "permit (principal, action, resource);", "policy_file": "keel:default"}`, 400, api.CodeInvalidRequest},
		{"bad agent kind", "POST", "/v1/agents", `{"name": "x", "kind": "robot"}`, 400, api.CodeInvalidRequest},
		{"bad remember", "POST", "/v1/runs/x/approvals/c/approve", `{"remember": "forever"}`, 404, api.CodeNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), tt.method, e.srv.URL+tt.path, strings.NewReader(tt.body))
			req.Header.Set("Authorization", "Bearer "+e.secret)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body api.ErrorBody
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatalf("body is not an error object: %v", err)
			}
			if resp.StatusCode != tt.status || body.Error.Code != tt.code || body.Error.Status != tt.status || body.Error.Message == "" {
				t.Errorf("%s %s = %d %+v, want %d %s", tt.method, tt.path, resp.StatusCode, body.Error, tt.status, tt.code)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
}

// Cancelling a run that waits for approval gives the waiting call a
// result and ends the run canceled, naming who canceled it.
func TestCancelPausedRun(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	e.waitStop(run.ID, 1)
	got, err := e.admin.Cancel(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The run may still have been finishing its execution (then its
	// executor records the cancel) or already stopped (then the server
	// does, naming the person).
	if got.Status != "canceled" || (got.Message != "canceled by ada" && got.Message != "canceled by user") || len(got.Pending) != 0 {
		t.Errorf("Cancel() = %+v", got)
	}
	st, err := agent.Fold(run.ID, e.events(run.ID))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range st.Turns {
		for _, c := range tt.Calls {
			if c.Finished == nil {
				t.Errorf("call %s has no result after cancel", c.ID)
			}
		}
	}
	if _, err := e.admin.Cancel(ctx, run.ID); err != nil {
		t.Errorf("second cancel: %v, want the run unchanged", err)
	}
	if _, err := e.admin.Resume(ctx, run.ID, nil); err != nil {
		t.Errorf("resume of a canceled run: %v", err)
	}
}

// Cancelling an executing run stops its tool call and ends it canceled.
func TestCancelExecutingRun(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	e.models.set("test:sleep", modeltest.NewScripted([]modeltest.Turn{
		modeltest.Calls("wait", modeltest.Call("c1", "bash", map[string]string{"command": "sleep 600"})),
	}, nil))
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Task: "sleep", Model: "test:sleep", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e.waitType(run.ID, journal.ToolStarted)
	if _, err := e.admin.Cancel(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	end := e.waitStop(run.ID, 1)
	if end.Type != journal.RunCanceled {
		t.Errorf("run ended with %s, want run.canceled", end.Type)
	}
	st, err := agent.Fold(run.ID, e.events(run.ID))
	if err != nil {
		t.Fatal(err)
	}
	if c := st.LastTurn().Calls[0]; c.Finished == nil || !c.Finished.IsError {
		t.Errorf("the stopped call's result: %+v, want an error result", c.Finished)
	}
}

// Shutdown pauses executing runs (run.paused, reason shutdown) and Start
// on the same journal resumes them to completion.
func TestShutdownPausesAndStartResumes(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	e.models.set("test:slow", modeltest.NewScripted([]modeltest.Turn{
		modeltest.Calls("wait", modeltest.Call("c1", "bash", map[string]string{"command": "sleep 600"})),
		modeltest.Text("done after the restart"),
	}, nil))
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Task: "slow", Model: "test:slow", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e.waitType(run.ID, journal.ToolStarted)
	e2, resumed := e.restart()
	paused := journal.Event{}
	for _, ev := range e2.events(run.ID) {
		if ev.Type == journal.RunPaused {
			paused = ev
			break
		}
	}
	var end agent.RunEnded
	_ = json.Unmarshal(paused.Payload, &end)
	if end.Reason != "shutdown" {
		t.Fatalf("after shutdown: first pause %+v, want reason shutdown", end)
	}
	if diff := cmp.Diff([]string{run.ID}, resumed); diff != "" {
		t.Errorf("Start() resumed (-want +got):\n%s", diff)
	}
	final := e2.waitStop(run.ID, paused.Seq+1)
	if final.Type != journal.RunCompleted {
		t.Errorf("resumed run ended with %s", final.Type)
	}
}

// A server stopped while a run waits for approval leaves it paused; after
// a restart, an approval through the API completes it.
func TestRestartWhileWaitingForApproval(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	paused := e.waitStop(run.ID, 1)
	e2, resumed := e.restart()
	if len(resumed) != 0 {
		t.Errorf("Start() resumed %v; a run waiting for a person must stay paused", resumed)
	}
	list, err := e2.admin.Approvals(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("Approvals() after restart = %v, %v", list, err)
	}
	if _, err := e2.admin.Approve(ctx, run.ID, list[0].CallID, nil); err != nil {
		t.Fatal(err)
	}
	// The first server's shutdown may have journaled a run.paused after
	// the approval request (its execution was still winding down): wait
	// for the end of the run, not for the next stop.
	end := e2.waitFor(run.ID, func(ev journal.Event) bool {
		return ev.Seq > paused.Seq && journal.StatusOf(ev.Type).Terminal()
	})
	if end.Type != journal.RunCompleted {
		t.Errorf("run ended with %s", end.Type)
	}
}

// A fork copies events up to seq into a new run with its own hash chain,
// records where it came from, and executes from there.
func TestFork(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	paused := e.waitStop(run.ID, 1)
	src := e.events(run.ID)
	// Fork just before the approval was asked, into a copy of the
	// workspace path (the same directory here), and start it: it asks
	// again.
	var askSeq int64
	for _, ev := range src {
		if ev.Type == journal.ApprovalRequested {
			askSeq = ev.Seq
		}
	}
	fork, err := e.admin.Fork(ctx, run.ID, &api.ForkRun{Seq: askSeq - 1, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	if fork.ForkOf != run.ID+"@"+itoa(askSeq-1) || fork.ID == run.ID {
		t.Errorf("fork = %+v", fork)
	}
	e.waitType(fork.ID, journal.ApprovalRequested)
	got := e.events(fork.ID)
	// Event askSeq-1 is the gate's ask for a call without a result at the
	// fork point: the fork leaves it out and decides the call again.
	if src[askSeq-2].Type != journal.GateDecided {
		t.Fatalf("source event %d is %s, want gate.decided", askSeq-1, src[askSeq-2].Type)
	}
	copied := askSeq - 2
	for i := int64(1); i <= copied; i++ {
		a, b := src[i-1], got[i-1]
		if i > 1 && (a.Type != b.Type || string(a.Payload) != string(b.Payload) || !a.Time.Equal(b.Time)) {
			t.Errorf("fork event %d differs from the source's", i)
		}
		if a.Hash == b.Hash {
			t.Errorf("fork event %d has the source's hash; it must be sealed in the fork's own chain", i)
		}
	}
	if got[copied].Type != journal.RunResumed {
		t.Errorf("fork continues with %s, want run.resumed", got[copied].Type)
	}
	if got[copied+1].Type != journal.GateDecided {
		t.Errorf("after run.resumed the fork has %s, want the call decided again", got[copied+1].Type)
	}
	for _, tt := range []struct {
		name string
		req  *api.ForkRun
		code string
	}{
		{"seq past the end", &api.ForkRun{Seq: paused.Seq + 5}, api.CodeInvalidRequest},
		{"negative seq", &api.ForkRun{Seq: -1}, api.CodeInvalidRequest},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := e.admin.Fork(ctx, run.ID, tt.req); !client.IsCode(err, tt.code) {
				t.Errorf("Fork(%+v) = %v, want %s", tt.req, err, tt.code)
			}
		})
	}
}

// Runs list newest first with their summaries; system streams never show.
func TestListRuns(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	var ids []string
	for range 3 {
		run, err := e.admin.CreateRun(ctx, &api.CreateRun{Demo: true})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, run.ID)
		e.waitStop(run.ID, 1)
	}
	runs, err := e.admin.Runs(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range runs {
		got = append(got, r.ID)
		if r.Status != "paused" || len(r.Pending) != 1 || r.Steps != 3 {
			t.Errorf("run %s: %+v", r.ID, r)
		}
	}
	if diff := cmp.Diff([]string{ids[2], ids[1], ids[0]}, got); diff != "" {
		t.Errorf("Runs() (-want +got):\n%s", diff)
	}
	runs, err = e.admin.Runs(ctx, &client.RunsParams{Status: []string{"completed"}})
	if err != nil || len(runs) != 0 {
		t.Errorf("Runs(completed) = %v, %v", runs, err)
	}
	runs, err = e.admin.Runs(ctx, &client.RunsParams{Limit: 1})
	if err != nil || len(runs) != 1 || runs[0].ID != ids[2] {
		t.Errorf("Runs(limit 1) = %v, %v", runs, err)
	}
}

// The audit verification checks every journal and names a tampered one.
func TestVerifyAudit(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	e.waitStop(run.ID, 1)
	rep, err := e.admin.VerifyAudit(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Streams != 3 || rep.Events == 0 { // the run, tokens, actions
		t.Errorf("VerifyAudit() = %+v", rep)
	}
	// Runs are named as every route names them (a new user's report: a
	// prefix, the UI's short form or a typo "failed" the audit, 200
	// ok:false "no such journal"), system streams by their whole name.
	other, err := e.admin.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	e.waitStop(other.ID, 1)
	common := 0
	for common < len(run.ID) && run.ID[common] == other.ID[common] {
		common++
	}
	reader := e.client(e.newToken("auditor", nil, api.ScopeRunsRead))
	for _, ref := range []string{run.ID, run.ID[:common+1], run.ID[:4] + "…" + run.ID[len(run.ID)-6:], strings.ToUpper(run.ID[:common+2]), service.ActionStream} {
		rep, err := reader.VerifyAudit(ctx, &api.VerifyAudit{Runs: []string{ref}})
		want := run.ID
		if ref == service.ActionStream {
			want = ref
		}
		if err != nil || !rep.OK || len(rep.Journals) != 1 || rep.Journals[0].ID != want {
			t.Errorf("VerifyAudit(%q) = %+v, %v; want %s verified", ref, rep, err, want)
		}
	}
	for _, tt := range []struct {
		ref, code, msg string
	}{
		{"nosuchrun", api.CodeNotFound, `no run "nosuchrun"`},
		{run.ID[:common], api.CodeInvalidRequest, "matches 2 runs"},
		{"_keel.nosuch", api.CodeNotFound, `no journal stream "_keel.nosuch"`},
		{"_keel", api.CodeNotFound, `no run "_keel"`},
	} {
		rep, err := reader.VerifyAudit(ctx, &api.VerifyAudit{Runs: []string{run.ID, tt.ref}})
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != tt.code || !strings.Contains(ae.Message, tt.msg) {
			t.Errorf("VerifyAudit(%q) = %+v, %v; want %s %q", tt.ref, rep, err, tt.code, tt.msg)
		}
	}
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// An approval whose deadline passed gets the policy's default decision
// (deny), recorded by keel.timeout, once the server looks for expired
// approvals; the run goes on (and fails: its edit did not happen).
func TestApprovalDeadline(t *testing.T) {
	clock := &fakeClock{t: time.Now()}
	e := newEnv(t, &envOptions{clock: clock.now})
	ctx := t.Context()
	src := string(service.DemoPolicy().Source())
	src = strings.Replace(src, "[approval]\ndefault = \"deny\"", "[approval]\ndefault = \"deny\"\ntimeout = \"1h\"", 1)
	// The demo's project, model and policy, with a deadline (an admin's
	// policy; the demo run itself takes no policy).
	ws := t.TempDir()
	writeDemo(t, ws)
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Task: demo.Task, Model: "scripted:demo", Workspace: ws, Policy: src})
	if err != nil {
		t.Fatal(err)
	}
	asked := e.waitStop(run.ID, 1)
	if asked.Type != journal.ApprovalRequested {
		t.Fatalf("stopped with %s", asked.Type)
	}
	if ids, err := e.svc.ExpireApprovals(ctx); err != nil || len(ids) != 0 {
		t.Fatalf("ExpireApprovals() before the deadline = %v, %v", ids, err)
	}
	// The execution that journaled the request may still be ending, and
	// it reads the clock once more (to apply a deadline that passed): the
	// clock moves only once it has ended, else that execution may expire
	// the approval itself before ExpireApprovals looks, and
	// ExpireApprovals rightly submits nothing.
	e.waitIdle(run.ID)
	clock.add(2 * time.Hour)
	ids, err := e.svc.ExpireApprovals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{run.ID}, ids); diff != "" {
		t.Errorf("ExpireApprovals() (-want +got):\n%s", diff)
	}
	// Denied, the edit did not happen: the scripted model says so, and
	// the run fails rather than claiming the tests pass.
	if end := e.waitStop(run.ID, asked.Seq+1); end.Type != journal.RunFailed || !strings.Contains(string(end.Payload), "did not happen") {
		t.Fatalf("after the deadline the run stopped with %s %s, want run.failed saying the edit did not happen", end.Type, end.Payload)
	}
	for _, ev := range e.events(run.ID) {
		if ev.Type == journal.ApprovalResolved {
			v, _ := agent.Decode(&ev)
			if r := v.(*agent.ApprovalResolved); r.By != agent.ByTimeout || r.Decision != policy.Deny {
				t.Errorf("approval.resolved = %+v, want deny by %s", r, agent.ByTimeout)
			}
		}
	}
}

// The server's options configure the HTTP layer only: what runs are and
// how they execute is the service's, so no option is a callback into
// the process that serves.
func TestOptionsHaveNoCallbacks(t *testing.T) {
	typ := reflect.TypeFor[server.Options]()
	for i := range typ.NumField() {
		if f := typ.Field(i); f.Type.Kind() == reflect.Func {
			t.Errorf("server.Options.%s is a callback (%s)", f.Name, f.Type)
		}
	}
}
