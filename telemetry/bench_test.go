package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/model/replay"
	"github.com/keel-run/keel/tool"
)

// BenchmarkStepOverhead replays the recorded 74-turn trajectory through
// the real runtime on an in-memory journal (so that fsyncs do not hide
// the difference), with a bash tool answering from the recording, once
// with telemetry off and once with live export on: spans derived and sent
// over OTLP/HTTP to a local receiver, Prometheus metrics counted, trace
// context on every model call and tool run, export watermarks advanced
// (durable export). The timed region includes
// flushing the export, so the per-step difference is telemetry's whole
// cost (the work off the run's goroutine too).
//
//	go test -run '^$' -bench StepOverhead ./telemetry/
func BenchmarkStepOverhead(b *testing.B) {
	tr, err := replay.Load(filepath.Join("..", "testdata", "trajectories", "deepseek_chat_dev.traj.json"))
	if err != nil {
		b.Fatal(err)
	}
	reg := tool.NewRegistry()
	tool.Add(reg, &tool.Tool{Name: "bash", Description: "recorded bash", Effect: tool.External},
		func(ctx context.Context, req *tool.Request, in struct {
			Command string `json:"command"`
		}) (*tool.Result, error) {
			r, _ := tr.ToolResult(req.CallID)
			code := r.ExitCode
			out := r.RawOutput
			if len(out) > tool.DefaultMaxResultChars {
				out = out[:tool.DefaultMaxResultChars]
			}
			if r.CallID == "" {
				out = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n" + tr.Submission()
			}
			return &tool.Result{Content: "exit code: 0\n" + out, ExitCode: &code}, nil
		})
	var infos []agent.ToolInfo
	for _, s := range reg.Specs() {
		infos = append(infos, agent.ToolInfo{ToolSpec: s, Effect: "external"})
	}
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	for _, v := range []struct {
		name         string
		on, volatile bool
	}{{"export=off", false, false}, {"export=on", true, false}, {"export=on,watermarks=off", true, true}} {
		on := v.on
		b.Run(v.name, func(b *testing.B) {
			ws, err := tool.NewWorkspace(b.TempDir(), "/testbed", nil)
			if err != nil {
				b.Fatal(err)
			}
			defer ws.Close()
			store := mem.New()
			opts := &agent.RuntimeOptions{}
			var live *Live
			var exp *Exporter
			if on {
				exp, err = NewExporter(context.Background(), &Config{Endpoint: collector.URL + "/v1/traces"})
				if err != nil {
					b.Fatal(err)
				}
				lo := &LiveOptions{Exporter: exp, Metrics: NewMetrics(nil, nil), Read: store.Read, Records: store}
				if v.volatile {
					lo.Records = nil // the export without its durability
				}
				live = NewLive(lo)
				opts.OnAppend = live.Appended
			}
			rt := agent.NewRuntime(store, opts)
			m := replay.New(tr, nil)
			ctx := context.Background()
			steps := 0
			var inRun time.Duration
			cpu0 := cpuTime()
			b.ResetTimer()
			for range b.N {
				id, err := rt.Create(ctx, &agent.RunCreated{Task: tr.Task(), System: tr.System(), Tools: infos, CompletionMarker: "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", Workspace: ws.Root(), MountPath: "/testbed"})
				if err != nil {
					b.Fatal(err)
				}
				p := &agent.ExecParams{Wiring: agent.Wiring{Model: m, Tools: reg, Env: &tool.Env{Workspace: ws}}}
				if on {
					p.Trace = TraceContext
				}
				t0 := time.Now()
				out, err := rt.Execute(ctx, id, p)
				inRun += time.Since(t0)
				if err != nil {
					b.Fatal(err)
				}
				if out.Status != journal.StatusCompleted {
					b.Fatalf("run ended %s", out.Status)
				}
				steps += out.State.Steps
			}
			if live != nil {
				if err := live.Flush(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(steps), "ns/step")
			// The runs' own wall time (what a run waits for), and the
			// process's CPU time, steadier than wall time on a shared
			// machine.
			b.ReportMetric(float64(inRun.Nanoseconds())/float64(steps), "run-ns/step")
			// CPU time is steadier than wall time on a shared machine.
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(steps), "cpu-ns/step")
			if live != nil {
				st := exp.Stats()
				b.ReportMetric(float64(st.Exported), "spans-exported")
				b.ReportMetric(float64(st.Dropped+st.Failed+live.Dropped()), "spans-lost")
				_ = live.Close(ctx)
			}
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
