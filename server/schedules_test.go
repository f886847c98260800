package server_test

import (
	"encoding/json"
	"errors"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/notify"
	"github.com/keel-run/keel/schedule"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
	"github.com/keel-run/keel/trigger"
)

// hookReceiver is a webhook notification sink's receiver: it keeps the
// notifications whose Standard Webhooks signature verifies.
type hookReceiver struct {
	secret string
	mu     sync.Mutex
	got    []map[string]any
	bad    int
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	wh, _ := standardwebhooks.NewWebhook(h.secret)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := wh.Verify(body, r.Header); err != nil {
		h.bad++
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var m map[string]any
	json.Unmarshal(body, &m)
	h.got = append(h.got, m)
}

func (h *hookReceiver) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.got)
}

// unattendedEnv is a server with a fake clock, a webhook notification
// sink "hook", a vault key (webhook triggers' secrets), and n runs' worth
// of a model that answers at once (test:done).
func unattendedEnv(t *testing.T, n int) (*env, *fakeClock, *hookReceiver) {
	t.Helper()
	hook := &hookReceiver{secret: "whsec_" + strings.Repeat("QUJD", 8)}
	hs := httptest.NewServer(hook)
	t.Cleanup(hs.Close)
	dir := t.TempDir()
	db := filepath.Join(dir, "keel.db")
	store, err := sqlite.Open(db, &sqlite.Options{Sync: sqlite.SyncNormal})
	if err != nil {
		t.Fatal(err)
	}
	key, err := credential.ParseKey(credential.GenerateKey())
	if err != nil {
		t.Fatal(err)
	}
	vault, err := credential.New(store, &credential.Options{Keys: []*credential.Key{key}})
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Date(2026, 12, 7, 7, 30, 0, 0, time.UTC)}
	e := newEnv(t, &envOptions{dir: dir, db: db, store: store, clock: clk.now, opts: func(o *service.Options) {
		o.Sealer, o.Vault, o.PublicURL = vault, vault, "https://keel.example.com"
		o.Sinks = map[string]notify.Sink{"hook": &notify.Webhook{URL: hs.URL, Secret: hook.secret}}
	}})
	turns := make([]modeltest.Turn, n)
	for i := range turns {
		turns[i] = modeltest.Text("done")
	}
	e.models.set("test:done", modeltest.NewScripted(turns, nil))
	return e, clk, hook
}

// TestSchedulesAPI: a schedule made through the API fires on the
// server's scheduler and its run is created through the service with
// the creator's rights; trigger now, backfill, pause, resume and delete
// work; who may change a schedule is checked; unattended runs nobody
// would answer are refused.
// GET /v1/notifications?run= names a run as every route does: a prefix
// is resolved, a run that does not exist is a 404, not an empty list
// (report 15, R17).
func TestNotificationsOfRun(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	e.waitStop(run.ID, 1)
	if n, err := e.admin.Notifications(ctx, run.ID[:10], 0); err != nil || len(n) != 0 {
		t.Errorf("notifications of a prefix of run %s: %+v, %v", run.ID, n, err)
	}
	if _, err := e.admin.Notifications(ctx, "01zzzzzzzz", 0); !client.IsCode(err, api.CodeNotFound) {
		t.Errorf("notifications of no run: %v, want not_found", err)
	}
}

func TestSchedulesAPI(t *testing.T) {
	e, clk, _ := unattendedEnv(t, 10)
	ctx := t.Context()
	ws := t.TempDir()
	req := &api.CreateSchedule{Name: "nightly", Cron: "0 9 * * *", TimeZone: "Europe/Paris",
		Run: api.CreateRun{Task: "report for {{.Time.Format \"2006-01-02\"}}", Model: "test:done", Workspace: ws}}
	// Keel's default policy asks about some calls: with nobody told and
	// no approval timeout, the schedule is refused.
	if _, err := e.admin.CreateSchedule(ctx, req); !client.IsCode(err, api.CodeInvalidRequest) || !strings.Contains(err.Error(), "notification sink") {
		t.Fatalf("an unattended schedule nobody would answer: %v", err)
	}
	req.Notify = []string{"nope"}
	if _, err := e.admin.CreateSchedule(ctx, req); !client.IsCode(err, api.CodeInvalidRequest) || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("an unknown sink: %v", err)
	}
	req.Notify = []string{"hook"}
	// An interval has a floor, as the catch-up window has.
	short := *req
	short.Cron, short.TimeZone, short.Every = "", "", "1s"
	if _, err := e.admin.CreateSchedule(ctx, &short); !client.IsCode(err, api.CodeInvalidRequest) || !strings.Contains(err.Error(), "the interval 1s is shorter than 1m0s") {
		t.Fatalf("a schedule every second: %v", err)
	}
	s, err := e.admin.CreateSchedule(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if s.Next == nil || !s.Next.Equal(time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)) {
		t.Errorf("next fire = %v, want 09:00 Paris", s.Next)
	}
	// A token bound to another agent may neither change nor trigger it.
	if _, err := e.admin.CreateAgent(ctx, &api.CreateAgent{Name: "someone-else"}); err != nil {
		t.Fatal(err)
	}
	other := e.bound("bob", []string{"someone-else"}, api.ScopeRunsWrite)
	if _, err := other.TriggerSchedule(ctx, "nightly", nil); !client.IsCode(err, api.CodeForbidden) {
		t.Errorf("another agent's token triggered the schedule: %v", err)
	}
	if err := other.DeleteSchedule(ctx, "nightly"); !client.IsCode(err, api.CodeForbidden) {
		t.Errorf("another agent's token deleted the schedule: %v", err)
	}

	// The nominal time comes; the scheduler fires.
	clk.add(30*time.Minute + time.Second)
	if err := e.svc.Scheduler().Tick(ctx); err != nil {
		t.Fatal(err)
	}
	fires, err := e.admin.Fires(ctx, "nightly", nil)
	if err != nil || len(fires) != 1 || fires[0].Outcome != "fired" || fires[0].RunID == "" {
		t.Fatalf("fires = %+v, %v", fires, err)
	}
	runID := fires[0].RunID
	e.waitType(runID, journal.RunCompleted)
	run, err := e.admin.Run(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	c := created(t, e, runID)
	if run.Task != "report for 2026-12-07" || run.Origin != "schedule nightly" || c.Labels[schedule.LabelFire] != fires[0].Key || run.CreatedBy != "ada" {
		t.Errorf("the fire's run: task %q, origin %q, labels %v, created by %q", run.Task, run.Origin, c.Labels, run.CreatedBy)
	}
	// A second tick records its end, and nothing more.
	if err := e.svc.Scheduler().Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if fires, _ := e.admin.Fires(ctx, "nightly", nil); len(fires) != 1 || fires[0].RunStatus != "completed" {
		t.Errorf("after the run's end: %+v", fires)
	}

	// Trigger now and a backfill of two days.
	f, err := e.admin.TriggerSchedule(ctx, "nightly", nil)
	if err != nil || f.Source != "manual" || f.By != "ada" || f.RunID == "" {
		t.Fatalf("trigger now: %+v, %v", f, err)
	}
	e.waitType(f.RunID, journal.RunCompleted)
	// A backfill's range is in the past: none of a year ahead fires.
	if bf, err := e.admin.BackfillSchedule(ctx, "nightly", &api.Backfill{From: time.Date(2027, 12, 2, 0, 0, 0, 0, time.UTC), To: time.Date(2027, 12, 3, 0, 0, 0, 0, time.UTC)}); !client.IsCode(err, api.CodeInvalidRequest) || !strings.Contains(err.Error(), "in the past") || len(bf) != 0 {
		t.Errorf("a backfill of next year: %+v, %v", bf, err)
	}
	bf, err := e.admin.BackfillSchedule(ctx, "nightly", &api.Backfill{From: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)})
	if err != nil || len(bf) != 2 {
		t.Fatalf("backfill: %+v, %v", bf, err)
	}
	// Pause, resume, delete.
	p, err := e.admin.PauseSchedule(ctx, "nightly", "maintenance")
	if err != nil || !p.Paused || p.PausedBy != "ada" || p.PausedReason != "maintenance" {
		t.Fatalf("pause: %+v, %v", p, err)
	}
	// A change made already is a conflict (report 15, R9).
	if _, err := e.admin.PauseSchedule(ctx, "nightly", ""); !client.IsCode(err, api.CodeConflict) || !strings.Contains(err.Error(), "paused already (") {
		t.Errorf("pausing twice: %v", err)
	}
	if p, err := e.admin.ResumeSchedule(ctx, "nightly"); err != nil || p.Paused {
		t.Fatalf("resume: %+v, %v", p, err)
	}
	list, err := e.admin.Schedules(ctx)
	if err != nil || len(list) != 1 || list[0].Counts["fired"] < 2 {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if err := e.admin.DeleteSchedule(ctx, "nightly"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.Schedule(ctx, "nightly"); !client.IsCode(err, api.CodeNotFound) {
		t.Errorf("a deleted schedule: %v", err)
	}
}

// TestScheduleOfRevokedToken: a schedule's runs are created with its
// creator's rights at each fire: once the token is revoked, fires fail
// (recorded, with the reason), and no run is made.
func TestScheduleOfRevokedToken(t *testing.T) {
	e, clk, hook := unattendedEnv(t, 2)
	ctx := t.Context()
	if _, err := e.admin.CreateAgent(ctx, &api.CreateAgent{Name: "ci-bot"}); err != nil {
		t.Fatal(err)
	}
	tok, err := e.admin.CreateToken(ctx, &api.CreateToken{Name: "carol", Scopes: []string{api.ScopeRunsWrite}, Agents: []string{"ci-bot"}})
	if err != nil {
		t.Fatal(err)
	}
	carol := e.client(tok.Secret)
	if _, err := carol.CreateSchedule(ctx, &api.CreateSchedule{Name: "hourly", Every: "1h", Notify: []string{"hook"},
		Run: api.CreateRun{Task: "check", Model: "test:done", Workspace: t.TempDir()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	clk.add(time.Hour)
	if err := e.svc.Scheduler().Tick(ctx); err != nil {
		t.Fatal(err)
	}
	fires, err := e.admin.Fires(ctx, "hourly", nil)
	if err != nil || len(fires) != 1 || fires[0].Outcome != "failed" || !strings.Contains(fires[0].Reason, "revoked") {
		t.Fatalf("the fire of a revoked token's schedule: %+v, %v", fires, err)
	}
	if fires[0].RunID != "" {
		t.Errorf("the failed fire names run %s, which does not exist", fires[0].RunID)
	}
	// Trigger now says what happened: no run, the reason, a conflict
	// (exit 1 on the command line), not "fired" with a run id.
	if f, err := e.admin.TriggerSchedule(ctx, "hourly", nil); !client.IsCode(err, api.CodeConflict) || !strings.Contains(err.Error(), "could not create its run") || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("trigger now of a schedule whose runs cannot be created: %+v, %v", f, err)
	}
	if fs, _ := e.admin.Fires(ctx, "hourly", nil); len(fs) != 2 || fs[0].Outcome != "failed" || fs[1].Outcome != "failed" || fs[0].RunID != "" || fs[1].RunID != "" {
		t.Errorf("fires after trigger now: %+v", fs)
	}
	// The schedule's sink hears of it once, however many fires fail
	// after (one notification per lasting failure, linking the schedule).
	for range 2 {
		if err := e.svc.Notifier().Tick(ctx); err != nil {
			t.Fatal(err)
		}
		clk.add(time.Hour)
		if err := e.svc.Scheduler().Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.svc.Notifier().Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if fires, _ := e.admin.Fires(ctx, "hourly", nil); len(fires) != 4 {
		t.Fatalf("%d fires, want 4", len(fires))
	}
	if hook.count() != 1 {
		t.Fatalf("%d notifications of the failing schedule, want 1", hook.count())
	}
	got, _ := hook.got[0]["data"].(map[string]any)
	if got["kind"] != "schedule_failed" || got["item"] != fires[0].Key || got["link"] != "https://keel.example.com/ui/schedules/hourly" ||
		!strings.Contains(got["title"].(string), "schedule hourly cannot start its runs") ||
		got["run_id"] != nil || !strings.Contains(got["text"].(string), "(see keel schedules show hourly)") {
		t.Errorf("the notification: %v", got)
	}
}

// TestWebhookTriggerAPI sends real HTTP requests to POST
// /v1/triggers/{id} (no token: the signature authenticates): a message
// delivered three times (a sender's retries) starts one run, made through
// the service with the trigger's labels; a bad signature, an old
// timestamp, a replayed id, missing headers and a body too large are
// refused and journaled. The signing secret is sealed in the vault, not
// in the journal.
func TestWebhookTriggerAPI(t *testing.T) {
	e, clk, _ := unattendedEnv(t, 3)
	ctx := t.Context()
	nt, err := e.admin.CreateTrigger(ctx, &api.CreateTrigger{Name: "deploy-failed", Notify: []string{"hook"},
		Run: api.CreateRun{Task: "look at the failed deploy ({{.MessageID}})", Model: "test:done", Workspace: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(nt.Secret, "whsec_") || nt.URL != "https://keel.example.com/v1/triggers/"+nt.ID {
		t.Fatalf("new trigger: secret %q, url %q", nt.Secret, nt.URL)
	}
	// A run trigger watches an agent the directory has, as --agent must.
	_, err = e.admin.CreateTrigger(ctx, &api.CreateTrigger{Name: "typo", Notify: []string{"hook"}, On: &api.RunEvents{Agent: "nosuch", Events: []string{"completed"}},
		Run: api.CreateRun{Task: "x", Model: "test:done", Workspace: t.TempDir()}})
	if !client.IsCode(err, api.CodeNotFound) || !strings.Contains(err.Error(), `no agent "nosuch"`) {
		t.Errorf("a run trigger on an agent that does not exist: %v", err)
	}
	for _, id := range []string{trigger.DirectoryID, trigger.StreamPrefix + nt.ID} {
		for _, ev := range e.events(id) {
			if strings.Contains(string(ev.Payload), strings.TrimPrefix(nt.Secret, "whsec_")) {
				t.Fatalf("the signing secret is in the journal (%s)", ev.Type)
			}
		}
	}
	const payload = `{"service":"api","status":"failed"}`
	post := func(header http.Header, body string) (int, map[string]any) {
		t.Helper()
		h := []string{}
		for k := range header {
			h = append(h, k, header.Get(k))
		}
		code, text := e.raw(http.MethodPost, "/v1/triggers/"+nt.ID, "", body, h...)
		var out map[string]any
		json.Unmarshal([]byte(text), &out)
		return code, out
	}
	var statuses []int
	var runID string
	for range 3 {
		code, out := post(signedHeader(t, nt.Secret, "msg_1", clk.now(), payload), payload)
		statuses = append(statuses, code)
		if id, _ := out["run_id"].(string); id != "" {
			runID = id
		}
		clk.add(10 * time.Second)
	}
	if statuses[0] != http.StatusAccepted || statuses[1] != http.StatusOK || statuses[2] != http.StatusOK || runID == "" {
		t.Fatalf("three deliveries: %v (run %q)", statuses, runID)
	}
	e.waitType(runID, journal.RunCompleted)
	run, err := e.admin.Run(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	if c := created(t, e, runID); run.Origin != "trigger deploy-failed" || c.Labels[trigger.LabelMessage] != "msg_1" || run.Task != "look at the failed deploy (msg_1)" {
		t.Errorf("the delivery's run: task %q, origin %q, labels %v", run.Task, run.Origin, c.Labels)
	}
	other := "whsec_" + strings.Repeat("Q0RF", 8)
	for _, tt := range []struct {
		name   string
		header http.Header
		body   string
		want   int
	}{
		{"bad signature", signedHeader(t, other, "m1", clk.now(), payload), payload, http.StatusUnauthorized},
		{"old", signedHeader(t, nt.Secret, "m2", clk.now().Add(-10*time.Minute), payload), payload, http.StatusUnauthorized},
		{"replayed id", signedHeader(t, nt.Secret, "msg_1", clk.now(), "{}"), "{}", http.StatusConflict},
		{"no headers", http.Header{}, payload, http.StatusBadRequest},
		{"too large", signedHeader(t, nt.Secret, "m3", clk.now(), strings.Repeat("x", trigger.MaxBody+1)), strings.Repeat("x", trigger.MaxBody+1), http.StatusRequestEntityTooLarge},
	} {
		if code, out := post(tt.header, tt.body); code != tt.want || out["error"] == nil {
			t.Errorf("%s: %d %v, want %d", tt.name, code, out, tt.want)
		}
	}
	if code, _ := e.raw(http.MethodPost, "/v1/triggers/nope", "", payload); code != http.StatusNotFound {
		t.Errorf("unknown trigger: %d", code)
	}
	ds, err := e.admin.Deliveries(ctx, "deploy-failed", 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range ds {
		got = append(got, d.Outcome+":"+d.Reason)
	}
	want := "accepted: duplicate: duplicate: refused:bad_signature refused:too_old refused:replayed refused:missing_headers refused:too_large"
	if strings.Join(got, " ") != want {
		t.Errorf("deliveries = %s\nwant %s", strings.Join(got, " "), want)
	}
	tr, err := e.admin.Trigger(ctx, "deploy-failed")
	if err != nil || tr.Counts["accepted"] != 1 || tr.Counts["duplicate"] != 2 {
		t.Errorf("trigger counts: %+v, %v", tr, err)
	}
	// Paused, a delivery is refused; deleted, the URL is gone.
	if _, err := e.admin.PauseTrigger(ctx, "deploy-failed", ""); err != nil {
		t.Fatal(err)
	}
	if code, _ := post(signedHeader(t, nt.Secret, "m4", clk.now(), payload), payload); code != http.StatusConflict {
		t.Errorf("a paused trigger's delivery: %d", code)
	}
	if _, err := e.admin.ResumeTrigger(ctx, "deploy-failed"); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.DeleteTrigger(ctx, "deploy-failed"); err != nil {
		t.Fatal(err)
	}
	if code, _ := post(signedHeader(t, nt.Secret, "m5", clk.now(), payload), payload); code != http.StatusNotFound {
		t.Errorf("a deleted trigger's delivery: %d", code)
	}
}

// signedHeader returns the headers a Standard Webhooks sender sends for
// body at time at.
func signedHeader(t *testing.T, secret, id string, at time.Time, body string) http.Header {
	t.Helper()
	h, err := trigger.Sign(secret, id, at, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	h.Set("Content-Type", "application/json")
	return h
}

// TestSchedulePages: the web UI's schedule pages call the service's
// operations: the form creates a schedule (refusing, with the service's
// reason, one nobody would answer), the schedule's page shows its fire
// records, and its buttons trigger it now, pause and delete it.
func TestSchedulePages(t *testing.T) {
	e, _, _ := unattendedEnv(t, 2)
	ws := t.TempDir()
	form := url.Values{"name": {"nightly"}, "when": {"@daily"}, "task": {"tidy up"}, "model": {"test:done"}, "workspace": {ws}}
	if code, body := e.uiDo(http.MethodPost, "/ui/schedules", e.secret, form, "same-origin"); code != http.StatusBadRequest || !strings.Contains(body, "nobody to answer") {
		t.Fatalf("a schedule nobody would answer: %d %s", code, body)
	}
	// A negative max steps is refused in the API's words (Q5).
	neg := -1
	_, apiErr := e.admin.CreateSchedule(t.Context(), &api.CreateSchedule{Name: "nightly", Cron: "@daily", Notify: []string{"hook"},
		Run: api.CreateRun{Task: "tidy up", Model: "test:done", Workspace: ws, Limits: api.Limits{MaxSteps: &neg}}})
	var ae *api.Error
	if !errors.As(apiErr, &ae) || !strings.Contains(ae.Message, "max_steps -1") {
		t.Fatalf("the API's refusal of max steps -1: %v", apiErr)
	}
	negForm := url.Values{"name": {"nightly"}, "when": {"@daily"}, "task": {"tidy up"}, "model": {"test:done"}, "workspace": {ws}, "notify": {"hook"}, "max_steps": {"-1"}}
	if code, body := e.uiDo(http.MethodPost, "/ui/schedules", e.secret, negForm, "same-origin"); code != http.StatusBadRequest || !strings.Contains(html.UnescapeString(body), ae.Message) {
		t.Errorf("the form's max steps -1: %d, want 400 saying %q\n%s", code, ae.Message, body)
	}
	if code, body := e.uiGet("/ui/schedules", e.secret); code != http.StatusOK || !strings.Contains(body, `value="hook"`) || !strings.Contains(body, "No schedules yet.") {
		t.Fatalf("the schedules page: %d\n%s", code, body)
	}
	form.Set("notify", "hook")
	code, _, resp := e.uiResp(http.MethodPost, "/ui/schedules", e.secret, form, "same-origin")
	if code != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/schedules/nightly" {
		t.Fatalf("create: %d to %q", code, resp.Header.Get("Location"))
	}
	if code, _ := e.uiDo(http.MethodPost, "/ui/schedules/nightly/trigger", e.secret, url.Values{}, "same-origin"); code != http.StatusSeeOther {
		t.Fatalf("trigger now: %d", code)
	}
	fires, err := e.admin.Fires(t.Context(), "nightly", nil)
	if err != nil || len(fires) != 1 {
		t.Fatalf("fires: %+v, %v", fires, err)
	}
	e.waitType(fires[0].RunID, journal.RunCompleted)
	_, body := e.uiGet("/ui/schedules/nightly", e.secret)
	if !strings.Contains(body, `data-outcome="fired"`) || !strings.Contains(body, "manual by ada") || !strings.Contains(body, "/ui/runs/"+fires[0].RunID) {
		t.Errorf("the schedule's page does not show the fire:\n%s", body)
	}
	if _, body := e.uiGet("/ui/runs/"+fires[0].RunID, e.secret); !strings.Contains(body, `<span class="origin">schedule nightly</span>`) {
		t.Errorf("the run's page does not say the schedule started it")
	}
	if code, _ := e.uiDo(http.MethodPost, "/ui/schedules/nightly/pause", e.secret, url.Values{"reason": {"holidays"}}, "same-origin"); code != http.StatusSeeOther {
		t.Fatalf("pause: %d", code)
	}
	if _, body := e.uiGet("/ui/schedules", e.secret); !strings.Contains(body, `status paused`) {
		t.Errorf("the list does not show the pause")
	}
	// A form from another site is refused.
	if code, _ := e.uiDo(http.MethodPost, "/ui/schedules/nightly/delete", e.secret, url.Values{}, "cross-site"); code != http.StatusForbidden {
		t.Errorf("a cross-site delete: %d", code)
	}
	if code, _ := e.uiDo(http.MethodPost, "/ui/schedules/nightly/delete", e.secret, url.Values{}, "same-origin"); code != http.StatusSeeOther {
		t.Fatalf("delete: %d", code)
	}
	if code, _ := e.uiGet("/ui/schedules/nightly", e.secret); code != http.StatusNotFound {
		t.Errorf("a deleted schedule's page: %d", code)
	}
}

// TestScheduleOutsideRootsNotFired: a schedule made on the journal (where
// the server's workspace roots are not known) whose workspace is outside
// the server's roots is not fired through the server: trigger now and
// backfill are refused, saying why, and make no run (they made a run
// that failed at setup).
func TestScheduleOutsideRootsNotFired(t *testing.T) {
	e, _, _ := unattendedEnv(t, 1)
	ctx := t.Context()
	outside, err := os.Getwd() // a directory, outside the env's roots
	if err != nil {
		t.Fatal(err)
	}
	run, err := json.Marshal(&api.CreateRun{Model: "test:done", Workspace: outside})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Scheduler().Create(ctx, &schedule.Schedule{Name: "nightly", Spec: schedule.Spec{Cron: "0 3 * * *"}, Task: "tidy", Run: run}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.TriggerSchedule(ctx, "nightly", nil); !client.IsCode(err, api.CodeInvalidRequest) || !strings.Contains(err.Error(), "not under one of this server's workspace roots") {
		t.Errorf("trigger of a schedule outside the roots: %v", err)
	}
	if _, err := e.admin.BackfillSchedule(ctx, "nightly", &api.Backfill{From: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)}); !client.IsCode(err, api.CodeInvalidRequest) {
		t.Errorf("backfill of a schedule outside the roots: %v", err)
	}
	if fires, err := e.admin.Fires(ctx, "nightly", nil); err != nil || len(fires) != 0 {
		t.Errorf("fires after the refusals: %+v, %v", fires, err)
	}
	if runs, err := e.admin.Runs(ctx, nil); err != nil || len(runs) != 0 {
		t.Errorf("runs after the refusals: %d, %v", len(runs), err)
	}
}
