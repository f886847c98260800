package notify

import (
	"context"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin/fs"
)

// TestRuntimeSource executes a run whose policy asks before every call:
// the source reports its approval with the schedule's sinks, and a run
// of no schedule nothing.
func TestRuntimeSource(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ws, err := tool.NewWorkspace(t.TempDir(), "/workspace", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	tools := tool.NewRegistry()
	fs.Register(tools, nil)
	e, err := policy.Parse("ask.cedar", []byte(`@id("all") permit(principal, action, resource);
@id("ask") @ask forbid(principal, action, resource);`))
	if err != nil {
		t.Fatal(err)
	}
	rt := agent.NewRuntime(mem.New(), nil)
	start := func(labels map[string]string) string {
		m := modeltest.NewScripted([]modeltest.Turn{
			modeltest.Calls("", modeltest.Call("call_7", "write_file", map[string]string{"path": "n.txt", "content": "x"})),
			modeltest.Text("done"),
		}, nil)
		id, err := rt.Create(ctx, &agent.RunCreated{Task: "write", Tools: agent.ToolInfos(tools), Principal: "ci-bot", Labels: labels, Policy: agent.NewPolicyRef(e)})
		if err != nil {
			t.Fatal(err)
		}
		out, err := rt.Execute(ctx, id, &agent.ExecParams{Wiring: agent.Wiring{Model: m, Tools: tools, Env: &tool.Env{Workspace: ws}}})
		if err != nil || out.Status != "paused" {
			t.Fatalf("Execute = %+v, %v", out, err)
		}
		return id
	}
	scheduled := start(map[string]string{"keel.schedule": "nightly"})
	start(nil)
	src := &RuntimeSource{Runtime: rt, Route: func(ctx context.Context, runID string, c *agent.RunCreated) []string {
		if Origin(c.Labels) != "" {
			return []string{"oncall"}
		}
		return nil
	}}
	for range 2 { // the second from the cache
		items, err := src.Pending(ctx, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if len(items) != 1 {
			t.Fatalf("items = %+v, want the scheduled run's approval", items)
		}
		it := items[0]
		if it.Kind != KindApproval || it.RunID != scheduled || it.ItemID != "call_7" || it.Tool != "write_file" || it.Agent != "ci-bot" || it.Origin != "schedule nightly" || len(it.Sinks) != 1 {
			t.Errorf("item = %+v", it)
		}
	}
}
