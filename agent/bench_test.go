package agent_test

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/model/replay"
	"github.com/keel-run/keel/tool"
)

// timedStore records the latency of every Append.
type timedStore struct {
	journal.Store
	mu  sync.Mutex
	lat []time.Duration
}

func (s *timedStore) Append(ctx context.Context, run string, after int64, d ...journal.Draft) ([]journal.Event, error) {
	t0 := time.Now()
	evs, err := s.Store.Append(ctx, run, after, d...)
	s.mu.Lock()
	s.lat = append(s.lat, time.Since(t0))
	s.mu.Unlock()
	return evs, err
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(p*float64(len(s)-1))]
}

// BenchmarkReplayStep replays the recorded marshmallow trajectory (74
// model turns) through the real runtime and SQLite journal, with a bash
// tool that answers each call with its recorded output at once, so the
// numbers are the runtime's own overhead per step, without tool
// execution. It reports ns per step and the journal append latency.
func BenchmarkReplayStep(b *testing.B) {
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
			if r.CallID == "" { // the submitting call has no recorded result
				out = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n" + tr.Submission()
			}
			return &tool.Result{Content: "exit code: 0\n" + out, ExitCode: &code}, nil
		})
	var infos []agent.ToolInfo
	for _, s := range reg.Specs() {
		infos = append(infos, agent.ToolInfo{ToolSpec: s, Effect: "external"})
	}
	ws, err := tool.NewWorkspace(b.TempDir(), "/testbed", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ws.Close()
	sq, err := sqlite.Open(filepath.Join(b.TempDir(), "bench.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer sq.Close()
	store := &timedStore{Store: sq}
	rt := agent.NewRuntime(store, nil)
	m := replay.New(tr, nil)
	ctx := context.Background()
	steps := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id, err := rt.Create(ctx, &agent.RunCreated{Task: tr.Task(), System: tr.System(), Tools: infos, CompletionMarker: "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", Workspace: ws.Root(), MountPath: "/testbed"})
		if err != nil {
			b.Fatal(err)
		}
		out, err := rt.Execute(ctx, id, &agent.ExecParams{Wiring: agent.Wiring{Model: m, Tools: reg, Env: &tool.Env{Workspace: ws}}})
		if err != nil {
			b.Fatal(err)
		}
		if out.Status != journal.StatusCompleted {
			b.Fatalf("run ended %s: %+v", out.Status, out.End)
		}
		steps += out.State.Steps
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(steps), "ns/step")
	b.ReportMetric(float64(percentile(store.lat, 0.50).Microseconds()), "append-p50-µs")
	b.ReportMetric(float64(percentile(store.lat, 0.99).Microseconds()), "append-p99-µs")
}
