package mcp_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/mcp"
)

// BenchmarkAddedLatency measures what Keel adds to one MCP call over a
// direct call of the official SDK to the same server process
// (server-everything's echo over stdio, in the sandbox): the registry's
// validation against the server's schema, the hold check, the gate (the
// default Cedar policy), the result's bounding and sanitising, and the
// three journal appends of a call (gate.decided, tool.started,
// tool.finished) in SQLite with synchronous=FULL. Direct and Keel calls
// alternate, so both see the same server; it reports p50 and p99 of
// each and the difference of the medians.
//
//	go test -run '^$' -bench AddedLatency -benchtime 500x ./tool/mcp/
func BenchmarkAddedLatency(b *testing.B) {
	dir := npmDir(b)
	e := newEnv(b, []string{dir}, nil)
	ctx := context.Background()
	c, err := mcp.Connect(ctx, mcp.Server{Name: "everything", Command: []string{"node", serverJS(dir, "server-everything"), "stdio"}}, &mcp.Options{Sandbox: e.sb})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	r := tool.NewRegistry()
	c.Register(r, nil)
	// A second session to the same kind of server for the direct calls
	// would be another process; use the SDK directly on a second
	// connection instead, started the same way.
	direct, err := sdk.NewClient(&sdk.Implementation{Name: "direct", Version: "1"}, nil).Connect(ctx,
		&sdk.CommandTransport{Command: execCommand("node", serverJS(dir, "server-everything"), "stdio")}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()
	store, err := sqlite.Open(filepath.Join(b.TempDir(), "bench.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	evs, err := store.Append(ctx, "bench", 0, journal.Draft{Type: journal.RunCreated, Time: time.Now(), Payload: []byte(`{}`)})
	if err != nil {
		b.Fatal(err)
	}
	seq := evs[0].Seq
	decide := policy.Default().Decide
	args := `{"message":"hello"}`
	var jd []time.Duration // journal appends of the current call
	var jcur time.Duration
	appendT := func(after int64, d journal.Draft) {
		t0 := time.Now()
		if _, err := store.Append(ctx, "bench", after, d); err != nil {
			b.Fatal(err)
		}
		jcur += time.Since(t0)
	}
	keelCall := func(i int) {
		jcur = 0
		call := model.ToolCall{ID: "c", Name: "everything__echo", Arguments: args}
		a, bad := r.Validate(call)
		if bad != nil {
			b.Fatal(bad.Content)
		}
		t := r.Tool(call.Name)
		if t.Hold() != "" {
			b.Fatal("held")
		}
		d := decide(ctx, &policy.Call{RunID: "bench", CallID: "c", Tool: call.Name, Effect: t.Effect.String(), Arguments: a, Server: t.Server, Facts: t.Facts(a), Sandbox: "linux", MountPath: "/workspace"})
		if d.Effect != policy.Allow {
			b.Fatalf("decision %+v", d)
		}
		db, _ := json.Marshal(d)
		appendT(seq, journal.Draft{Type: journal.GateDecided, Time: time.Now(), Payload: db})
		appendT(seq+1, journal.Draft{Type: journal.ToolStarted, Time: time.Now(), Payload: []byte(`{"call_id":"c"}`)})
		res, err := r.Run(ctx, call.Name, &tool.Request{RunID: "bench", CallID: "c", Arguments: a, Env: e.env})
		if err != nil || res.IsError {
			b.Fatalf("%v %+v", err, res)
		}
		rb, _ := json.Marshal(res)
		appendT(seq+2, journal.Draft{Type: journal.ToolFinished, Time: time.Now(), Payload: rb})
		seq += 3
	}
	directCall := func() {
		res, err := direct.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: json.RawMessage(args)})
		if err != nil || res.IsError {
			b.Fatalf("%v %+v", err, res)
		}
	}
	for range 20 { // warm both paths
		keelCall(0)
		directCall()
	}
	var kd, dd []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		directCall()
		t1 := time.Now()
		keelCall(i)
		t2 := time.Now()
		dd = append(dd, t1.Sub(t0))
		kd = append(kd, t2.Sub(t1))
		jd = append(jd, jcur)
	}
	b.StopTimer()
	q := func(d []time.Duration, p float64) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(dd, 0.5), "direct-p50-ms")
	b.ReportMetric(q(dd, 0.99), "direct-p99-ms")
	b.ReportMetric(q(kd, 0.5), "keel-p50-ms")
	b.ReportMetric(q(kd, 0.99), "keel-p99-ms")
	b.ReportMetric(q(jd, 0.5), "journal-p50-ms")
	b.ReportMetric(q(jd, 0.99), "journal-p99-ms")
	b.ReportMetric(q(kd, 0.5)-q(dd, 0.5), "added-p50-ms")
	b.ReportMetric(q(kd, 0.99)-q(dd, 0.99), "added-p99-ms")
}

func execCommand(name string, args ...string) *exec.Cmd { return exec.Command(name, args...) }
