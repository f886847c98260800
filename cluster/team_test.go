package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/cluster"
	"github.com/keel-run/keel/internal/testenv"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/none"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin"
)

// teamModel plays each run by its task: the lead spawns the children
// without waiting, then waits for all of them and answers; a child runs
// one command, then answers. With grand, each child first spawns a
// grandchild (waiting for it), which runs the command.
type teamModel struct {
	children int
	grand    bool
	// slow children sleep a minute in their command.
	slow bool
}

func (m teamModel) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	task := req.Messages[0].Content
	k := 0
	for _, msg := range req.Messages {
		if msg.Role == model.RoleAssistant {
			k++
		}
	}
	call := func(id, name string, args any) model.ToolCall {
		b, _ := json.Marshal(args)
		return model.ToolCall{ID: fmt.Sprintf("%s_%d", id, k), Name: name, Arguments: string(b)}
	}
	out := model.Message{Role: model.RoleAssistant}
	switch {
	case task == "lead" && k == 0:
		for i := range m.children {
			args := map[string]any{"task": fmt.Sprintf("child %d", i), "wait": false}
			if m.grand {
				args["tools"] = []string{"bash", agent.SpawnTool}
				args["limits"] = map[string]any{"max_children": 1, "max_steps": 8, "max_tool_calls": 8}
			}
			out.ToolCalls = append(out.ToolCalls, call(fmt.Sprintf("s%d", i), agent.SpawnTool, args))
		}
	case task == "lead" && k == 1:
		out.ToolCalls = []model.ToolCall{call("w", agent.WaitTool, map[string]any{})}
	case task == "lead":
		out.Content = "all children reported"
	case m.grand && strings.HasPrefix(task, "child") && k == 0:
		out.ToolCalls = []model.ToolCall{call("g", agent.SpawnTool, map[string]any{"task": "grand" + task, "limits": map[string]any{"max_steps": 3, "max_tool_calls": 2}})}
	case m.slow && k == 0:
		out.ToolCalls = []model.ToolCall{call("b", "bash", map[string]any{"command": "sleep 60 && echo slow >> log.txt"})}
	case k == 0:
		out.ToolCalls = []model.ToolCall{call("b", "bash", map[string]any{"command": fmt.Sprintf("sleep 0.5 && echo %q >> log.txt", task)})}
	default:
		out.Content = task + " done"
	}
	return &model.Response{Message: out, Usage: model.Usage{InputTokens: 100, OutputTokens: 10}}, nil
}

// teamWorker returns a runtime over the SQLite journal at path and a
// worker whose runs play teamModel with the builtin tools, without
// sandbox isolation (TestMain runs it in a process of its own for the
// kill test).
func teamWorker(path string, children int) (*agent.Runtime, *cluster.Worker, io.Closer, error) {
	return teamWorkerOf(path, teamModel{children: children}, 4, nil)
}

// teamWorkerOf is teamWorker with model m and slots steps at once; with
// kill, the worker's process kills itself at that boundary.
func teamWorkerOf(path string, m teamModel, slots int, kill *killAt) (*agent.Runtime, *cluster.Worker, io.Closer, error) {
	store, err := sqlite.Open(path, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	var js journal.Store = store
	if kill != nil {
		js = &killStore{Store: store, at: *kill}
	}
	rt := agent.NewRuntime(js, nil)
	reg := tool.NewRegistry()
	builtin.Register(reg, &builtin.Options{NoWeb: true})
	w := cluster.NewWorker(rt, &cluster.WorkerOptions{Slots: slots, ControlStream: "_keel.control", CancelType: "run.cancel_requested", Driver: cluster.Driver{PinTimeout: 3 * time.Second, Heartbeat: 5 * time.Second, RetryWait: time.Second, ChildRecheck: 2 * time.Second},
		Wire: func(_ context.Context, rc *agent.RunCreated) (*agent.Wiring, io.Closer, error) {
			ws, err := tool.NewWorkspace(rc.Workspace, rc.MountPath, nil)
			if err != nil {
				return nil, nil, err
			}
			sb, err := none.New(&sandbox.Spec{Workspace: ws.Root(), MountPath: rc.MountPath})
			if err != nil {
				ws.Close()
				return nil, nil, err
			}
			return &agent.Wiring{Model: m, Tools: reg, Env: &tool.Env{Sandbox: sb, Workspace: ws},
				Price: func(u model.Usage) float64 { return float64(u.Total()) / 1e6 }}, closers{ws, sb}, nil
		}})
	return rt, w, store, nil
}

// teamTools are the tools of a lead: the builtins and the team tools.
// dialTeam connects to the Temporal dev server at addr for one test.
func dialTeam(ctx context.Context, t *testing.T, addr string) client.Client {
	t.Helper()
	c, err := cluster.Dial(ctx, addr, &client.Options{Logger: tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// runWorkers starts count in-process workers made by mk on c and
// returns their runtimes; the workers stop, and their stores close,
// when the test ends.
func runWorkers(ctx context.Context, t *testing.T, c client.Client, count int, mk func() (*agent.Runtime, *cluster.Worker, io.Closer, error)) []*agent.Runtime {
	t.Helper()
	var rts []*agent.Runtime
	var wg sync.WaitGroup
	wctx, stop := context.WithCancel(ctx)
	for i := range count {
		rt, w, closer, err := mk()
		if err != nil {
			stop()
			wg.Wait()
			t.Fatal(err)
		}
		t.Cleanup(func() { closer.Close() })
		rts = append(rts, rt)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(wctx, c); err != nil {
				t.Errorf("worker %d: %v", i, err)
			}
		}()
	}
	t.Cleanup(func() { stop(); wg.Wait() })
	return rts
}

func teamTools() []agent.ToolInfo {
	reg := tool.NewRegistry()
	builtin.Register(reg, &builtin.Options{NoWeb: true})
	var infos []agent.ToolInfo
	for _, s := range reg.Specs() {
		tl := reg.Tool(s.Name)
		infos = append(infos, agent.ToolInfo{ToolSpec: s, Effect: tl.Effect.String(), Idempotent: tl.Idempotent})
	}
	return append(infos, agent.TeamTools()...)
}

// teamCluster begins a team test on the Temporal dev server (skipped
// with -short): its context, ended after timeout, a client, the dev
// server's address, and a journal's path.
func teamCluster(t *testing.T, timeout time.Duration) (context.Context, client.Client, string, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("Temporal dev server")
	}
	addr := testenv.Temporal(t)
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	return ctx, dialTeam(ctx, t, addr), addr, filepath.Join(t.TempDir(), "j.db")
}

// startLead creates a team's lead in ws as keel-cli, with the team tools
// and limits, and dispatches it to the cluster's workers.
func startLead(ctx context.Context, t *testing.T, rt *agent.Runtime, c client.Client, ws string, limits agent.Limits) (string, *cluster.Dispatcher) {
	t.Helper()
	id, err := rt.Create(ctx, &agent.RunCreated{Task: "lead", Model: "scripted", Workspace: ws, MountPath: ws, Sandbox: "none",
		Tools: teamTools(), Limits: limits, Principal: "keel-cli"})
	if err != nil {
		t.Fatal(err)
	}
	d := cluster.NewDispatcher(c)
	if err := d.Dispatch(ctx, id); err != nil {
		t.Fatal(err)
	}
	return id, d
}

// waitEnded follows run id in store until it ends; a failure of the
// follow (the test's deadline) is fatal, said as what did not happen.
func waitEnded(ctx context.Context, t *testing.T, store journal.Store, id, what string) {
	t.Helper()
	for e, err := range journal.Follow(ctx, store, id, 1, 100*time.Millisecond) {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if journal.StatusOf(e.Type).Terminal() {
			return
		}
	}
}

// TestTeamOnCluster: a lead executed by a worker on Temporal starts
// children that are runs of their own on the cluster, each driven by its
// own workflow on the workers (two, sharing one journal), under the
// slices the lead reserved; every child's result reaches the lead once,
// and the tree stays within the root's limits.
func TestTeamOnCluster(t *testing.T) {
	const n = 3
	ctx, c, _, path := teamCluster(t, 5*time.Minute)
	rts := runWorkers(ctx, t, c, 2, func() (*agent.Runtime, *cluster.Worker, io.Closer, error) { return teamWorker(path, n) })
	ws := t.TempDir()
	limits := agent.Limits{MaxSteps: 20, MaxTokens: 400_000, MaxCost: 0.4, MaxToolCalls: 20, MaxChildren: n, MaxDepth: 1}
	id, _ := startLead(ctx, t, rts[0], c, ws, limits)
	waitEnded(ctx, t, rts[0].Store(), id, "the lead did not end")
	lead, _, err := rts[0].Load(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if lead.Status != journal.StatusCompleted || len(lead.Children) != n {
		t.Fatalf("lead %s (%v) with %d children, want completed with %d", lead.Status, lead.Ended, len(lead.Children), n)
	}
	var spent agent.Spend
	for _, ch := range lead.Children {
		d := ch.Delivered
		if d == nil || d.Status != agent.ChildCompleted || d.CallID == "" || d.Unwaited {
			t.Errorf("child %s delivered %+v, want completed to the wait call", ch.ID, d)
			continue
		}
		st, _, err := rts[1].Load(ctx, ch.ID)
		if err != nil {
			t.Fatal(err)
		}
		if st.Created.Principal != "keel-cli/inline" || st.Status != journal.StatusCompleted {
			t.Errorf("child %s: %s as %s", ch.ID, st.Status, st.Created.Principal)
		}
		if o := st.Own(); o.Steps > ch.Spawned.Slice.MaxSteps || o.ToolCalls > ch.Spawned.Slice.MaxToolCalls {
			t.Errorf("child %s spent %s beyond its slice %s", ch.ID, o, ch.Spawned.Slice)
		}
		// Its own workflow drove it, to its end. The child's journal
		// says completed (and its result reached the lead) as its last
		// step returns; the workflow closes just after: wait for that.
		if err := c.GetWorkflow(ctx, cluster.WorkflowID(ch.ID), "").Get(ctx, nil); err != nil {
			t.Errorf("child %s's workflow: %v", ch.ID, err)
		}
		wf, err := c.DescribeWorkflow(ctx, cluster.WorkflowID(ch.ID), "")
		if err != nil {
			t.Fatalf("child %s has no workflow: %v", ch.ID, err)
		}
		if s := wf.RawResponse.GetWorkflowExecutionInfo().GetStatus(); s != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			t.Errorf("child %s's workflow %s", ch.ID, s)
		}
		s := st.Own()
		spent.Steps += s.Steps
		spent.ToolCalls += s.ToolCalls
		spent.Tokens += s.Tokens
	}
	own := lead.Own()
	spent.Steps += own.Steps
	spent.ToolCalls += own.ToolCalls
	spent.Tokens += own.Tokens
	if spent.Steps > limits.MaxSteps || spent.ToolCalls > limits.MaxToolCalls || spent.Tokens > limits.MaxTokens {
		t.Errorf("the tree spent %s, beyond the root's limits %s", spent, limits)
	}
	b, _ := os.ReadFile(filepath.Join(ws, "log.txt"))
	for i := range n {
		// Once, or not at all if a worker's step was moved mid-command
		// on a starved host (its outcome is then unknown to the child).
		if got := strings.Count(string(b), fmt.Sprintf("child %d\n", i)); got > 1 {
			t.Errorf("child %d's command ran %d times:\n%s", i, got, b)
		}
	}
	t.Logf("tree: %d children on their own workflows, spent %s (limits %s)", n, spent, limits)
}

// TestTeamOnClusterWaitingParentsHoldNoSlot: two workers of one slot
// each drive a tree of three levels (a lead waiting for two children,
// each waiting for a grandchild): five runs, three of them waiting at
// once, more than the two slots. A parent waiting for children pauses
// (reason children) and gives its slot back, and a child's end wakes it:
// the tree completes, each child delivered once.
func TestTeamOnClusterWaitingParentsHoldNoSlot(t *testing.T) {
	const n = 2
	ctx, c, _, path := teamCluster(t, 4*time.Minute)
	rts := runWorkers(ctx, t, c, 2, func() (*agent.Runtime, *cluster.Worker, io.Closer, error) {
		return teamWorkerOf(path, teamModel{children: n, grand: true}, 1, nil)
	})
	ws := t.TempDir()
	limits := agent.Limits{MaxSteps: 40, MaxTokens: 400_000, MaxCost: 0.4, MaxToolCalls: 40, MaxChildren: 8, MaxDepth: 2}
	id, _ := startLead(ctx, t, rts[0], c, ws, limits)
	waitEnded(ctx, t, rts[0].Store(), id, "the tree did not complete (waiting parents hold the slots?)")
	lead, evs, err := rts[0].Load(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if lead.Status != journal.StatusCompleted || len(lead.Children) != n {
		t.Fatalf("lead %s (%+v) with %d children, want completed with %d", lead.Status, lead.Ended, len(lead.Children), n)
	}
	pauses := 0
	for _, e := range evs {
		if e.Type == journal.RunPaused && strings.Contains(string(e.Payload), `"children"`) {
			pauses++
		}
	}
	if pauses == 0 {
		t.Errorf("the lead never paused for its children")
	}
	b, _ := os.ReadFile(filepath.Join(ws, "log.txt"))
	for _, ch := range lead.Children {
		if d := ch.Delivered; d == nil || d.Status != agent.ChildCompleted || d.CallID == "" {
			t.Errorf("child %s delivered %+v, want completed to the wait call", ch.ID, d)
		}
		st, _, err := rts[1].Load(ctx, ch.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Children) != 1 || st.Children[0].Delivered == nil || st.Children[0].Delivered.Status != agent.ChildCompleted {
			t.Errorf("child %s's grandchild not delivered: %+v", ch.ID, st.Children[0].Delivered)
		}
		if got := strings.Count(string(b), "grand"+st.Created.Task+"\n"); got > 1 {
			t.Errorf("grandchild of %s ran its command %d times", ch.ID, got)
		}
	}
	t.Logf("tree of %d runs on 2 workers of 1 slot: the lead paused %d times for its children, %d events", 1+2*n, pauses, len(evs))
}

// TestTeamOnClusterCancelWaitingParent: a lead paused waiting for its
// children (holding no worker) is canceled by a person (the journal's
// cancel, as a server records it for a run no one executes, then a
// wake-up): its children, still working on the workers, are canceled
// with it instead of running on to their ends.
func TestTeamOnClusterCancelWaitingParent(t *testing.T) {
	const n = 2
	ctx, c, _, path := teamCluster(t, 4*time.Minute)
	rt := runWorkers(ctx, t, c, 1, func() (*agent.Runtime, *cluster.Worker, io.Closer, error) {
		return teamWorkerOf(path, teamModel{children: n, slow: true}, 4, nil)
	})[0]
	ws := t.TempDir()
	id, d := startLead(ctx, t, rt, c, ws, agent.Limits{MaxSteps: 20, MaxToolCalls: 20, MaxChildren: n, MaxDepth: 1})
	for e, err := range journal.Follow(ctx, rt.Store(), id, 1, 100*time.Millisecond) {
		if err != nil {
			t.Fatal(err)
		}
		if e.Type == journal.RunPaused && strings.Contains(string(e.Payload), `"children"`) {
			break
		}
		if journal.StatusOf(e.Type).Terminal() {
			t.Fatalf("the lead ended (%s) before it waited for its children", e.Type)
		}
	}
	if _, err := rt.Cancel(ctx, id, "tester"); err != nil {
		t.Fatal(err)
	}
	if err := d.Dispatch(ctx, id); err != nil {
		t.Fatal(err)
	}
	lead, _, err := rt.Load(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range lead.Children {
		waitEnded(ctx, t, rt.Store(), ch.ID, "child "+ch.ID+" did not end")
		st, _, err := rt.Load(ctx, ch.ID)
		if err != nil {
			t.Fatal(err)
		}
		if st.Status != journal.StatusCanceled {
			t.Errorf("child %s %s (%+v), want canceled with its parent", ch.ID, st.Status, st.Ended)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "log.txt")); len(b) > 0 {
		t.Errorf("a child's command ran to its end after its parent was canceled: %q", b)
	}
}
