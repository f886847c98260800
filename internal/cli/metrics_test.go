package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// prometheus is a real Prometheus scraping its targets every 250 ms.
type prometheus struct {
	url, promtool string
}

// scrapeJob is one scrape_configs entry: a job scraping target, with a
// bearer token read from tokenFile when it is not empty.
type scrapeJob struct {
	name, target, tokenFile string
}

func startPrometheus(t *testing.T, jobs ...scrapeJob) *prometheus {
	t.Helper()
	bin := testenv.Program(t, "KEEL_TEST_PROMETHEUS", "prometheus")
	tool := testenv.Program(t, "KEEL_TEST_PROMTOOL", "promtool")
	dir := t.TempDir()
	cfg := "global: {scrape_interval: 250ms, scrape_timeout: 200ms}\nscrape_configs:\n"
	for _, j := range jobs {
		cfg += fmt.Sprintf("  - job_name: %s\n    metrics_path: /metrics\n    static_configs: [{targets: [%q]}]\n", j.name, j.target)
		if j.tokenFile != "" {
			cfg += fmt.Sprintf("    authorization: {type: Bearer, credentials_file: %q}\n", j.tokenFile)
		}
	}
	p := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	cmd := exec.Command(bin, "--config.file="+p, "--storage.tsdb.path="+filepath.Join(dir, "data"), fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port))
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Logf("prometheus log (tail):\n%s", tail(string(b), 3000))
		}
	})
	pr := &prometheus{url: fmt.Sprintf("http://127.0.0.1:%d", port), promtool: tool}
	// Ready when a query of every target's "up" answers 1.
	pr.until(t, "up", func(v float64) bool { return v == 1 }, time.Minute)
	return pr
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// query runs `promtool query instant` and returns the samples by their
// label set ("" for a single unlabeled one).
func (p *prometheus) query(t *testing.T, expr string) map[string]float64 {
	t.Helper()
	out, err := exec.Command(p.promtool, "query", "instant", "-o", "json", p.url, expr).Output()
	if err != nil {
		t.Fatalf("promtool query %q: %v", expr, err)
	}
	return parsePromJSON(t, out)
}

// until polls expr until every sample (at least one) satisfies ok.
func (p *prometheus) until(t *testing.T, expr string, ok func(float64) bool, within time.Duration) map[string]float64 {
	t.Helper()
	// within is what a quiet machine needs; a loaded one may take longer.
	deadline := testenv.Patience(t)
	if d := time.Now().Add(within); d.After(deadline) {
		deadline = d
	}
	for {
		out, err := exec.Command(p.promtool, "query", "instant", "-o", "json", p.url, expr).Output()
		if err == nil {
			res := parsePromJSON(t, out)
			good := len(res) > 0
			for _, v := range res {
				good = good && ok(v)
			}
			if good {
				return res
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not reach the expected value within %s (last %s)", expr, within, out)
		}
		waitBriefly()
	}
}

func parsePromJSON(t *testing.T, b []byte) map[string]float64 {
	t.Helper()
	var res []struct {
		Metric map[string]string `json:"metric"`
		Value  []any             `json:"value"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("promtool output %s: %v", b, err)
	}
	out := map[string]float64{}
	for _, r := range res {
		var keys []string
		for k, v := range r.Metric {
			keys = append(keys, k+"="+v)
		}
		slices.Sort(keys)
		if len(r.Value) != 2 {
			continue
		}
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("sample %v", r.Value)
		}
		out[strings.Join(keys, ",")] = v
	}
	return out
}

// Prometheus scrapes keel serve while replayed runs of two agents execute
// at once: the active-run gauge shows them, and after they end the tool
// latency histogram's p99 and count, and the cost by agent, agree with
// the runs' journals.
func TestMetricsScrapedByPrometheus(t *testing.T) {
	db := setup(t)
	traj, err := filepath.Abs(trajectory)
	if err != nil {
		t.Fatal(err)
	}
	const runs = 4
	pol := filepath.Join(t.TempDir(), "all.cedar")
	if err := os.WriteFile(pol, []byte(`@id("all") permit(principal, action, resource);`), 0o600); err != nil {
		t.Fatal(err)
	}
	private := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s := startServe(t, "--workers", strconv.Itoa(runs), "--sandbox", "none", "--policy", pol, "--metrics-addr", private)
	c := s.apiClient(t)
	u, _ := url.Parse(s.url)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	// On the API's listener /metrics needs a token with metrics:read
	// (or admin); the private --metrics-addr listener needs none.
	scraper, err := c.CreateToken(ctx, &api.CreateToken{Name: "prometheus", Scopes: []string{api.ScopeMetricsRead}})
	if err != nil {
		t.Fatal(err)
	}
	reader, err := c.CreateToken(ctx, &api.CreateToken{Name: "reader", Scopes: []string{api.ScopeRunsRead}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		url, token string
		want       int
	}{
		{s.url + "/metrics", "", http.StatusUnauthorized},
		{s.url + "/metrics", reader.Secret, http.StatusForbidden},
		{s.url + "/metrics", scraper.Secret, http.StatusOK},
		{s.url + "/metrics", s.savedToken(t), http.StatusOK},
		{"http://" + private + "/metrics", "", http.StatusOK},
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, tt.url, nil)
		if tt.token != "" {
			req.Header.Set("Authorization", "Bearer "+tt.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.want || tt.want == http.StatusOK && !strings.Contains(string(b), "keel_runs_active") {
			t.Errorf("GET %s (token %v): %d, want %d\n%s", tt.url, tt.token != "", resp.StatusCode, tt.want, tail(string(b), 300))
		}
	}
	// What the scraper's token reads is only /metrics.
	if _, err := s.clientWith(t, scraper.Secret).Runs(ctx, nil); err == nil {
		t.Error("a metrics:read token listed runs")
	}
	tokenFile := filepath.Join(t.TempDir(), "keel-token")
	if err := os.WriteFile(tokenFile, []byte(scraper.Secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pr := startPrometheus(t, scrapeJob{"keel", u.Host, tokenFile}, scrapeJob{"keel-private", private, ""})
	for _, name := range []string{"alpha", "beta"} {
		if _, err := c.CreateAgent(ctx, &api.CreateAgent{Name: name, Kind: "employee"}); err != nil {
			t.Fatal(err)
		}
	}
	ids := make([]string, runs)
	var wg sync.WaitGroup
	for i := range runs {
		ws := t.TempDir()
		agentName := []string{"alpha", "beta"}[i%2]
		run, err := c.CreateRun(ctx, &api.CreateRun{Model: "replay:" + traj, Workspace: ws, MountPath: "/testbed", Agent: agentName})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = run.ID
	}
	// While they execute, the gauge counts them (all at once: as many
	// workers as runs).
	pr.until(t, `keel_runs_active{job="keel"}`, func(v float64) bool { return v == runs }, 2*time.Minute)
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Follow the run to its end, granting what the default
			// policy asks a person for.
			for e, err := range c.Events(ctx, id, nil) {
				if err != nil {
					t.Errorf("follow %s: %v", id, err)
					return
				}
				if e.Type == journal.ApprovalRequested {
					if r, err := c.Run(ctx, id); err == nil {
						for _, p := range r.Pending {
							_, _ = c.Approve(ctx, id, p.CallID, &api.Decide{Reason: "metrics test"})
						}
					}
				}
				if journal.StatusOf(e.Type).Terminal() {
					return
				}
			}
		}()
	}
	wg.Wait()
	pr.until(t, `keel_runs{job="keel",status="completed"}`, func(v float64) bool { return v == runs }, time.Minute)
	pr.until(t, "keel_runs_active", func(v float64) bool { return v == 0 }, time.Minute) // both jobs

	// Expected values from the journals.
	costByAgent := map[string]float64{}
	var durations []float64
	allowed := 0
	for i, id := range ids {
		st, evs := loadRun(t, db, id)
		if st.Status != journal.StatusCompleted {
			t.Fatalf("run %d: %s", i, st.Status)
		}
		costByAgent[st.Created.Principal] += st.Cost
		for _, e := range evs {
			if e.Type == journal.GateDecided {
				p, _ := agent.Decode(&e)
				if g := p.(*agent.GateDecided); g.Effect == "allow" && slices.Contains(g.Policies, "all") {
					allowed++
				}
			}
			if e.Type != journal.ToolFinished {
				continue
			}
			p, _ := agent.Decode(&e)
			if f := p.(*agent.ToolFinished); !f.Synthetic {
				durations = append(durations, float64(f.DurationMS)/1000)
			}
		}
	}
	// The counters reach their final values at the next scrape.
	pr.until(t, "sum by (job) (keel_tool_duration_seconds_count)", func(v float64) bool { return v == float64(len(durations)) }, time.Minute)
	if v := pr.query(t, `sum(keel_gate_decisions_total{job="keel",effect="allow",policy="all"})`)[""]; v != float64(allowed) || allowed == 0 {
		t.Errorf("gate decisions allowed by policy all = %v, the journals have %d", v, allowed)
	}
	// Replayed calls spend nothing: the metrics count them under source
	// offline with cost 0, as the API's cost report (keel cost) does,
	// although the journals hold the recorded trajectory's cost.
	got := pr.query(t, `sum by (agent, source) (keel_cost_usd_total{job="keel"})`)
	for a, recorded := range costByAgent {
		if v, ok := got["agent="+a+",source=offline"]; !ok || v != 0 || recorded == 0 {
			t.Errorf("cost of agent %s = %v (found: %v), want 0 under source offline (the recording's cost %v is no spend)", a, v, ok, recorded)
		}
	}
	if len(got) != len(costByAgent) {
		t.Errorf("cost by agent and source: %v, want only source offline of agents %v", got, costByAgent)
	}
	rep, err := c.Cost(ctx, "agent", "1d")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Rows {
		if r.CostUSD != 0 || r.OfflineCalls != r.Calls || r.Calls == 0 || r.Runs != runs/2 || r.Source != "offline" {
			t.Errorf("GET /v1/cost row %+v; the journals say $%v", r, costByAgent[r.Key])
		}
	}
	p99 := pr.query(t, `histogram_quantile(0.99, sum by (le) (keel_tool_duration_seconds_bucket{job="keel"}))`)[""]
	slices.Sort(durations)
	exact := durations[int(math.Ceil(0.99*float64(len(durations))))-1]
	lo, hi := bucketOf(exact)
	if p99 < lo || p99 > hi {
		t.Errorf("p99 tool latency %.4fs is outside the bucket (%g, %g] of the journals' p99 %.4fs", p99, lo, hi, exact)
	}
	t.Logf("%d runs: cost by agent %v; p99 tool latency %.4fs (journal p99 %.4fs, bucket (%g, %g]); %d tool calls", runs, got, p99, exact, lo, hi, len(durations))
}

// bucketOf returns the bounds of the keel_tool_duration_seconds bucket
// holding v.
func bucketOf(v float64) (lo, hi float64) {
	bounds := []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	for _, b := range bounds {
		if v <= b {
			return lo, b
		}
		lo = b
	}
	return lo, math.Inf(1)
}

// The cluster shape's metrics: keel serve --temporal hands runs to a
// keel worker on one PostgreSQL journal; Prometheus scrapes the server
// (with a metrics:read token) and the worker (its --metrics-addr). Each
// event is counted once, by the process that appended it, so sums over
// both equal the journal; the journal-wide gauges are equal on both.
func TestMetricsOnTemporalPath(t *testing.T) {
	setup(t)
	pg := testenv.Postgres(t)
	tp := testenv.Temporal(t)
	sm, wm := fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s := startServe(t, "--db", pg, "--temporal", tp, "--metrics-addr", sm)
	startWorker(t, "--db", pg, "--temporal", tp, "--workspace-root", os.TempDir(), "--workers", "2", "--metrics-addr", wm)
	c := s.apiClient(t)
	ctx := t.Context()
	tok, err := c.CreateToken(ctx, &api.CreateToken{Name: "prometheus", Scopes: []string{api.ScopeMetricsRead}})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "keel-token")
	if err := os.WriteFile(tokenFile, []byte(tok.Secret), 0o600); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(s.url)
	pr := startPrometheus(t, scrapeJob{"keel", u.Host, tokenFile}, scrapeJob{"keel-worker", wm, ""})
	const runs = 3
	var ids []string
	for i := range runs {
		cmds := make([][]fcall, 0, 4)
		for k := range 3 {
			cmds = append(cmds, []fcall{sh(fmt.Sprintf("echo %d-%d >> n", i, k))})
		}
		tr := writeTrajectory(t, "count", append(cmds, []fcall{})...)
		run, err := c.CreateRun(ctx, &api.CreateRun{Model: "replay:" + tr, Workspace: t.TempDir(), MountPath: "/testbed"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, run.ID)
	}
	store, err := journal.Open(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var steps, tools int
	for _, id := range ids {
		if end := untilStopped(t, c, id, 1); end.Type != journal.RunCompleted {
			t.Fatalf("run %s stopped with %s", id, end.Type)
		}
		evs, err := journal.ReadVerified(ctx, store, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			switch e.Type {
			case journal.ModelResponded:
				steps++
			case journal.ToolFinished:
				p, _ := agent.Decode(&e)
				if !p.(*agent.ToolFinished).Synthetic {
					tools++
				}
			}
		}
	}
	pr.until(t, "sum(keel_steps_total)", func(v float64) bool { return v == float64(steps) }, time.Minute)
	pr.until(t, "sum(keel_tool_duration_seconds_count)", func(v float64) bool { return v == float64(tools) }, time.Minute)
	pr.until(t, `sum(keel_runs_ended_total{status="completed"})`, func(v float64) bool { return v == runs }, time.Minute)
	// The worker executed the steps: its own counters have them.
	if v := pr.query(t, `sum(keel_steps_total{job="keel-worker"})`)[""]; v != float64(steps) {
		t.Errorf("worker's steps = %v, want %d (it executed every step)", v, steps)
	}
	byJob := pr.until(t, `keel_runs{status="completed"}`, func(v float64) bool { return v == runs }, time.Minute)
	if len(byJob) != 2 {
		t.Errorf("keel_runs{status=completed} by job: %v, want the same value from both", byJob)
	}
	t.Logf("%d runs on the Temporal path: %d steps, %d tool calls summed over serve and worker; keel_runs %v", runs, steps, tools, byJob)
}
