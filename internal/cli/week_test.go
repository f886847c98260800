package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/internal/oauthtest"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/server/api"
)

// The week-long task, with real processes and the real OP: an
// assistant agent acting for ann runs one task over six days of the
// vaults' clock (moved forward by a day at each stop, in every process:
// every access token has expired at the next call). The run moves
// between processes: keel serve A (created through the API, the first
// call waits for ann's authorization, connected through the API's
// callback, the first approval), a kill -9 of A in the middle of a
// command, keel serve B (adopts it at start), three context handoffs by
// keel runs handoff on the command line (each after an approval there),
// and an approval through B's API in between. Every credentialed write
// asks (the default policy). The run completes without a second
// authorization: each expiry is a refresh, each refresh rotates the
// refresh token, no refresh is refused. keel audit calls answers, for
// every external call, which agent acted for whom with which scopes
// under which decision; no token the OP issued is in the database, the
// WAL, the logs, the outputs or the workspace.
func TestWeekLongTaskAcrossProcesses(t *testing.T) {
	started := time.Now()
	clockFile := filepath.Join(t.TempDir(), "clock")
	day := 0
	advance := func() {
		day++
		if err := os.WriteFile(clockFile, []byte((time.Duration(day) * 24 * time.Hour).String()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f := newConnectFixture(t, func() {
		if err := os.WriteFile(clockFile, []byte("0s"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("KEEL_TEST_VAULT_CLOCK", clockFile)
	})
	post := func(path string) fcall {
		return fcall{"http_request", map[string]any{"method": "POST", "url": f.base + path, "body": `{"note":"x"}`}}
	}
	get := func(path string) fcall { return fcall{"http_request", map[string]any{"url": f.base + path}} }
	traj := writeTrajectory(t, "keep my deals up to date this week",
		[]fcall{get("/api/profile")},                    // 0: waits for ann, connected via the API (A)
		[]fcall{post("/api/notes")},                     // 1: asks; approved via A's API on day 1
		[]fcall{sh("sleep 30; echo slept >> notes.md")}, // 2: A is killed here (day 2)
		[]fcall{get("/api/deals")},                      // 3: B
		[]fcall{post("/api/deals/7")},                   // 4: asks; approved here, handoff 1 (day 3)
		[]fcall{post("/api/deals/8")},                   // 5: asks; approved here, handoff 2 (day 4)
		[]fcall{post("/api/deals/9")},                   // 6: asks; approved via B's API (day 5)
		[]fcall{post("/api/deals/10")},                  // 7: asks; approved here, handoff 3 (day 6)
		[]fcall{get("/api/summary")},                    // 8
		[]fcall{sh("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo done")},
	)
	c := f.s.apiClient(t)
	run, err := c.CreateRun(t.Context(), &api.CreateRun{Model: "replay:" + traj, Workspace: f.ws, Agent: "helper", OnBehalfOf: "ann",
		Network: []string{f.hostPort}})
	if err != nil {
		t.Fatal(err)
	}
	id := run.ID
	moves := []string{"serve A"}
	stop := untilStopped(t, c, id, 1)
	if stop.Type != journal.AuthRequired {
		t.Fatalf("first stop %s, want auth.required\n%s", stop.Type, f.s.stderr)
	}
	// Connect through A's API, as ann's browser would.
	var st api.AuthStarted
	if code := f.api(t, "POST", "/v1/runs/"+id+"/auth/call_0_0/connect", "", &st); code != 200 {
		t.Fatalf("connect = %d", code)
	}
	cb, err := oauthtest.Login(t.Context(), st.URL, f.op.User(), oauthtest.Password)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := http.Get(cb.String()); err != nil || resp.StatusCode != 200 {
		t.Fatalf("callback: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	waitAsk := func(c *client.Client, call string, from int64) journal.Event {
		t.Helper()
		e := untilStopped(t, c, id, from)
		if e.Type != journal.ApprovalRequested || !bytes.Contains(e.Payload, []byte(`"`+call+`"`)) {
			t.Fatalf("stopped with %s %s, want approval.requested of %s\n%s", e.Type, e.Payload, call, f.s.stderr)
		}
		return e
	}
	ask := waitAsk(c, "call_1_0", stop.Seq+1)

	// Day 1: approved through A's API; A refreshes and posts, then runs
	// the long command, during which A is killed (day 2).
	advance()
	if _, err := c.Approve(t.Context(), id, "call_1_0", &api.Decide{Reason: "day 1"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	for e, err := range c.Events(ctx, id, &client.EventsParams{From: ask.Seq + 1}) {
		if err != nil {
			t.Fatal(err)
		}
		if e.Type == journal.ToolStarted && bytes.Contains(e.Payload, []byte(`"call_2_0"`)) {
			break
		}
		if journal.StatusOf(e.Type).Terminal() || e.Type == journal.RunPaused || e.Type == journal.ApprovalRequested {
			t.Fatalf("the run stopped (%s) before the long command", e.Type)
		}
	}
	cancel()
	advance()
	if err := f.s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-f.s.done
	f.outputs.WriteString(f.s.stderr.String())

	// keel serve B on the same journal adopts the run at start.
	f.s = startServe(t)
	moves = append(moves, "kill -9, serve B")
	c = f.s.apiClient(t)
	ask = waitAsk(c, "call_4_0", 1)

	// Days 3 and 4: approved on the command line, continued by keel runs
	// handoff in a fresh context (a command-line process each).
	handoff := func(call string) {
		t.Helper()
		advance()
		f.keel(t, 0, "approve", id, call, "--no-resume", "--reason", "day "+string(rune('0'+day)))
		code, out, errOut := keel(t, "runs", "handoff", id, "-q")
		f.outputs.WriteString(out + errOut)
		if code != 0 && code != 3 {
			t.Fatalf("runs handoff = %d\n%s%s", code, out, errOut)
		}
		moves = append(moves, "keel runs handoff (day "+string(rune('0'+day))+")")
	}
	handoff("call_4_0")
	ask = waitAsk(c, "call_5_0", ask.Seq+1)
	handoff("call_5_0")
	ask = waitAsk(c, "call_6_0", ask.Seq+1)
	// Day 5: through B's API, which executes it again.
	advance()
	if _, err := c.Approve(t.Context(), id, "call_6_0", &api.Decide{Reason: "day 5"}); err != nil {
		t.Fatal(err)
	}
	moves = append(moves, "serve B (approval through the API, day 5)")
	ask = waitAsk(c, "call_7_0", ask.Seq+1)
	handoff("call_7_0")
	if end := untilStopped(t, c, id, ask.Seq+1); end.Type != journal.RunCompleted {
		t.Fatalf("the run ended with %s\n%s", end.Type, f.s.stderr)
	}

	// What happened, from the journal.
	st2, evs := loadRun(t, f.db, id)
	count := map[journal.Type]int{}
	handoffs := 0
	for _, e := range evs {
		count[e.Type]++
		if e.Type == journal.ContextCompacted && bytes.Contains(e.Payload, []byte(`"handoff":true`)) {
			handoffs++
		}
	}
	store, err := sqlite.Open(f.db, nil)
	if err != nil {
		t.Fatal(err)
	}
	cevs, err := store.Read(t.Context(), "_keel.credentials", 1)
	store.Close()
	if err != nil {
		t.Fatal(err)
	}
	cred := map[string]int{}
	rotated := 0
	for _, e := range cevs {
		cred[string(e.Type)]++
		if e.Type == "credential.refreshed" {
			var p struct {
				Rotated bool `json:"rotated"`
			}
			json.Unmarshal(e.Payload, &p)
			if p.Rotated {
				rotated++
			}
		}
	}
	f.mu.Lock()
	served, tokens := len(f.served), len(f.tokens)
	f.mu.Unlock()
	t.Logf("week: %d days of vault clock, %s wall; process moves: %s", day, time.Since(started).Round(time.Second), strings.Join(moves, " → "))
	t.Logf("week: %d events; %d auth.required, %d approvals, %d context handoffs; %d requests served with %d distinct tokens",
		len(evs), count[journal.AuthRequired], count[journal.ApprovalRequested], handoffs, served, tokens)
	t.Logf("week: credential events %v; %d refreshes rotated the refresh token", cred, rotated)
	for _, turn := range st2.Turns {
		for _, call := range turn.Calls {
			if call.ID == "call_2_0" && call.Finished != nil {
				t.Logf("week: the command A was killed in: attempts %d, error %v: %.200s", call.Attempts, call.Finished.IsError, call.Finished.Content)
				if !strings.Contains(call.Finished.Content, "interrupted") {
					t.Errorf("the command A was killed in: %s", call.Finished.Content)
				}
			}
		}
	}
	if st2.Status != journal.StatusCompleted {
		t.Errorf("status %s", st2.Status)
	}
	if count[journal.AuthRequired] != 1 {
		t.Errorf("%d auth.required: want the first only (no forced re-authorization)", count[journal.AuthRequired])
	}
	if handoffs < 3 {
		t.Errorf("%d context handoffs, want ≥ 3", handoffs)
	}
	if cred["credential.refreshed"] < 2 || rotated < 1 || cred["credential.expired"] != 0 {
		t.Errorf("refreshes %d (rotated %d), expired %d: want ≥ 2 refreshes, ≥ 1 rotation, no refused refresh", cred["credential.refreshed"], rotated, cred["credential.expired"])
	}
	if served != 8 || cred["credential.used"] != 8 {
		t.Errorf("%d requests served, %d credential.used: want the 8 external calls", served, cred["credential.used"])
	}
	// keel audit calls: every external call, by whom for whom, scopes,
	// decision.
	out := f.keel(t, 0, "audit", "calls", "--run", id, "--user", "ann")
	for _, call := range []string{"call_0_0", "call_1_0", "call_3_0", "call_4_0", "call_5_0", "call_6_0", "call_7_0", "call_8_0"} {
		line := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, call) {
				line = l
			}
		}
		if !strings.Contains(line, "helper") || !strings.Contains(line, "ann") || !strings.Contains(line, "offline_access openid") {
			t.Errorf("audit calls has no full line for %s:\n%s", call, out)
		}
		if call != "call_0_0" && call != "call_3_0" && call != "call_8_0" && !strings.Contains(line, "ask") {
			t.Errorf("audit calls: %s was a write and asked: %q", call, line)
		}
	}
	t.Logf("audit calls:\n%s", out)
	tokensIssued, files, hits := f.canary(t)
	t.Logf("week: canary %d tokens in %d files + outputs + logs: %d hits", tokensIssued, files, hits)
}
