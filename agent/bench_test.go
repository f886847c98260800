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

// timedStore records the latency of every append, deferred or not.
type timedStore struct {
	*sqlite.Store
	mu  sync.Mutex
	lat []time.Duration
}

func (s *timedStore) Append(ctx context.Context, run string, after int64, d ...journal.Draft) ([]journal.Event, error) {
	return s.timed(func() ([]journal.Event, error) { return s.Store.Append(ctx, run, after, d...) })
}

func (s *timedStore) AppendDeferred(ctx context.Context, run string, after int64, d ...journal.Draft) ([]journal.Event, error) {
	return s.timed(func() ([]journal.Event, error) { return s.Store.AppendDeferred(ctx, run, after, d...) })
}

func (s *timedStore) timed(app func() ([]journal.Event, error)) ([]journal.Event, error) {
	t0 := time.Now()
	evs, err := app()
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

// replayRun is the recorded marshmallow trajectory (74 model turns) and
// a bash tool that answers each call with its recorded output at once.
type replayRun struct {
	tr    *replay.Trajectory
	reg   *tool.Registry
	infos []agent.ToolInfo
	ws    *tool.Workspace
}

func newReplayRun(tb testing.TB) *replayRun {
	tr, err := replay.Load(filepath.Join("..", "testdata", "trajectories", "deepseek_chat_dev.traj.json"))
	if err != nil {
		tb.Fatal(err)
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
	ws, err := tool.NewWorkspace(tb.TempDir(), "/testbed", nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ws.Close() })
	return &replayRun{tr: tr, reg: reg, infos: infos, ws: ws}
}

// run creates and executes the replayed run in rt.
func (r *replayRun) run(tb testing.TB, rt *agent.Runtime) *agent.Outcome {
	ctx := context.Background()
	id, err := rt.Create(ctx, &agent.RunCreated{Task: r.tr.Task(), System: r.tr.System(), Tools: r.infos, CompletionMarker: "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", Workspace: r.ws.Root(), MountPath: "/testbed"})
	if err != nil {
		tb.Fatal(err)
	}
	out, err := rt.Execute(ctx, id, &agent.ExecParams{Wiring: agent.Wiring{Model: replay.New(r.tr, nil), Tools: r.reg, Env: &tool.Env{Workspace: r.ws}}})
	if err != nil {
		tb.Fatal(err)
	}
	if out.Status != journal.StatusCompleted {
		tb.Fatalf("run ended %s: %+v", out.Status, out.End)
	}
	return out
}

// BenchmarkReplayStep replays the recorded marshmallow trajectory
// through the real runtime and SQLite journal (newReplayRun), so the
// numbers are the runtime's own overhead per step, without tool
// execution. It reports ns per step, the journal append latency and the
// journal's fsyncs per step.
func BenchmarkReplayStep(b *testing.B) {
	r := newReplayRun(b)
	sq, err := sqlite.Open(filepath.Join(b.TempDir(), "bench.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer sq.Close()
	store := &timedStore{Store: sq}
	rt := agent.NewRuntime(store, nil)
	steps := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		steps += r.run(b, rt).State.Steps
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(steps), "ns/step")
	b.ReportMetric(float64(percentile(store.lat, 0.50).Microseconds()), "append-p50-µs")
	b.ReportMetric(float64(percentile(store.lat, 0.99).Microseconds()), "append-p99-µs")
	b.ReportMetric(float64(sq.Stats().Syncs)/float64(steps), "syncs/step")
}

// TestReplaySyncs counts the journal's fsyncs (commits with
// synchronous=FULL) on the replayed trajectory: two durable points a
// step, the turn's tool starts and its last result (docs/architecture.md,
// "Durable points"), plus the run's creation and end, where every append
// used to be one.
func TestReplaySyncs(t *testing.T) {
	r := newReplayRun(t)
	sq, err := sqlite.Open(filepath.Join(t.TempDir(), "syncs.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	out := r.run(t, agent.NewRuntime(sq, nil))
	evs, err := journal.ReadVerified(t.Context(), sq, out.State.RunID)
	if err != nil {
		t.Fatal(err)
	}
	bound := int64(2) // run.created, the end
	for _, turn := range out.State.Turns {
		if n := len(turn.Calls); n > 0 {
			bound += int64(n) + 1
		}
	}
	st := sq.Stats()
	t.Logf("%d steps, %d events: %d syncs (%.2f a step), %d deferred appends", out.State.Steps, len(evs), st.Syncs, float64(st.Syncs)/float64(out.State.Steps), st.Deferred)
	if st.Syncs > bound {
		t.Errorf("%d syncs, want at most %d (a start per call, a result per turn, the creation and the end)", st.Syncs, bound)
	}
	if st.Syncs+st.Deferred >= int64(len(evs)) && st.Deferred == 0 {
		t.Errorf("no append was deferred")
	}
}
