package server_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/notify"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// TestScheduledApprovalNotifies is issue 25's notification acceptance,
// end to end through the service, the API and the web UI: a schedule
// made through the API fires; its run pauses for an approval; the server
// dies before telling anyone, and again after queueing the
// notifications; after the restart the real Mailpit and a webhook
// receiver get exactly one notification each. A person follows the
// email's link in a real browser, signs in, lands on the run at the
// waiting call and approves it there; the run goes on to its end, the
// schedule records it, and nothing more is sent.
func TestScheduledApprovalNotifies(t *testing.T) {
	smtpAddr, mailAPI := testenv.Mailpit(t)
	hook := &hookReceiver{secret: "whsec_" + strings.Repeat("QUJD", 8)}
	hs := httptest.NewServer(hook)
	defer hs.Close()
	asking, err := policy.Parse("ask.cedar", []byte(`@id("all") permit(principal, action, resource);
@id("ask") @ask forbid(principal, action, resource);`))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	clk := &fakeClock{t: time.Date(2026, 12, 7, 7, 30, 0, 0, time.UTC)}
	models := &models{m: map[string]model.Model{}}
	models.set("test:report", modeltest.NewScripted([]modeltest.Turn{
		modeltest.Calls("", modeltest.Call("call_1", "write_file", map[string]string{"path": "report.txt", "content": "all green\n"})),
		modeltest.Text("The report is written."),
	}, nil))
	addr := ""
	start := func() *env {
		e := newEnv(t, &envOptions{dir: dir, db: filepath.Join(dir, "keel.db"), models: models, clock: clk.now, addr: addr, opts: func(o *service.Options) {
			o.Policy = asking
			o.Sinks = map[string]notify.Sink{
				"mail": &notify.Email{Addr: smtpAddr, From: "keel@example.com", To: []string{"oncall@example.com"}, TLS: "none"},
				"hook": &notify.Webhook{URL: hs.URL, Secret: hook.secret},
			}
		}})
		addr = strings.TrimPrefix(e.srv.URL, "http://") // a restart listens at the same URL
		return e
	}
	e := start()
	ctx := t.Context()
	ws := t.TempDir()
	req := &api.CreateSchedule{Name: "nightly", Cron: "0 8 * * *", Run: api.CreateRun{Task: "write the report", Model: "test:report", Workspace: ws}}
	if _, err := e.admin.CreateSchedule(ctx, req); err == nil || !strings.Contains(err.Error(), "nobody to answer") {
		t.Fatalf("a schedule whose runs ask, with nobody told: %v", err)
	}
	req.Notify = []string{"mail", "hook"}
	if _, err := e.admin.CreateSchedule(ctx, req); err != nil {
		t.Fatal(err)
	}
	clk.add(30*time.Minute + time.Second)
	if err := e.svc.Scheduler().Tick(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := e.admin.Schedule(ctx, "nightly")
	if err != nil || len(s.Open) != 1 {
		t.Fatalf("the schedule's open runs: %+v, %v", s, err)
	}
	runID := s.Open[0]
	e.waitType(runID, journal.ApprovalRequested)
	e.waitStop(runID, 1)

	// The server dies before its notifier looks; the next one queues
	// and dies before sending.
	e.stop()
	e = start()
	if err := e.svc.Notifier().Scan(ctx); err != nil {
		t.Fatal(err)
	}
	e.stop()
	if total, _ := mailpit(t, mailAPI); total != 0 {
		t.Fatalf("%d emails before any delivery", total)
	}
	// After the restart: exactly one of each.
	e = start()
	for range 3 {
		if err := e.svc.Notifier().Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	total, text := mailpit(t, mailAPI)
	if total != 1 || hook.count() != 1 || hook.bad != 0 {
		t.Fatalf("after the restart: %d emails, %d webhooks (%d bad signatures)", total, hook.count(), hook.bad)
	}
	if n, err := e.admin.Notifications(ctx, runID, 0); err != nil || len(n) != 2 || n[0].State != "delivered" || n[1].State != "delivered" {
		t.Errorf("the run's notifications: %+v, %v", n, err)
	}
	// The email holds Keel's facts and a link to the waiting call, no
	// argument of it.
	link := regexp.MustCompile(`http://\S+`).FindString(text)
	if want := e.srv.URL + "/ui/runs/" + runID + "#call-call_1"; link != want || strings.Contains(text, "all green") {
		t.Fatalf("the email's link is %q, want %q (text %q)", link, want, text)
	}

	// A person follows the link, signs in with their token and approves
	// the call on the page the link opens.
	bctx, cancel := testenv.Browser(t)
	defer cancel()
	q := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	err = chromedp.Do(bctx,
		chromedp.Navigate(link),
		chromedp.WaitVisible(q(`input[name=token]`)),
		chromedp.SendKeys(q(`input[name=token]`), e.secret),
		chromedp.Click(q(`#sign-in`)),
		chromedp.WaitVisible(q(`section.approval[data-call="call_1"]`)),
	)
	if err != nil {
		t.Fatal(err)
	}
	landed, err := chromedp.Run(bctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(bctx, testenv.ClickLive(`section.approval[data-call="call_1"] button[value="allow"]`)); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(landed, e.srv.URL+"/ui/runs/"+runID) {
		t.Errorf("signing in led to %s, not the run", landed)
	}
	e.waitType(runID, journal.RunCompleted)
	var resolved agent.ApprovalResolved
	for _, ev := range e.events(runID) {
		if ev.Type == journal.ApprovalResolved {
			json.Unmarshal(ev.Payload, &resolved)
		}
	}
	if resolved.Decision != policy.Allow || resolved.By != "ada" {
		t.Errorf("the approval: %+v", resolved)
	}
	// The schedule records the run's end; nothing more is sent.
	clk.add(time.Minute)
	if err := e.svc.Scheduler().Tick(ctx); err != nil {
		t.Fatal(err)
	}
	fires, err := e.admin.Fires(ctx, "nightly", nil)
	if err != nil || len(fires) != 1 || fires[0].RunStatus != "completed" {
		t.Fatalf("fires = %+v, %v", fires, err)
	}
	if err := e.svc.Notifier().Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if total, _ := mailpit(t, mailAPI); total != 1 || hook.count() != 1 {
		t.Errorf("after the approval: %d emails, %d webhooks", total, hook.count())
	}
}

// mailpit returns how many messages Mailpit holds and the plain text of
// the newest.
func mailpit(t *testing.T, api string) (int, string) {
	t.Helper()
	get := func(path string, v any) {
		resp, err := http.Get(api + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	var list struct {
		Total int `json:"total"`
	}
	get("/api/v1/messages", &list)
	if list.Total == 0 {
		return 0, ""
	}
	var m struct {
		Text string `json:"Text"`
	}
	get("/api/v1/message/latest", &m)
	return list.Total, m.Text
}
