package cli_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model/replay"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/telemetry"
)

// jaeger is a real Jaeger v2 (OTLP receiver, in-memory trace store and
// query API) on loopback ports, stopped when the test ends.
type jaeger struct {
	otlp, query string // base URLs
	metrics     string // the collector's own Prometheus metrics
}

func freePort(t *testing.T) int {
	t.Helper()
	return freePorts(t, 1)[0]
}

// freePorts returns n distinct loopback ports that were free a moment
// ago: all n are held open together while they are picked, so that one
// call never returns the same port twice. Another process may still
// take one before its user binds it.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// errAddrInUse is a Jaeger that exited because one of its addresses was
// taken.
var errAddrInUse = errors.New("jaeger exited: address already in use")

// startJaeger starts a Jaeger on fresh loopback ports. The ports are
// picked free and then handed to Jaeger, so another process (an
// outgoing connection's ephemeral port is drawn from the same range) can
// take one in between; Jaeger then exits at once, and is started again
// on other ports.
func startJaeger(t *testing.T) *jaeger {
	t.Helper()
	bin := testenv.Program(t, "KEEL_TEST_JAEGER", "jaeger")
	const attempts = 5
	for i := 1; ; i++ {
		j, err := tryJaeger(t, bin, freePorts(t, 4))
		if err == nil {
			return j
		}
		if !errors.Is(err, errAddrInUse) || i == attempts {
			t.Fatalf("jaeger did not start (attempt %d of %d): %v", i, attempts, err)
		}
		t.Logf("jaeger start %d of %d: %v; starting again on other ports", i, attempts, err)
	}
}

// tryJaeger starts one Jaeger on ports (OTLP receiver, query HTTP,
// query gRPC, metrics) and waits until its query API and its OTLP
// receiver answer, or until it exits.
func tryJaeger(t *testing.T, bin string, ports []int) (*jaeger, error) {
	t.Helper()
	otlp, qhttp, qgrpc, mport := ports[0], ports[1], ports[2], ports[3]
	cfg := fmt.Sprintf(`service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces: {receivers: [otlp], processors: [batch], exporters: [jaeger_storage_exporter]}
  telemetry:
    metrics:
      level: basic
      readers: [{pull: {exporter: {prometheus: {host: "127.0.0.1", port: %d}}}}]
    logs: {level: warn}
extensions:
  jaeger_query:
    storage: {traces: mem}
    http: {endpoint: "127.0.0.1:%d"}
    grpc: {endpoint: "127.0.0.1:%d"}
  jaeger_storage:
    backends: {mem: {memory: {max_traces: 10000}}}
receivers:
  otlp:
    protocols:
      http: {endpoint: "127.0.0.1:%d"}
processors:
  batch: {timeout: 100ms}
exporters:
  jaeger_storage_exporter: {trace_storage: mem}
`, mport, qhttp, qgrpc, otlp)
	dir := t.TempDir()
	p := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "jaeger.log")
	cmd := exec.Command(bin, "--config", p)
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	var ready bool
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if ready && t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("jaeger log:\n%s", b)
		}
	})
	j := &jaeger{otlp: fmt.Sprintf("http://127.0.0.1:%d", otlp), query: fmt.Sprintf("http://127.0.0.1:%d", qhttp), metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", mport)}
	deadline := testenv.Patience(t)
	for {
		// Jaeger starts its query API before its receiver, and a port
		// taken by another process accepts a bare connection: ask the
		// receiver for an empty OTLP export, which only it answers.
		if answers(j.query+"/api/services", "") && answers(j.otlp+"/v1/traces", "{}") {
			ready = true
			return j, nil
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logPath)
			if bytes.Contains(b, []byte("address already in use")) {
				return nil, fmt.Errorf("%w (%v): %s", errAddrInUse, waitErr, lastLine(b, "address already in use"))
			}
			return nil, fmt.Errorf("jaeger exited: %v\njaeger log:\n%s", waitErr, b)
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("jaeger did not answer within 60s\njaeger log:\n%s", b)
		}
		waitBriefly()
	}
}

// answers reports whether url answers 200 to a GET, or to a POST of the
// JSON body if one is given.
func answers(url, body string) bool {
	var resp *http.Response
	var err error
	if body == "" {
		resp, err = http.Get(url)
	} else {
		resp, err = http.Post(url, "application/json", strings.NewReader(body))
	}
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// lastLine returns the last line of b that contains sub.
func lastLine(b []byte, sub string) string {
	var last string
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, sub) {
			last = strings.TrimSpace(line)
		}
	}
	return last
}

// A Jaeger whose OTLP port another process holds is reported as
// errAddrInUse, the error startJaeger starts again on; with the port
// free, the same ports serve.
func TestJaegerPortTaken(t *testing.T) {
	bin := testenv.Program(t, "KEEL_TEST_JAEGER", "jaeger")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ports := append([]int{ln.Addr().(*net.TCPAddr).Port}, freePorts(t, 3)...)
	_, err = tryJaeger(t, bin, ports)
	if !errors.Is(err, errAddrInUse) {
		ln.Close()
		t.Fatalf("jaeger on a taken port: %v, want errAddrInUse", err)
	}
	ln.Close()
	if _, err := tryJaeger(t, bin, ports); err != nil {
		t.Fatalf("jaeger on the freed ports: %v", err)
	}
}

// accepted returns the number of spans Jaeger's OTLP receiver accepted
// so far (its otelcol_receiver_accepted_spans counter).
func (j *jaeger) accepted(t *testing.T) int {
	t.Helper()
	resp, err := http.Get(j.metrics)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	n := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "otelcol_receiver_accepted_spans") {
			continue
		}
		f := strings.Fields(line)
		var v float64
		if _, err := fmt.Sscan(f[len(f)-1], &v); err == nil {
			n += v
		}
	}
	return int(n)
}

// acceptedAtLeast polls accepted until it reaches n (or a deadline).
func (j *jaeger) acceptedAtLeast(t *testing.T, n int) int {
	t.Helper()
	deadline := testenv.Patience(t)
	for {
		got := j.accepted(t)
		if got >= n || time.Now().After(deadline) {
			return got
		}
		waitBriefly()
	}
}

// waitBriefly yields for a moment while polling an external server's
// state (there is no notification to wait on).
func waitBriefly() { time.Sleep(50 * time.Millisecond) }

type jSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64 `json:"startTime"`
	Duration  int64 `json:"duration"`
	Tags      []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
}

func (s *jSpan) tag(k string) any {
	for _, t := range s.Tags {
		if t.Key == k {
			return t.Value
		}
	}
	return nil
}

func (s *jSpan) intTag(k string) int64 {
	switch v := s.tag(k).(type) {
	case float64:
		return int64(v)
	case json.Number:
		n, _ := v.Int64()
		return n
	}
	return 0
}

// traceSpans returns the spans Jaeger holds for trace id, polling until
// it holds at least want distinct ones (or the deadline passes).
func (j *jaeger) traceSpans(t *testing.T, id string, want int) []jSpan {
	t.Helper()
	deadline := testenv.Patience(t)
	var spans []jSpan
	for {
		spans = spans[:0]
		resp, err := http.Get(j.query + "/api/traces/" + id)
		if err == nil {
			var body struct {
				Data []struct {
					Spans []jSpan `json:"spans"`
				} `json:"data"`
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && json.Unmarshal(b, &body) == nil {
				for _, d := range body.Data {
					spans = append(spans, d.Spans...)
				}
			}
		}
		// Distinct spans: a span exported again (a restarted server's
		// sweep of spans no collector acknowledged before a kill) is
		// stored twice and must not end the wait for the others.
		ids := map[string]bool{}
		for _, s := range spans {
			ids[s.SpanID] = true
		}
		if len(ids) >= want || time.Now().After(deadline) {
			return spans
		}
		waitBriefly()
	}
}

// runTotals counts a run's model calls and tool calls in the journal.
type runTotals struct {
	modelCalls, toolCalls int
}

func totalsOf(t *testing.T, evs []journal.Event) runTotals {
	t.Helper()
	var r runTotals
	for _, e := range evs {
		switch e.Type {
		case journal.ModelResponded, journal.ModelFailed:
			r.modelCalls++
		case journal.ToolFinished:
			r.toolCalls++
		}
	}
	return r
}

func checkTrace(t *testing.T, runID string, spans []jSpan, tot runTotals, input, output int64) {
	t.Helper()
	// Export is at least once: a span the killed process sent but had not
	// recorded as acknowledged is sent again by the resume, and the
	// collector stores both copies. Count each span once.
	ids := map[string]bool{}
	var distinct []jSpan
	for _, s := range spans {
		if !ids[s.SpanID] {
			distinct = append(distinct, s)
		}
		ids[s.SpanID] = true
	}
	spans = distinct
	var chats, tools int
	var in, out int64
	var root *jSpan
	for i := range spans {
		s := &spans[i]
		if s.TraceID != telemetry.TraceID(runID).String() {
			t.Errorf("span %s in trace %s, want the run's %s", s.OperationName, s.TraceID, telemetry.TraceID(runID))
		}
		switch {
		case strings.HasPrefix(s.OperationName, "chat "):
			chats++
			in += s.intTag("gen_ai.usage.input_tokens")
			out += s.intTag("gen_ai.usage.output_tokens")
		case strings.HasPrefix(s.OperationName, "execute_tool "):
			tools++
			if s.tag("gen_ai.tool.call.id") == nil || s.tag("gen_ai.tool.name") == nil {
				t.Errorf("execute_tool span without call id or tool name: %+v", s.Tags)
			}
		case strings.HasPrefix(s.OperationName, "invoke_agent "):
			root = s
		}
		if len(s.References) == 0 && !strings.HasPrefix(s.OperationName, "invoke_agent ") {
			t.Errorf("span %s has no parent", s.OperationName)
		}
		for _, r := range s.References {
			if !ids[r.SpanID] {
				t.Errorf("span %s has a parent %s that is not in the trace", s.OperationName, r.SpanID)
			}
		}
	}
	if chats != tot.modelCalls || tools != tot.toolCalls {
		t.Errorf("chat spans %d, execute_tool spans %d; the journal has %d model calls, %d tool calls", chats, tools, tot.modelCalls, tot.toolCalls)
	}
	if in != input || out != output {
		t.Errorf("chat spans sum to %d input, %d output tokens; the run's totals are %d, %d", in, out, input, output)
	}
	if root == nil {
		t.Fatal("no invoke_agent span")
	}
	if root.intTag("gen_ai.usage.input_tokens") != input || root.intTag("gen_ai.usage.output_tokens") != output {
		t.Errorf("root span tokens %d/%d, want %d/%d", root.intTag("gen_ai.usage.input_tokens"), root.intTag("gen_ai.usage.output_tokens"), input, output)
	}
	t.Logf("trace %s: %d spans, %d chat (= %d model calls), %d execute_tool (= %d tool calls), tokens %d in / %d out",
		telemetry.TraceID(runID), len(spans), chats, tot.modelCalls, tools, tot.toolCalls, in, out)
}

// spanKey identifies a span with everything an exporter decides: ids,
// name, times, parent and tags.
func spanKeys(spans []jSpan) []string {
	var out []string
	for _, s := range spans {
		tags := make([]string, 0, len(s.Tags))
		for _, tg := range s.Tags {
			if tg.Key == "otel.scope.name" || tg.Key == "otel.scope.version" {
				continue
			}
			tags = append(tags, fmt.Sprintf("%s=%v", tg.Key, tg.Value))
		}
		sort.Strings(tags)
		var parents []string
		for _, r := range s.References {
			parents = append(parents, r.SpanID)
		}
		out = append(out, fmt.Sprintf("%s %s %s %d %d %v %v", s.TraceID, s.SpanID, s.OperationName, s.StartTime, s.Duration, parents, tags))
	}
	sort.Strings(out)
	return out
}

// A replayed recorded trajectory exported live to a real Jaeger: one
// chat span per model call, one execute_tool span per tool call, token
// attributes that sum to the run's totals; `keel runs trace` exports the
// same spans again to a second Jaeger.
func TestTraceReplayToJaeger(t *testing.T) {
	db := setup(t)
	j := startJaeger(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", j.otlp)
	t.Setenv("OTEL_SERVICE_NAME", "keel-test")
	ws := t.TempDir()
	code, _, errOut := keel(t, "run", "--model", "replay:"+trajectory, "--workspace", ws, "--mount-path", "/testbed", "--env", "PYTHONPATH=/testbed/src", "-q")
	if code != 0 {
		t.Fatalf("keel run = %d\n%s", code, errOut)
	}
	id, st := lastRun(t, db)
	_, evs := loadRun(t, db, id)
	tot := totalsOf(t, evs)
	want, err := telemetry.Derive(id, evs, nil)
	if err != nil {
		t.Fatal(err)
	}
	spans := j.traceSpans(t, telemetry.TraceID(id).String(), len(want))
	if len(spans) != len(want) {
		t.Fatalf("jaeger has %d spans of the run, want %d", len(spans), len(want))
	}
	checkTrace(t, id, spans, tot, st.Usage.InputTokens, st.Usage.OutputTokens)

	// Export again, from the journal, to a fresh Jaeger: the same spans.
	j2 := startJaeger(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	code, out, errOut := keel(t, "runs", "trace", id, "--otlp", j2.otlp)
	if code != 0 || strings.TrimSpace(out) != telemetry.TraceID(id).String() {
		t.Fatalf("keel runs trace = %d %q\n%s", code, out, errOut)
	}
	again := j2.traceSpans(t, telemetry.TraceID(id).String(), len(want))
	a, b := spanKeys(spans), spanKeys(again)
	if len(a) != len(b) {
		t.Fatalf("re-export: %d spans, live: %d", len(b), len(a))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("re-exported span differs:\nlive:   %s\nagain:  %s", a[i], b[i])
			break
		}
	}
}

// A run killed with SIGKILL mid-way and resumed by another process is
// one whole trace: the resuming process exports the spans the killed one
// had not got acknowledged (after the run's export watermark), so Jaeger
// holds every span of the run, each in the run's trace with its parent,
// and the root spans the whole run. Killed at several points.
func TestTraceKilledRunIsOneTrace(t *testing.T) {
	setup(t)
	j := startJaeger(t)
	for _, killAt := range []int64{40, 122, 251} {
		t.Run(fmt.Sprintf("killed after event %d", killAt), func(t *testing.T) {
			ws := t.TempDir()
			db := filepath.Join(t.TempDir(), "kill.db")
			env := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + j.otlp, "OTEL_SERVICE_NAME=keel-kill"}
			accepted0 := j.accepted(t)
			cmd := child(t, env, "run", "--db", db, "--model", "replay:"+trajectory, "--workspace", ws, "--mount-path", "/testbed", "-q")
			id := waitForEvent(t, db, killAt)
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			before, _ := loadRun(t, db, id)
			for _, kv := range env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			code, _, errOut := keel(t, "runs", "resume", "--db", db, id, "-q")
			if code != 0 {
				t.Fatalf("resume = %d\n%s", code, errOut)
			}
			st, evs := loadRun(t, db, id)
			if st.Status != journal.StatusCompleted {
				t.Fatalf("after resume: %s", st.Status)
			}
			want, err := telemetry.Derive(id, evs, nil)
			if err != nil {
				t.Fatal(err)
			}
			lostBefore := 0 // what the old live export lost: the unacknowledged spans
			for _, s := range want {
				if s.EndSeq <= before.LastSeq {
					lostBefore++
				}
			}
			spans := j.traceSpans(t, telemetry.TraceID(id).String(), len(want))
			ids := map[string]bool{}
			var root *jSpan
			for i, s := range spans {
				if s.TraceID != telemetry.TraceID(id).String() {
					t.Errorf("span %s is in trace %s", s.OperationName, s.TraceID)
				}
				ids[s.SpanID] = true
				if strings.HasPrefix(s.OperationName, "invoke_agent ") {
					root = &spans[i]
				}
			}
			for _, s := range want {
				if !ids[s.SpanID.String()] {
					t.Errorf("span %s %s (ended at event %d, killed after %d) is missing", s.Name, s.SpanID, s.EndSeq, before.LastSeq)
				}
			}
			if root == nil {
				t.Fatal("no root span")
			}
			if start := time.UnixMicro(root.StartTime); !start.Equal(evs[0].Time.Truncate(time.Microsecond)) {
				t.Errorf("root starts %s, the run was created %s", start, evs[0].Time)
			}
			for _, s := range spans {
				if s.StartTime+s.Duration > root.StartTime+root.Duration {
					t.Errorf("span %s ends after the run", s.OperationName)
				}
			}
			checkTrace(t, id, spans, totalsOf(t, evs), st.Usage.InputTokens, st.Usage.OutputTokens)
			// The collector's own count of spans it accepted: every span
			// once, plus any that the killed process had sent but not yet
			// recorded as acknowledged.
			accepted := j.acceptedAtLeast(t, accepted0+len(want)) - accepted0
			t.Logf("killed after event %d of %d: jaeger holds %d of %d spans (%d ended by the kill); the collector accepted %d spans (%d sent twice)",
				before.LastSeq, len(evs), len(ids), len(want), lostBefore, accepted, accepted-len(want))
		})
	}
}

// keel cost groups the journal's model calls; a run's figures equal the
// sums of its model.responded events, and say where the tokens came from.
// Replayed calls spent nothing: their tokens are counted, the cost the
// recording journaled is not, and the report says so (fresh-user trial
// 12, N19: offline runs were reported as spend, and the scripted model's
// calls as calls to price).
func TestCostCommand(t *testing.T) {
	db := setup(t)
	traj := crashFixture(t)
	for _, label := range []string{"task=A", "task=B"} {
		if code, _, errOut := keel(t, "run", "--model", "replay:"+traj, "--workspace", t.TempDir(), "-q", "--label", label); code != 0 {
			t.Fatalf("run: %d\n%s", code, errOut)
		}
	}
	code, out, errOut := keel(t, "cost", "--by", "label", "--since", "1d", "--json")
	if code != 0 {
		t.Fatalf("cost = %d\n%s", code, errOut)
	}
	// The API's report (GET /v1/cost), as keel --server cost prints it.
	var rep api.CostReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	runs, _ := openDB(t, db).Runs(t.Context(), nil)
	var calls int
	var cost float64
	for _, r := range runs {
		st, _ := loadRun(t, db, r.RunID)
		calls += st.Steps
		cost += st.Cost
	}
	if len(rep.Rows) != 2 || rep.Rows[0].Runs != 1 || rep.Total.Runs != 2 || rep.Total.Calls != calls || rep.Total.InputTokens == 0 || rep.Since == nil {
		t.Errorf("report %+v; the journal has %d calls", rep, calls)
	}
	if rep.Total.CostUSD != 0 || rep.Total.OfflineCalls != calls || rep.Total.UnpricedCalls != 0 || rep.Total.Source != "offline" {
		t.Errorf("replayed calls (journaled cost %v): total %+v, want cost 0, %d offline calls, source offline", cost, rep.Total, calls)
	}
	if code, _, errOut := keel(t, "demo", "--keep=false"); code != 0 {
		t.Fatalf("demo = %d\n%s", code, errOut)
	}
	code, out, _ = keel(t, "cost")
	if code != 0 || !strings.Contains(out, "keel-cli") || !strings.Contains(out, "SOURCE") || !strings.Contains(out, "replayed a recording or were the scripted demo model's: nothing was spent") || strings.Contains(out, "have no price") {
		t.Errorf("keel cost = %d:\n%s", code, out)
	}
	if code, _, errOut := keel(t, "cost", "--by", "weather"); code != 2 {
		t.Errorf("--by weather = %d: %s", code, errOut)
	}
	if code, _, _ := keel(t, "run", "--model", "replay:"+traj, "--workspace", t.TempDir(), "--label", "keel.x=1"); code != 2 {
		t.Errorf("--label keel.x = %d, want a usage error", code)
	}
}

// With tracing on, each model request carries the traceparent of its
// chat span (the recorded raw responses of the replayed trajectory served
// as an OpenAI-compatible endpoint) and each shell command the
// TRACEPARENT of its execute_tool span: the ids of the run's derived
// trace. A collector that is not there fails the export, not the run.
func TestTraceContextPropagated(t *testing.T) {
	db := setup(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	tr, err := replay.Load(trajectory)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	h := replay.NewHandler(tr)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			mu.Lock()
			seen = append(seen, r.Header.Get("traceparent"))
			mu.Unlock()
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	code, _, errOut := keel(t, "run", "--model", "openai-compatible:deepseek-chat@"+srv.URL+"/v1", "--workspace", t.TempDir(), "-q",
		"--max-steps", "3", "--sandbox", "none", tr.Task())
	if code != 1 || !strings.Contains(errOut, "max_steps") {
		t.Fatalf("run = %d, want the step limit\n%s", code, errOut)
	}
	if !strings.Contains(errOut, "failed") {
		t.Errorf("no report of the failed export:\n%s", errOut)
	}
	chats := func() []string {
		id, _ := lastRun(t, db)
		_, evs := loadRun(t, db, id)
		spans, err := telemetry.Derive(id, evs, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range spans {
			if strings.HasPrefix(s.Name, "chat ") {
				out = append(out, fmt.Sprintf("00-%s-%s-01", s.TraceID, s.SpanID))
			}
		}
		return out
	}()
	mu.Lock()
	if strings.Join(seen, " ") != strings.Join(chats, " ") || len(seen) != 3 {
		t.Errorf("model requests carried %v, the chat spans are %v", seen, chats)
	}
	mu.Unlock()

	traj := writeTrajectory(t, "show the trace context",
		[]fcall{sh("echo \"$TRACEPARENT\" > tp.txt")},
		[]fcall{sh("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat tp.txt")},
	)
	ws := t.TempDir()
	if code, _, errOut := keel(t, "run", "--model", "replay:"+traj, "--workspace", ws, "-q"); code != 0 {
		t.Fatalf("run = %d\n%s", code, errOut)
	}
	id, _ := lastRun(t, db)
	_, evs := loadRun(t, db, id)
	spans, _ := telemetry.Derive(id, evs, nil)
	var toolTP string
	for _, s := range spans {
		if s.Name == "execute_tool bash" {
			toolTP = fmt.Sprintf("00-%s-%s-01", s.TraceID, s.SpanID)
			break
		}
	}
	b, err := os.ReadFile(filepath.Join(ws, "tp.txt"))
	if err != nil || strings.TrimSpace(string(b)) != toolTP {
		t.Errorf("TRACEPARENT in the command = %q (%v), the execute_tool span is %s", b, err, toolTP)
	}
}

// keel serve killed with SIGKILL while it executes a replayed run, then
// started again on the same journal: the new server resumes the run and
// sends the spans the killed one had not got acknowledged, so Jaeger
// holds the whole trace.
func TestTraceServeKilledIsOneTrace(t *testing.T) {
	db := setup(t)
	j := startJaeger(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", j.otlp)
	t.Setenv("OTEL_SERVICE_NAME", "keel-serve-kill")
	traj, err := filepath.Abs(trajectory)
	if err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(t.TempDir(), "all.cedar")
	if err := os.WriteFile(pol, []byte(`@id("all") permit(principal, action, resource);`), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--sandbox", "none", "--policy", pol}
	s1 := startServe(t, args...)
	c := s1.apiClient(t)
	run, err := c.CreateRun(t.Context(), &api.CreateRun{Model: "replay:" + traj, Workspace: t.TempDir(), MountPath: "/testbed"})
	if err != nil {
		t.Fatal(err)
	}
	for e, err := range c.Events(t.Context(), run.ID, &client.EventsParams{From: 1}) {
		if err != nil {
			t.Fatal(err)
		}
		if e.Seq >= 150 {
			break
		}
		if journal.StatusOf(e.Type).Terminal() {
			t.Fatalf("the run ended (%s) before the kill point", e.Type)
		}
	}
	s1.cmd.Process.Signal(syscall.SIGKILL)
	<-s1.done
	before, _ := loadRun(t, db, run.ID)
	s2 := startServe(t, args...)
	if end := untilStopped(t, s2.clientWith(t, s1.savedToken(t)), run.ID, 1); end.Type != journal.RunCompleted {
		t.Fatalf("after the restart the run stopped with %s\n%s", end.Type, s2.stderr)
	}
	st, evs := loadRun(t, db, run.ID)
	want, err := telemetry.Derive(run.ID, evs, nil)
	if err != nil {
		t.Fatal(err)
	}
	spans := j.traceSpans(t, telemetry.TraceID(run.ID).String(), len(want))
	ids := map[string]bool{}
	for _, s := range spans {
		ids[s.SpanID] = true
	}
	missing := 0
	for _, s := range want {
		if !ids[s.SpanID.String()] {
			missing++
			t.Errorf("span %s (ended at event %d; killed after %d) is missing", s.Name, s.EndSeq, before.LastSeq)
		}
	}
	checkTrace(t, run.ID, spans, totalsOf(t, evs), st.Usage.InputTokens, st.Usage.OutputTokens)
	t.Logf("keel serve killed after event %d of %d: jaeger holds %d of %d spans (%d missing)", before.LastSeq, len(evs), len(ids), len(want), missing)
}
