package cluster_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/cluster"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/postgres"
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

// Lock passes the lease through (the runtime takes it per execution).
func (s *timedStore) Lock(ctx context.Context, runID string) (func(), error) {
	if l, ok := s.Store.(journal.Locker); ok {
		return l.Lock(ctx, runID)
	}
	return func() {}, nil
}

func (s *timedStore) Holder(ctx context.Context, runID string) (string, error) {
	if l, ok := s.Store.(journal.Locker); ok {
		return l.Holder(ctx, runID)
	}
	return "", nil
}

// Head passes the index check through.
func (s *timedStore) Head(ctx context.Context, runID string) (int64, string, error) {
	if h, ok := s.Store.(journal.Head); ok {
		return h.Head(ctx, runID)
	}
	return 0, "", journal.ErrNotFound
}

func pct(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[int(p*float64(len(s)-1))].Microseconds())
}

// recordedBash is the replayed trajectory's bash tool answering each call
// with its recorded output at once (as agent's BenchmarkReplayStep), so
// that the numbers are Keel's own cost per step without tool execution.
func recordedBash(tr *replay.Trajectory) (*tool.Registry, []agent.ToolInfo) {
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
	return reg, infos
}

// BenchmarkStep replays the recorded 74-turn marshmallow trajectory with
// its recorded tool results, on SQLite and on PostgreSQL, two ways: in
// one process (the runtime executes the run start to end, as `keel run`
// and `keel serve` do) and through the Temporal workflow (one activity
// per model call or gate-and-tools batch, on the SDK's in-memory test
// server, so Temporal's own round trips are not counted). It reports the
// time per step (one model turn), the journal append latency p50/p99 and
// runs per minute.
//
//	go test -run '^$' -bench Step -benchtime 5x ./cluster/
func BenchmarkStep(b *testing.B) {
	tr, err := replay.Load(filepath.Join("..", "testdata", "trajectories", "deepseek_chat_dev.traj.json"))
	if err != nil {
		b.Fatal(err)
	}
	stores := map[string]func(b *testing.B) journal.Store{
		"sqlite": func(b *testing.B) journal.Store {
			s, err := sqlite.Open(filepath.Join(b.TempDir(), "j.db"), nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		},
		"postgres": func(b *testing.B) journal.Store {
			s, err := postgres.Open(b.Context(), testenv.Postgres(b))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		},
	}
	for _, name := range []string{"sqlite", "postgres"} {
		for _, mode := range []string{"process", "workflow"} {
			b.Run(fmt.Sprintf("store=%s/mode=%s", name, mode), func(b *testing.B) {
				store := &timedStore{Store: stores[name](b)}
				benchStep(b, tr, store, mode)
			})
		}
	}
}

func benchStep(b *testing.B, tr *replay.Trajectory, store *timedStore, mode string) {
	reg, infos := recordedBash(tr)
	ws, err := tool.NewWorkspace(b.TempDir(), "/testbed", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ws.Close()
	rt := agent.NewRuntime(store, nil)
	ctx := context.Background()
	params := func() *agent.Wiring {
		return &agent.Wiring{Model: replay.New(tr, nil), Tools: reg, Env: &tool.Env{Workspace: ws}}
	}
	w := cluster.NewWorker(rt, &cluster.WorkerOptions{Wire: func(context.Context, *agent.RunCreated) (*agent.Wiring, io.Closer, error) {
		return params(), nil, nil
	}})
	var s testsuite.WorkflowTestSuite
	s.SetLogger(tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	var perStep []time.Duration
	steps := 0
	b.ResetTimer()
	for b.Loop() {
		id, err := rt.Create(ctx, &agent.RunCreated{Task: tr.Task(), System: tr.System(), Tools: infos,
			CompletionMarker: "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", Workspace: ws.Root(), MountPath: "/testbed"})
		if err != nil {
			b.Fatal(err)
		}
		switch mode {
		case "process":
			if _, err := rt.Execute(ctx, id, &agent.ExecParams{Wiring: *params()}); err != nil {
				b.Fatal(err)
			}
		case "workflow":
			env := s.NewTestWorkflowEnvironment()
			env.SetTestTimeout(10 * time.Minute)
			env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: time.Minute})
			w.Register(env, env)
			env.ExecuteWorkflow(cluster.WorkflowName, cluster.RunInput{RunID: id})
			if err := env.GetWorkflowError(); err != nil {
				b.Fatal(err)
			}
		}
		// The time of each step (one model turn: the call, the gate and
		// the tools) from the journal's own event times.
		evs, err := store.Read(ctx, id, 1)
		if err != nil {
			b.Fatal(err)
		}
		prev := evs[0].Time
		for _, e := range evs {
			if e.Type == journal.ModelResponded {
				perStep = append(perStep, e.Time.Sub(prev))
				prev = e.Time
			}
		}
		st, _, err := rt.Load(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		if st.Status != journal.StatusCompleted {
			b.Fatalf("run ended %s: %+v", st.Status, st.Ended)
		}
		steps += st.Steps
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(steps), "ns/step")
	b.ReportMetric(pct(perStep, 0.50), "step-p50-µs")
	b.ReportMetric(pct(perStep, 0.99), "step-p99-µs")
	b.ReportMetric(pct(store.lat, 0.50), "append-p50-µs")
	b.ReportMetric(pct(store.lat, 0.99), "append-p99-µs")
	b.ReportMetric(float64(b.N)/b.Elapsed().Minutes(), "runs/min")
}
