package server_test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// lastEnded returns the payload of run id's newest event, which must be
// an end or a pause.
func (e *env) lastEnded(id string) (journal.Type, *agent.RunEnded) {
	e.t.Helper()
	evs := e.events(id)
	last := evs[len(evs)-1]
	v, err := agent.Decode(&last)
	if err != nil {
		e.t.Fatal(err)
	}
	r, ok := v.(*agent.RunEnded)
	if !ok {
		e.t.Fatalf("run %s ends with %s, not a stop", id, last.Type)
	}
	return last.Type, r
}

// A fork that is not started says so (paused, reason "forked") and stays
// so across a restart; it runs when someone resumes it. Started, it runs
// at once. A message without start is refused.
func TestUnstartedForkWaits(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	asked := e.waitStop(run.ID, 1)
	// Before the gate asked (event asked.Seq-1 is its decision, which a
	// fork would leave out: the call has no result yet): the fork would go
	// on by itself.
	at := asked.Seq - 2
	var forks []string
	for _, tt := range []struct {
		name string
		req  *api.ForkRun
	}{
		{"start omitted", &api.ForkRun{Seq: at}},
		{"start false", &api.ForkRun{Seq: at, Start: false}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fork, err := e.admin.Fork(ctx, run.ID, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if fork.Status != "paused" || fork.Reason != service.ReasonForked || fork.Executing || fork.Queued || fork.Events != at+1 {
				t.Errorf("unstarted fork = status %s, reason %q, executing %v, queued %v, %d events; want paused (forked) with %d events",
					fork.Status, fork.Reason, fork.Executing, fork.Queued, fork.Events, at+1)
			}
			typ, end := e.lastEnded(fork.ID)
			if typ != journal.RunPaused || end.Reason != service.ReasonForked || !strings.Contains(end.Message, "not started") {
				t.Errorf("the fork ends with %s %+v, want run.paused (forked, not started)", typ, end)
			}
			forks = append(forks, fork.ID)
		})
	}
	_, err = e.admin.Fork(ctx, run.ID, &api.ForkRun{Seq: at, Message: "go on"})
	wantAPIError(t, err, api.CodeInvalidRequest, "set start")

	// The web UI's Fork button: "start it" unchecked makes an unstarted
	// fork whose page offers Start; checked, the fork runs.
	ui := func(form url.Values) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/ui/runs/"+run.ID+"/fork", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		req.AddCookie(e.cookie(e.secret))
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/ui/runs/") {
			t.Fatalf("fork form: %d to %q", resp.StatusCode, loc)
		}
		return strings.TrimPrefix(loc, "/ui/runs/")
	}
	unstarted := ui(url.Values{"seq": {itoa(at)}})
	forks = append(forks, unstarted)
	page := e.page("/ui/runs/" + unstarted)
	if !strings.Contains(page, "not started") || !strings.Contains(page, `<button id="resume">Start</button>`) {
		t.Errorf("the unstarted fork's page shows no \"not started\" and Start button:\n%s", page)
	}
	// Its source as a link and an id every RUN argument takes (trial
	// 18, U6: "RUN@EVENT" was refused when pasted).
	if want := fmt.Sprintf(`<dt>Forked from</dt><dd><a href="/ui/runs/%s"><code>%s</code></a> at event %d</dd>`, run.ID, run.ID, at); !strings.Contains(page, want) {
		t.Errorf("the fork's page lacks %s", want)
	}
	started := ui(url.Values{"seq": {itoa(at)}, "start": {"1"}})
	if ev := e.waitType(started, journal.ApprovalRequested); ev.Seq <= at {
		t.Errorf("the started fork asked at %d", ev.Seq)
	}

	// A fork made without start by an older server: "running", with no
	// event past its fork point.
	legacy := e.journalRun(&agent.RunCreated{Task: "t", Model: "test:none", Workspace: t.TempDir(), MountPath: "/workspace", Sandbox: e.sandbox,
		Principal: identity.LocalAgent, Policy: agent.NewPolicyRef(e.policy), Labels: map[string]string{service.LabelForkOf: run.ID + "@2"}},
		draft(t, journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, Content: "thinking"}}))

	// A restart does not execute the unstarted forks.
	e2, resumed := e.restart()
	for _, r := range resumed {
		if r == legacy {
			t.Errorf("Start() executed the older server's unstarted fork %s", legacy)
		}
	}
	for _, id := range forks {
		for _, r := range resumed {
			if r == id {
				t.Errorf("Start() executed the unstarted fork %s", id)
			}
		}
		got, err := e2.admin.Run(ctx, id)
		if err != nil || got.Status != "paused" || got.Reason != service.ReasonForked || got.Events != at+1 {
			t.Errorf("after a restart the fork is %+v, %v; want still paused (forked) with %d events", got, err, at+1)
		}
	}
	// Resumed, it runs (to the demo's approval).
	if _, err := e2.admin.Resume(ctx, forks[0], nil); err != nil {
		t.Fatal(err)
	}
	if ev := e2.waitType(forks[0], journal.ApprovalRequested); ev.Seq <= at+1 {
		t.Errorf("the resumed fork asked at %d", ev.Seq)
	}
}

// page GETs a web UI page with the admin's cookie and returns its body.
func (e *env) page(path string) string {
	e.t.Helper()
	req, _ := http.NewRequestWithContext(e.t.Context(), http.MethodGet, e.srv.URL+path, nil)
	req.AddCookie(e.cookie(e.secret))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b)
}

// A fork never silently works in another person's workspace: a demo
// run's fork gets a fresh copy of the demo project; another run's fork
// keeps the workspace only for the person who started that run, and
// anyone else names it (to share it, under a root) or another.
func TestForkWorkspaces(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	bob := e.bound("bob", []string{identity.LocalAgent}, api.ScopeRunsWrite)
	carol := e.bound("carol", []string{identity.LocalAgent}, api.ScopeRunsWrite)
	dave := e.token("dave", api.ScopeRunsWrite) // bound to no agent: demos only

	demoRun, err := bob.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	e.waitStop(demoRun.ID, 1)
	e.models.set("test:idle", modeltest.NewScripted([]modeltest.Turn{modeltest.Text("done")}, nil))
	ws := t.TempDir()
	plain, err := bob.CreateRun(ctx, &api.CreateRun{Task: "t", Model: "test:idle", Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	e.waitStop(plain.ID, 1)
	resolvedWS, _ := filepath.EvalSymlinks(ws)

	for _, tt := range []struct {
		name string
		who  string
		src  string
		req  api.ForkRun
		// want is "fresh" (a new copy of the demo project), "same" (the
		// source's workspace), or an error's code and words.
		want, code, says string
	}{
		{name: "a demo fork by another token gets a fresh copy", who: "dave", src: demoRun.ID, want: "fresh"},
		{name: "a demo fork by its creator gets a fresh copy too", who: "bob", src: demoRun.ID, want: "fresh"},
		{name: "another person may not name the demo's workspace", who: "dave", src: demoRun.ID, req: api.ForkRun{Workspace: demoRun.Workspace},
			code: api.CodeForbidden, says: "belongs to the person who started it (bob)"},
		{name: "the demo's creator may name its workspace", who: "bob", src: demoRun.ID, req: api.ForkRun{Workspace: demoRun.Workspace}, want: "same"},
		{name: "the creator's fork keeps the workspace", who: "bob", src: plain.ID, want: "same"},
		{name: "another person's fork does not share it unasked", who: "carol", src: plain.ID,
			code: api.CodeInvalidRequest, says: "does not share another person's workspace"},
		{name: "another person may share it by naming it", who: "carol", src: plain.ID, req: api.ForkRun{Workspace: ws}, want: "same"},
		{name: "an admin does not share it unasked either", who: "ada", src: plain.ID,
			code: api.CodeInvalidRequest, says: "started by bob"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := map[string]*client.Client{"bob": bob, "carol": carol, "dave": dave, "ada": e.admin}[tt.who]
			req := tt.req
			req.Seq = 3
			fork, err := c.Fork(ctx, tt.src, &req)
			if tt.code != "" {
				wantAPIError(t, err, tt.code, tt.says)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			src, _ := e.admin.Run(ctx, tt.src)
			switch tt.want {
			case "fresh":
				if fork.Workspace == src.Workspace {
					t.Fatalf("the demo fork works in the source's workspace %s", src.Workspace)
				}
				if _, err := os.Stat(filepath.Join(fork.Workspace, "textstats.py")); err != nil {
					t.Errorf("the fork's workspace %s holds no demo project: %v", fork.Workspace, err)
				}
			case "same":
				if fork.Workspace != src.Workspace && fork.Workspace != resolvedWS {
					t.Errorf("the fork works in %s, want the source's %s", fork.Workspace, src.Workspace)
				}
			}
			if fork.CreatedBy != tt.who {
				t.Errorf("fork created by %q, want %s", fork.CreatedBy, tt.who)
			}
		})
	}
}

// A fork's duration counts from its own first event, not from the
// source's start: the copied events keep the source's times.
func TestForkDurationIsItsOwn(t *testing.T) {
	clock := &fakeClock{t: time.Now()}
	e := newEnv(t, &envOptions{clock: clock.now})
	ctx := t.Context()
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	asked := e.waitStop(run.ID, 1)
	clock.add(time.Hour)
	fork, err := e.admin.Fork(ctx, run.ID, &api.ForkRun{Seq: asked.Seq - 2})
	if err != nil {
		t.Fatal(err)
	}
	if fork.DurationMS != 0 {
		t.Errorf("a fork that has not started: duration %dms, want 0 (its own events are all at the fork's time)", fork.DurationMS)
	}
	clock.add(time.Minute)
	if _, err := e.admin.Resume(ctx, fork.ID, &api.ResumeRun{}); err != nil {
		t.Fatal(err)
	}
	e.waitStop(fork.ID, fork.Events+1)
	got, err := e.admin.Run(ctx, fork.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.DurationMS != 0 {
		t.Errorf("the fork resumed a minute after it was made, and no time passed while it ran: duration %dms, want 0 (neither its source's hour nor the minute it waited is its working time)", got.DurationMS)
	}
	list, err := e.admin.Runs(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list {
		if r.ID == fork.ID && r.DurationMS != got.DurationMS {
			t.Errorf("runs list: the fork's duration %dms, its page's %dms", r.DurationMS, got.DurationMS)
		}
	}
}

// A demo run is its creator's: any token may read it and fork it (to a
// fresh copy of the demo project), but only its creator or an admin may
// resume it, send it a message, rewind its files or cancel it, though
// every token acts as the shared demo agent.
func TestDemoRunIsItsCreators(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	bob := e.token("bob", api.ScopeRunsWrite)
	dave := e.token("dave", api.ScopeRunsWrite)
	carol := e.bound("carol", []string{identity.LocalAgent}, api.ScopeRunsWrite)

	demoRun, err := bob.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	e.waitStop(demoRun.ID, 1)
	before := len(e.events(demoRun.ID))
	const says = "is a demo run started by bob: only that person (or an admin) may resume, message, rewind or cancel it"
	for name, c := range map[string]*client.Client{"dave": dave, "carol": carol} {
		_, err := c.Resume(ctx, demoRun.ID, &api.ResumeRun{Message: "hi from " + name})
		wantAPIError(t, err, api.CodeForbidden, says)
		_, err = c.Resume(ctx, demoRun.ID, &api.ResumeRun{})
		wantAPIError(t, err, api.CodeForbidden, says)
		_, err = c.Rewind(ctx, demoRun.ID, &api.RewindRun{To: 2})
		wantAPIError(t, err, api.CodeForbidden, says)
		_, err = c.Cancel(ctx, demoRun.ID)
		wantAPIError(t, err, api.CodeForbidden, says)
		if _, err := c.Run(ctx, demoRun.ID); err != nil {
			t.Errorf("%s may not read the demo run: %v", name, err)
		}
	}
	if n := len(e.events(demoRun.ID)); n != before {
		t.Fatalf("refused requests changed the demo run: %d events, want %d", n, before)
	}
	// Its fork is the forker's own, to continue.
	fork, err := dave.Fork(ctx, demoRun.ID, &api.ForkRun{Seq: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dave.Cancel(ctx, fork.ID); err != nil {
		t.Errorf("dave may not cancel his own fork of the demo: %v", err)
	}
	// The creator and an admin may.
	if _, err := bob.Resume(ctx, demoRun.ID, &api.ResumeRun{Message: "go on"}); err != nil {
		t.Errorf("the demo's creator may not resume it: %v", err)
	}
	e.waitStop(demoRun.ID, int64(before+1))
	if _, err := e.admin.Cancel(ctx, demoRun.ID); err != nil {
		t.Errorf("an admin may not cancel the demo run: %v", err)
	}
}

// The fork of a demo run, made in a fresh directory of its own, is a
// copy of the demo run's repository at its start commit, as every fork
// in a directory of its own is (fresh-user trial 18, U1: it got a new
// demo project with a repository of its own, at another commit, and was
// said to be no repository at all).
func TestDemoForkCopiesItsRepository(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	demoRun, err := e.admin.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	e.waitStop(demoRun.ID, 1)
	v, err := agent.Decode(&e.events(demoRun.ID)[0])
	if err != nil {
		t.Fatal(err)
	}
	src := v.(*agent.RunCreated)
	if src.Git == nil {
		t.Fatal("the demo run recorded no git start")
	}
	fork, err := e.admin.Fork(ctx, demoRun.ID, &api.ForkRun{Seq: 3})
	if err != nil {
		t.Fatal(err)
	}
	if fork.Workspace == src.Workspace {
		t.Fatalf("the fork shares the demo's workspace %s", fork.Workspace)
	}
	if head := strings.TrimSpace(gitIn(t, fork.Workspace, "rev-parse", "HEAD")); head != src.Git.Commit {
		t.Errorf("the fork's HEAD is %s, want the demo run's start commit %s", head, src.Git.Commit)
	}
}

// The web UI offers a demo run's resume, message, cancel and rewind only
// to those who may do them (its creator, an admin): another's page says
// whose it is and keeps Fork (issue 22: the buttons were offered and the
// service refused them).
func TestDemoRunPageIsItsCreators(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	bobSecret := e.newToken("bob", nil, api.ScopeRunsWrite)
	daveSecret := e.newToken("dave", nil, api.ScopeRunsWrite)
	run, err := e.client(bobSecret).CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	e.waitStop(run.ID, 1)
	if _, err := e.admin.Cancel(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	changes := []string{`id="cancel"`, `id="resume"`, `id="send"`, `class="rewind"`, `id="rewind"`}
	for _, tt := range []struct {
		who, secret string
		may         bool
	}{{"bob", bobSecret, true}, {"dave", daveSecret, false}, {"admin", e.secret, true}} {
		code, page := e.uiGet("/ui/runs/"+run.ID, tt.secret)
		if code != http.StatusOK {
			t.Fatalf("%s: run page %d", tt.who, code)
		}
		offered := slices.ContainsFunc(changes, func(c string) bool { return strings.Contains(page, c) })
		if offered != tt.may || strings.Contains(page, `id="not-yours"`) == tt.may {
			t.Errorf("%s: changes offered %v, want %v; says not-yours %v", tt.who, offered, tt.may, strings.Contains(page, `id="not-yours"`))
		}
		if !strings.Contains(page, `id="fork"`) {
			t.Errorf("%s: no Fork", tt.who)
		}
		if !tt.may && !strings.Contains(page, "is a demo run started by bob: only that person (or an admin) may") {
			t.Errorf("%s: the page does not say whose run it is", tt.who)
		}
	}
}
