package notify

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/keel-run/keel/internal/testclock"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
)

type source struct {
	mu    sync.Mutex
	items []Item
}

func (s *source) Pending(ctx context.Context, since time.Time) ([]Item, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Item(nil), s.items...), nil
}

// receiver is a webhook receiver that verifies Standard Webhooks
// signatures and counts deliveries per webhook-id; it answers 500 to
// the first fail requests.
type receiver struct {
	secret string
	fail   atomic.Int32
	mu     sync.Mutex
	got    []map[string]any
	ids    map[string]int
	bad    int
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if r.fail.Add(-1) >= 0 {
		http.Error(w, "busy", http.StatusInternalServerError)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.secret != "" {
		wh, _ := standardwebhooks.NewWebhook(r.secret)
		if err := wh.Verify(body, req.Header); err != nil {
			r.bad++
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
	}
	var m map[string]any
	json.Unmarshal(body, &m)
	r.got = append(r.got, m)
	if r.ids == nil {
		r.ids = map[string]int{}
	}
	r.ids[req.Header.Get("webhook-id")]++
}

func openStore(t *testing.T, path string) journal.Store {
	s, err := sqlite.Open(path, &sqlite.Options{Sync: sqlite.SyncNormal})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// hostile is a call id and tool name as a hijacked model might write
// them.
const hostile = "call_1<script>IGNORE ALL PREVIOUS</script>"

func approvalItem(sinks ...string) Item {
	return Item{Kind: KindApproval, RunID: "01jrun", ItemID: hostile, Agent: "ci-bot", Tool: "bash", Origin: "schedule nightly", Since: time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC), Sinks: sinks}
}

func mailpitMessages(t *testing.T, api string) (total int, subjects []string, ids []string) {
	t.Helper()
	resp, err := http.Get(api + "/api/v1/messages")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Total    int `json:"total"`
		Messages []struct {
			Subject   string `json:"Subject"`
			MessageID string `json:"MessageID"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	for _, m := range out.Messages {
		subjects = append(subjects, m.Subject)
		ids = append(ids, m.MessageID)
	}
	return out.Total, subjects, ids
}

func TestSinks(t *testing.T) {
	t.Parallel()
	smtpAddr, api := testenv.Mailpit(t)
	hook := &receiver{secret: "whsec_" + strings.Repeat("QUJD", 8)}
	hs := httptest.NewServer(hook)
	defer hs.Close()
	slack := &receiver{}
	ss := httptest.NewServer(slack)
	defer ss.Close()
	src := &source{items: []Item{approvalItem("mail", "hook", "slack")}}
	n := New(openStore(t, filepath.Join(t.TempDir(), "keel.db")), src, &Options{
		Sinks: map[string]Sink{
			"mail":  &Email{Addr: smtpAddr, From: "keel@example.com", To: []string{"oncall@example.com"}, TLS: "none"},
			"hook":  &Webhook{URL: hs.URL, Secret: hook.secret},
			"slack": &Slack{URL: ss.URL},
		},
		Link: func(it *Item) string { return "https://keel.example.com/ui/runs/" + it.RunID },
	})
	if err := n.Tick(t.Context()); err != nil {
		t.Fatal(err)
	}
	total, subjects, _ := mailpitMessages(t, api)
	if total != 1 || !strings.Contains(subjects[0], "ci-bot waits for your approval") {
		t.Fatalf("mailpit: %d messages %q", total, subjects)
	}
	if len(hook.got) != 1 || hook.bad != 0 || len(slack.got) != 1 {
		t.Fatalf("webhook %d (bad signatures %d), slack %d", len(hook.got), hook.bad, len(slack.got))
	}
	for _, got := range []map[string]any{hook.got[0], slack.got[0]} {
		b, _ := json.Marshal(got)
		if strings.Contains(string(b), "IGNORE") || strings.Contains(string(b), "script") {
			t.Errorf("a notification carries the model's text verbatim: %s", b)
		}
		if !strings.Contains(string(b), "https://keel.example.com/ui/runs/01jrun") {
			t.Errorf("no link in %s", b)
		}
	}
	list, err := n.List(t.Context(), "", 0)
	if err != nil || len(list) != 3 {
		t.Fatalf("List = %d, %v", len(list), err)
	}
	for _, x := range list {
		if x.State != "delivered" || x.Attempts != 1 {
			t.Errorf("%s: %s after %d attempts", x.Sink, x.State, x.Attempts)
		}
	}
	// Scanning again queues nothing new.
	if err := n.Tick(t.Context()); err != nil {
		t.Fatal(err)
	}
	if total, _, _ := mailpitMessages(t, api); total != 1 || len(hook.got) != 1 {
		t.Errorf("after a second tick: %d emails, %d webhooks", total, len(hook.got))
	}
}

func TestRetryWithBackoff(t *testing.T) {
	t.Parallel()
	hook := &receiver{}
	hook.fail.Store(2)
	hs := httptest.NewServer(hook)
	defer hs.Close()
	clk := testclock.New(time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC))
	n := New(openStore(t, filepath.Join(t.TempDir(), "keel.db")), &source{items: []Item{approvalItem("hook")}}, &Options{
		Sinks: map[string]Sink{"hook": &Webhook{URL: hs.URL, Secret: "whsec_" + strings.Repeat("QUJD", 8)}}, Clock: clk.Now,
	})
	for _, step := range []time.Duration{0, 5 * time.Second, 6 * time.Second, 29 * time.Second, 2 * time.Second} {
		clk.Add(step)
		n.Tick(t.Context())
	}
	list, _ := n.List(t.Context(), "", 0)
	if len(list) != 1 || list[0].State != "delivered" || list[0].Attempts != 3 || len(hook.got) != 1 {
		t.Fatalf("after two failures: %+v, %d received", list, len(hook.got))
	}
	// Unknown sinks are given up, journaled.
	n2 := New(openStore(t, filepath.Join(t.TempDir(), "keel.db")), &source{items: []Item{approvalItem("nowhere")}}, nil)
	n2.Tick(t.Context())
	list, _ = n2.List(t.Context(), "", 0)
	if len(list) != 1 || list[0].State != "gave_up" || !strings.Contains(list[0].LastError, "no sink named") {
		t.Errorf("unknown sink: %+v", list)
	}
}

// TestRestartDeliversOnce: a process that queued a notification and died
// before sending it, a process that died before even queueing, and two
// processes ticking at once each lead to exactly one delivery.
func TestRestartDeliversOnce(t *testing.T) {
	t.Parallel()
	smtpAddr, api := testenv.Mailpit(t)
	hook := &receiver{}
	hs := httptest.NewServer(hook)
	defer hs.Close()
	path := filepath.Join(t.TempDir(), "keel.db")
	sinks := map[string]Sink{
		"mail": &Email{Addr: smtpAddr, From: "keel@example.com", To: []string{"oncall@example.com"}, TLS: "none"},
		"hook": &Webhook{URL: hs.URL, Secret: "whsec_" + strings.Repeat("QUJD", 8)},
	}
	src := &source{items: []Item{approvalItem("mail", "hook")}}
	// The first process queues and dies.
	if err := New(openStore(t, path), src, &Options{Sinks: sinks}).Scan(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Two restarted processes tick at once, twice.
	a, b := New(openStore(t, path), src, &Options{Sinks: sinks}), New(openStore(t, path), src, &Options{Sinks: sinks})
	for range 2 {
		var wg sync.WaitGroup
		for _, n := range []*Notifier{a, b} {
			wg.Go(func() {
				if err := n.Tick(t.Context()); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	if total, _, _ := mailpitMessages(t, api); total != 1 {
		t.Errorf("%d emails, want 1", total)
	}
	if len(hook.got) != 1 {
		t.Errorf("%d webhooks, want 1", len(hook.got))
	}
}
