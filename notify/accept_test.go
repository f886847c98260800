package notify

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/testclock"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/schedule"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin/fs"
)

// askingRunner creates a schedule's runs in the journal and executes
// them in this process with a scripted model whose first call the
// policy asks about: each run pauses for an approval.
type askingRunner struct {
	rt     *agent.Runtime
	ws     *tool.Workspace
	tools  *tool.Registry
	policy *agent.PolicyRef
	models map[string]*modeltest.Scripted
}

func (r *askingRunner) Start(ctx context.Context, p *schedule.StartParams) error {
	c := &agent.RunCreated{Task: p.Task, Tools: agent.ToolInfos(r.tools), Principal: p.Agent, Labels: p.Labels, Policy: r.policy}
	b, _ := json.Marshal(c)
	if _, err := r.rt.Store().Append(ctx, p.RunID, 0, journal.Draft{Type: journal.RunCreated, Time: time.Now(), Payload: b}); err != nil {
		return err
	}
	r.models[p.RunID] = modeltest.NewScripted([]modeltest.Turn{
		modeltest.Calls("", modeltest.Call("call_1", "write_file", map[string]string{"path": "report.txt", "content": "all green\n"})),
		modeltest.Text("The report is written."),
	}, nil)
	return r.execute(ctx, p.RunID)
}

func (r *askingRunner) execute(ctx context.Context, id string) error {
	_, err := r.rt.Execute(ctx, id, &agent.ExecParams{Wiring: agent.Wiring{Model: r.models[id], Tools: r.tools, Env: &tool.Env{Workspace: r.ws}}})
	return err
}

func (r *askingRunner) Status(ctx context.Context, id string) (journal.Status, error) {
	evs, err := r.rt.Store().Read(ctx, id, 1)
	if err != nil {
		return "", err
	}
	return journal.StatusOf(evs[len(evs)-1].Type), nil
}

func (r *askingRunner) Cancel(ctx context.Context, id, reason string) error { return nil }

// TestScheduledApprovalNotifies: a scheduled run pauses for an approval;
// the process dies before it tells anyone (once before queueing, once
// after); after the restart the real Mailpit and a webhook receiver get
// exactly one notification each, whose link names the run; approving it
// resumes the run to its end, and nothing more is sent.
func TestScheduledApprovalNotifies(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	smtpAddr, mailAPI := testenv.Mailpit(t)
	hook := &receiver{secret: "whsec_" + strings.Repeat("QUJD", 8)}
	hs := httptest.NewServer(hook)
	defer hs.Close()
	path := filepath.Join(t.TempDir(), "keel.db")
	store := openStore(t, path)
	rt := agent.NewRuntime(store, nil)
	ws, err := tool.NewWorkspace(t.TempDir(), "/workspace", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	tools := tool.NewRegistry()
	fs.Register(tools, nil)
	e, err := policy.Parse("ask.cedar", []byte(`@id("all") permit(principal, action, resource);
@id("ask") @ask forbid(principal, action, resource);`))
	if err != nil {
		t.Fatal(err)
	}
	r := &askingRunner{rt: rt, ws: ws, tools: tools, policy: agent.NewPolicyRef(e), models: map[string]*modeltest.Scripted{}}
	clk := testclock.New(time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC))
	sched := schedule.New(store, r, &schedule.Options{Clock: clk.Now})
	if err := schedule.CheckUnattended("schedule nightly", e, 0, nil); err == nil {
		t.Fatal("an asking policy with no sink was admitted")
	}
	if _, err := sched.Create(ctx, &schedule.Schedule{Name: "nightly", Agent: "ci-bot", Spec: schedule.Spec{Cron: "0 9 * * *"}, Task: "write the report", Notify: []string{"mail", "hook"}}); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Hour + time.Second)
	if err := sched.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := sched.Get(ctx, "nightly")
	if err != nil || len(st.Open) != 1 {
		t.Fatalf("the schedule's open runs: %+v, %v", st, err)
	}
	runID := st.Open[0]
	if s, _ := r.Status(ctx, runID); s != journal.StatusPaused {
		t.Fatalf("the scheduled run is %s, want paused", s)
	}

	const public = "https://keel.example.com"
	notifier := func() *Notifier {
		return New(openStore(t, path), &RuntimeSource{Runtime: rt, Route: func(ctx context.Context, id string, c *agent.RunCreated) []string {
			if name := c.Labels[schedule.LabelSchedule]; name != "" {
				if s, err := sched.Get(ctx, name); err == nil {
					return s.Notify
				}
			}
			return nil
		}}, &Options{
			Sinks: map[string]Sink{
				"mail": &Email{Addr: smtpAddr, From: "keel@example.com", To: []string{"oncall@example.com"}, TLS: "none"},
				"hook": &Webhook{URL: hs.URL, Secret: hook.secret},
			},
			Link: func(it *Item) string { return public + "/ui/runs/" + it.RunID + "#call-" + it.ItemID },
		})
	}
	// The server that paused the run dies before its notifier looks;
	// the next one queues and dies before sending.
	if err := notifier().Scan(ctx); err != nil {
		t.Fatal(err)
	}
	if total, _, _ := mailpitMessages(t, mailAPI); total != 0 {
		t.Fatalf("%d emails before any delivery", total)
	}
	// After the restart: exactly one of each.
	n := notifier()
	for range 3 {
		if err := n.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	total, subjects, _ := mailpitMessages(t, mailAPI)
	if total != 1 || len(hook.got) != 1 || hook.bad != 0 {
		t.Fatalf("after the restart: %d emails %q, %d webhooks (%d bad signatures)", total, subjects, len(hook.got), hook.bad)
	}
	// Follow the email's link: it names the run and the call.
	text := mailpitText(t, mailAPI)
	link := regexp.MustCompile(`https://\S+`).FindString(text)
	if link != public+"/ui/runs/"+runID+"#call-call_1" {
		t.Fatalf("the email's link is %q (text %q)", link, text)
	}
	// Approve, as the page does, and the run goes on to its end.
	if err := rt.Resolve(ctx, runID, "call_1", &agent.ApprovalResolved{Decision: policy.Allow, By: "ada"}); err != nil {
		t.Fatal(err)
	}
	if err := r.execute(ctx, runID); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Minute)
	if err := sched.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	fires, err := sched.Fires(ctx, "nightly", nil)
	if err != nil || len(fires) != 1 || fires[0].RunStatus != journal.StatusCompleted {
		t.Fatalf("fires = %+v, %v", fires, err)
	}
	if err := n.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if total, _, _ := mailpitMessages(t, mailAPI); total != 1 || len(hook.got) != 1 {
		t.Errorf("after the approval: %d emails, %d webhooks", total, len(hook.got))
	}
}

// mailpitText returns the plain text of the newest message in Mailpit.
func mailpitText(t *testing.T, api string) string {
	t.Helper()
	resp, err := http.Get(api + "/api/v1/message/latest")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		Text string `json:"Text"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m.Text
}
