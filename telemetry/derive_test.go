package telemetry

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/redact"
	"github.com/keel-run/keel/tool"
)

type echoArgs struct {
	Text string `json:"text"`
}

// testRun executes a scripted run with three model calls (two with tool
// calls, one of them denied by the policy) and returns its events.
func testRun(t *testing.T, secret string) (string, []journal.Event) {
	t.Helper()
	ws, err := tool.NewWorkspace(t.TempDir(), "/workspace", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	store := mem.New()
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rt := agent.NewRuntime(store, &agent.RuntimeOptions{
		Clock: func() time.Time { clock = clock.Add(time.Second); return clock },
		NewID: func() string { return "run1" },
	})
	reg := tool.NewRegistry()
	tool.Add(reg, &tool.Tool{Name: "echo", Description: "echo text", Effect: tool.ReadOnly, Scope: func(json.RawMessage) []string { return nil }},
		func(ctx context.Context, req *tool.Request, in echoArgs) (*tool.Result, error) {
			if in.Text == "fail" {
				return tool.Errorf("it failed"), nil
			}
			return tool.Text(in.Text), nil
		})
	c := &agent.RunCreated{Task: "say hello, the key is " + secret, Model: "openai:gpt-4o", Principal: "bot", OnBehalfOf: "ann",
		Labels: map[string]string{"task": "greet"}}
	for _, s := range reg.Specs() {
		tl := reg.Tool(s.Name)
		c.Tools = append(c.Tools, agent.ToolInfo{ToolSpec: s, Effect: tl.Effect.String()})
	}
	id, err := rt.Create(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	usage := func(in, out, cached int64) model.Usage {
		return model.Usage{InputTokens: in, OutputTokens: out, CachedInputTokens: cached}
	}
	turn := func(tr modeltest.Turn, u model.Usage) modeltest.Turn {
		tr.Response.Usage = u
		tr.Response.Model = "gpt-4o-2024-08-06"
		tr.Response.StopReason = "tool_calls"
		return tr
	}
	m := modeltest.NewScripted([]modeltest.Turn{
		turn(modeltest.Calls("", modeltest.Call("c1", "echo", map[string]any{"text": "hi " + secret}), modeltest.Call("c2", "echo", map[string]any{"text": "fail"})), usage(100, 10, 0)),
		turn(modeltest.Calls("", modeltest.Call("c3", "echo", map[string]any{"text": "no"})), usage(200, 20, 80)),
		turn(modeltest.Text("done"), usage(300, 30, 150)),
	}, nil)
	deny := func(_ context.Context, call *policy.Call) policy.Decision {
		if strings.Contains(string(call.Arguments), `"no"`) {
			return policy.Decision{Effect: policy.Deny, Policies: []string{"test.deny"}, Reason: "said no"}
		}
		return policy.Decision{Effect: policy.Allow, Policies: []string{"test.allow"}}
	}
	price := model.DefaultPrices()["gpt-4o"]
	out, err := rt.Execute(context.Background(), id, &agent.ExecParams{Wiring: agent.Wiring{Model: m, Tools: reg, Env: &tool.Env{Workspace: ws}, Policy: deny, Price: price.Cost}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusCompleted {
		t.Fatalf("run %s: %+v", out.Status, out.End)
	}
	evs, err := store.Read(context.Background(), id, 1)
	if err != nil {
		t.Fatal(err)
	}
	return id, evs
}

func attrs(s *Span) map[string]any {
	m := map[string]any{}
	for _, kv := range s.Attrs {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

func TestDeriveSpanTree(t *testing.T) {
	id, evs := testRun(t, "sk-canary0123456789abcdef")
	spans, err := Derive(id, evs, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	byName := map[string][]*Span{}
	for i := range spans {
		s := &spans[i]
		names = append(names, s.Name)
		byName[s.Name] = append(byName[s.Name], s)
		if s.TraceID != TraceID(id) {
			t.Errorf("span %s has trace %s", s.Name, s.TraceID)
		}
		if s.End.Before(s.Start) {
			t.Errorf("span %s ends before it starts", s.Name)
		}
		for _, kv := range s.Attrs {
			if strings.Contains(kv.Value.String(), "canary") {
				t.Errorf("span %s attribute %s carries content without opt-in", s.Name, kv.Key)
			}
		}
	}
	if got := len(byName["chat gpt-4o"]); got != 3 {
		t.Errorf("chat spans = %d, want 3 (%v)", got, names)
	}
	if got := len(byName["execute_tool echo"]); got != 3 {
		t.Errorf("execute_tool spans = %d, want 3 (%v)", got, names)
	}
	root := spans[len(spans)-1]
	if root.Name != "invoke_agent bot" || root.Parent.IsValid() || root.SpanID != SpanID(id, RootKey) {
		t.Fatalf("last span = %s parent %s, want the root", root.Name, root.Parent)
	}
	ra := attrs(&root)
	want := map[string]any{"gen_ai.usage.input_tokens": int64(600), "gen_ai.usage.output_tokens": int64(60), "gen_ai.usage.cache_read.input_tokens": int64(230),
		"keel.run.status": "completed", "gen_ai.agent.name": "bot", "user.id": "ann", "keel.label.task": "greet", "keel.cost.source": SourceProvider,
		"gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o", "keel.run.tool_calls": int64(3), "keel.run.model_calls": int64(3)}
	for k, v := range want {
		if ra[k] != v {
			t.Errorf("root %s = %v, want %v", k, ra[k], v)
		}
	}
	var in, cached int64
	for _, s := range byName["chat gpt-4o"] {
		a := attrs(s)
		in += a["gen_ai.usage.input_tokens"].(int64)
		cached += a["gen_ai.usage.cache_read.input_tokens"].(int64)
		if s.Parent != root.SpanID || a["gen_ai.response.model"] != "gpt-4o-2024-08-06" {
			t.Errorf("chat span %v", a)
		}
	}
	if in != 600 || cached != 230 {
		t.Errorf("chat spans sum to %d input, %d cached tokens; want 600, 230", in, cached)
	}
	// The cost counts cached tokens at the cached price.
	p := model.DefaultPrices()["gpt-4o"]
	wantCost := (float64(600-230)*p.Input + 230*p.CachedInput + 60*p.Output) / 1e6
	if c := ra["keel.cost.usd"].(float64); fmt.Sprintf("%.9f", c) != fmt.Sprintf("%.9f", wantCost) {
		t.Errorf("cost = %v, want %v", c, wantCost)
	}
	status := map[string]codes.Code{}
	for _, s := range byName["execute_tool echo"] {
		a := attrs(s)
		status[a["gen_ai.tool.call.id"].(string)] = s.Status
		if s.SpanID != SpanID(id, ToolKey(a["gen_ai.tool.call.id"].(string))) {
			t.Errorf("tool span id is not the call's")
		}
		if len(s.Events) == 0 || s.Events[0].Name != "keel.gate.decided" {
			t.Errorf("tool span %s has no gate decision event: %+v", a["gen_ai.tool.call.id"], s.Events)
		}
	}
	if diff := cmp.Diff(map[string]codes.Code{"c1": codes.Unset, "c2": codes.Error, "c3": codes.Error}, status); diff != "" {
		t.Errorf("tool span status (-want +got):\n%s", diff)
	}
	// Deterministic: the same journal derives the same spans.
	again, _ := Derive(id, evs, nil)
	if diff := cmp.Diff(spans, again, cmp.Comparer(func(a, b attribute.Value) bool { return a.String() == b.String() })); diff != "" {
		t.Errorf("second derivation differs:\n%s", diff)
	}
}

func TestContentOptInRedacts(t *testing.T) {
	id, evs := testRun(t, "sk-canary0123456789abcdef")
	spans, err := Derive(id, evs, &Options{Content: true, Redact: redact.Values("hi ")})
	if err != nil {
		t.Fatal(err)
	}
	var sawTask, sawArgs bool
	for _, s := range spans {
		for _, kv := range s.Attrs {
			v := kv.Value.String()
			if strings.Contains(v, "canary") {
				t.Errorf("span %s attribute %s leaks the secret: %s", s.Name, kv.Key, v)
			}
			if kv.Key == "gen_ai.input.messages" && strings.Contains(v, "say hello") {
				sawTask = true
			}
			if kv.Key == "gen_ai.tool.call.arguments" && strings.Contains(v, redact.Mask) {
				sawArgs = true
			}
		}
	}
	if !sawTask || !sawArgs {
		t.Errorf("content opt-in: task in spans %v, redacted arguments %v", sawTask, sawArgs)
	}
}

func TestExportThroughSDK(t *testing.T) {
	id, evs := testRun(t, "x")
	mem := tracetest.NewInMemoryExporter()
	e := newExporter(mem, &Config{Endpoint: "http://unused", ServiceName: "keel-test"})
	defer e.Shutdown(context.Background())
	n, err := e.ExportRun(context.Background(), id, evs)
	if err != nil {
		t.Fatal(err)
	}
	got := mem.GetSpans()
	if len(got) != n || n == 0 {
		t.Fatalf("exported %d spans of %d", len(got), n)
	}
	spans, _ := Derive(id, evs, nil)
	for i, s := range got {
		if s.SpanContext.TraceID() != TraceID(id) || s.SpanContext.SpanID() != spans[i].SpanID || s.Parent.SpanID() != spans[i].Parent {
			t.Errorf("span %d %s: ids %s/%s parent %s, want %s/%s parent %s", i, s.Name, s.SpanContext.TraceID(), s.SpanContext.SpanID(), s.Parent.SpanID(),
				TraceID(id), spans[i].SpanID, spans[i].Parent)
		}
		if !s.StartTime.Equal(spans[i].Start) || !s.EndTime.Equal(spans[i].End) {
			t.Errorf("span %s times differ", s.Name)
		}
	}
	if st := e.Stats(); st.Exported != uint64(n) || st.Dropped != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestQueueDropsInsteadOfBlocking(t *testing.T) {
	block := make(chan struct{})
	exp := &blockingExporter{release: block}
	e := newExporter(exp, &Config{Endpoint: "http://unused", QueueSize: 4, BatchDelay: time.Millisecond})
	id, evs := testRun(t, "x")
	spans, _ := Derive(id, evs, nil)
	for range 20 {
		e.Export(spans) // must return although nothing can be sent
	}
	close(block)
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := e.Stats()
	if st.Dropped == 0 || st.Dropped+st.Exported+st.Failed != uint64(20*len(spans)) {
		t.Errorf("stats %+v for %d spans", st, 20*len(spans))
	}
}

type blockingExporter struct {
	tracetest.InMemoryExporter
	release chan struct{}
}

func (b *blockingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	<-b.release
	return nil
}
