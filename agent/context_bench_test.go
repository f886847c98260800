package agent_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/model/replay"
	"github.com/keel-run/keel/tool"
)

// recordedState replays the recorded trajectory into an in-memory journal
// with a bash tool answering the recorded outputs, with the given context
// window (0: none), and returns the folded state and its events.
func recordedState(tb testing.TB, window int) (*agent.State, []journal.Event) {
	tb.Helper()
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
			if r.CallID == "" {
				return tool.Text("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n" + tr.Submission()), nil
			}
			code := r.ExitCode
			return &tool.Result{Content: fmt.Sprintf("exit code: %d\n%s", code, r.RawOutput), ExitCode: &code}, nil
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
	rt := agent.NewRuntime(mem.New(), nil)
	c := &agent.RunCreated{Task: tr.Task(), System: tr.System(), Tools: infos, CompletionMarker: "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", Workspace: ws.Root(), MountPath: "/testbed", Model: "deepseek-chat"}
	if window > 0 {
		c.Context = &agent.ContextConfig{Window: window}
	}
	id, err := rt.Create(context.Background(), c)
	if err != nil {
		tb.Fatal(err)
	}
	out, err := rt.Execute(context.Background(), id, &agent.ExecParams{Wiring: agent.Wiring{Model: replay.New(tr, nil), Tools: reg, Env: &tool.Env{Workspace: ws}}})
	if err != nil {
		tb.Fatal(err)
	}
	if out.Status != journal.StatusCompleted {
		tb.Fatalf("run ended %s: %+v", out.Status, out.End)
	}
	evs, err := rt.Store().Read(context.Background(), id, 1)
	if err != nil {
		tb.Fatal(err)
	}
	return out.State, evs
}

// BenchmarkContextStep measures what the context builder adds to a step
// at the end of the recorded 74-turn run (a view of about 25,000 tokens):
// the step function's estimate of the next request, and building it.
func BenchmarkContextStep(b *testing.B) {
	for _, window := range []int{0, 128000} {
		_, evs := recordedState(b, window)
		// The state before the last model call: the next step calls the
		// model with the whole conversation.
		last := 0
		for i, e := range evs {
			if e.Type == journal.ModelResponded {
				last = i
			}
		}
		st, err := agent.Fold(evs[0].RunID, evs[:last])
		if err != nil {
			b.Fatal(err)
		}
		if a := agent.Step(st); a.Kind != agent.ActCallModel {
			b.Fatalf("step = %v, want call_model", a.Kind)
		}
		b.Run(fmt.Sprintf("window=%d/step", window), func(b *testing.B) {
			for b.Loop() {
				agent.Step(st)
			}
		})
		b.Run(fmt.Sprintf("window=%d/build_request", window), func(b *testing.B) {
			for b.Loop() {
				agent.BuildRequest(st, 0)
			}
		})
	}
}

// BenchmarkEstimateText measures the tokenizer-free estimate.
func BenchmarkEstimateText(b *testing.B) {
	s := strings.Repeat("func (x *executor) compact(ctx context.Context, c *Compaction) error { // 42\n", 1000)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		agent.EstimateText(s)
	}
}

// The recorded run with a window of 12,000 tokens compacts and completes
// in the library too, without the CLI.
func TestRecordedRunCompacts(t *testing.T) {
	st, _ := recordedState(t, 12000)
	if n := len(st.Compactions()); n < 2 {
		t.Fatalf("%d compactions, want at least 2", n)
	}
}
