package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool"
)

// taskModel is a fake model that plays each run by its task: the k-th
// request of a run whose task is T is answered with turns[T][k] (a task
// with no script repeats its last turn, for runaways), with usage per
// call.
type taskModel struct {
	mu    sync.Mutex
	turns map[string][]model.Message
	usage model.Usage
	calls map[string]int
}

func (r *taskModel) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	task := req.Messages[0].Content
	k := 0
	for _, m := range req.Messages {
		if m.Role == model.RoleAssistant {
			k++
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls = map[string]int{}
	}
	r.calls[task]++
	turns, ok := r.turns[task]
	if !ok {
		for prefix, t := range r.turns {
			if strings.HasSuffix(prefix, "*") && strings.HasPrefix(task, strings.TrimSuffix(prefix, "*")) {
				turns, ok = t, true
			}
		}
	}
	if !ok || len(turns) == 0 {
		return nil, &model.Error{Kind: model.KindExhausted, Message: "no script for task " + task}
	}
	m := turns[min(k, len(turns)-1)]
	m.Role = model.RoleAssistant
	// Call ids unique per step, as providers make them.
	calls := make([]model.ToolCall, len(m.ToolCalls))
	for i, c := range m.ToolCalls {
		c.ID = fmt.Sprintf("%s_%d", c.ID, k)
		calls[i] = c
	}
	m.ToolCalls = calls
	return &model.Response{Message: m, Usage: r.usage}, nil
}

// teamEnv is env with a launcher whose children use the same model and
// tools.
func teamEnv(t *testing.T, m model.Model) (*env, *agent.LocalTeam) {
	e := newEnv(t)
	team := &agent.LocalTeam{Runtime: e.rt, Wire: func(ctx context.Context, c *agent.RunCreated) (*agent.Wiring, io.Closer, error) {
		return &agent.Wiring{Model: m, Tools: e.reg, Env: &tool.Env{Workspace: e.ws}, Price: func(u model.Usage) float64 { return float64(u.Total()) / 1e6 }}, nil, nil
	}}
	t.Cleanup(func() { team.Close() })
	return e, team
}

func (e *env) createTeam(c *agent.RunCreated) string {
	c.Tools = append(c.Tools, agent.TeamTools()...)
	return e.create(c)
}

func spawnCall(id string, args map[string]any) model.ToolCall {
	b, _ := json.Marshal(args)
	return tc(id, agent.SpawnTool, string(b))
}

// treeSpend sums what every run of the tree under root spent itself.
func treeSpend(t *testing.T, rt *agent.Runtime, root string) (agent.Spend, []*agent.State) {
	t.Helper()
	st, _, err := rt.Load(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	sum := st.Own()
	sum.Children = 0
	all := []*agent.State{st}
	for _, c := range st.Children {
		s, sts := treeSpend(t, rt, c.ID)
		sum.Steps += s.Steps
		sum.Tokens += s.Tokens
		sum.Cost += s.Cost
		sum.ToolCalls += s.ToolCalls
		sum.Children += s.Children + 1
		all = append(all, sts...)
	}
	return sum, all
}

// overshoot returns the largest amount by which used passes l on any
// limited axis, as a fraction of the limit.
func overshoot(l agent.Limits, u agent.Spend) float64 {
	worst := 0.0
	f := func(used, limit float64) {
		if limit > 0 && used > limit {
			worst = max(worst, (used-limit)/limit)
		}
	}
	f(float64(u.Steps), float64(l.MaxSteps))
	f(float64(u.Tokens), float64(l.MaxTokens))
	f(u.Cost, l.MaxCost)
	f(float64(u.ToolCalls), float64(l.MaxToolCalls))
	f(float64(u.Children), float64(l.MaxChildren))
	return worst
}

// TestFanOutUnderTreeBudget: a lead starts 20 children in parallel
// under one budget, one of them a runaway; the tree's spend never passes
// the root's limits on any axis, the runaway stops at its slice, every
// child's result is delivered once, and the unspent slices return.
func TestFanOutUnderTreeBudget(t *testing.T) {
	const n = 20
	var spawns []model.ToolCall
	for i := range n {
		task := fmt.Sprintf("child %d", i)
		if i == 7 {
			task = "runaway"
		}
		spawns = append(spawns, spawnCall(fmt.Sprintf("s%d", i), map[string]any{"task": task, "wait": false,
			"limits": map[string]any{"max_steps": 4, "max_tokens": 2000, "max_tool_calls": 3, "max_cost": 0.002}}))
	}
	m := &taskModel{usage: model.Usage{InputTokens: 300, OutputTokens: 20}, turns: map[string][]model.Message{
		"lead":     {calls(spawns...), calls(tc("w", agent.WaitTool, `{}`)), answer("all done")},
		"child *":  {calls(tc("e", "echo", `{"text":"looked"}`)), answer("found it")},
		"runaway":  {calls(tc("e", "echo", `{"text":"again"}`))},
		"unused *": nil,
	}}
	e, team := teamEnv(t, m)
	limits := agent.Limits{MaxSteps: 100, MaxTokens: 60000, MaxCost: 0.06, MaxToolCalls: 90, MaxChildren: 20, MaxDepth: 1}
	id := e.createTeam(&agent.RunCreated{Task: "lead", Limits: limits})
	p := e.params(m)
	p.Team = team
	p.Price = func(u model.Usage) float64 { return float64(u.Total()) / 1e6 }
	out, err := e.rt.Execute(t.Context(), id, p)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusCompleted {
		t.Fatalf("lead %s %+v", out.Status, out.End)
	}
	st := out.State
	if len(st.Children) != n {
		t.Fatalf("%d children, want %d", len(st.Children), n)
	}
	spend, all := treeSpend(t, e.rt, id)
	if o := overshoot(limits, spend); o > 0 {
		t.Errorf("tree spend %+v passes the root's limits %+v by %.1f%%", spend, limits, 100*o)
	}
	for _, s := range all[1:] {
		if o := overshoot(s.Limits, s.Used()); o > 0 {
			t.Errorf("child %s spent %+v, over its slice %+v by %.1f%%", s.RunID, s.Used(), s.Limits, 100*o)
		}
	}
	t.Logf("tree spend %s against limits %s; largest overshoot 0", spend, limits)
	delivered := 0
	for _, c := range st.Children {
		d := c.Delivered
		if d == nil {
			t.Errorf("child %s not delivered", c.ID)
			continue
		}
		delivered++
		want := agent.ChildCompleted
		if strings.HasSuffix(c.Spawned.Created.Task, "runaway") {
			want = agent.ChildBudgetExhausted
		}
		if d.Status != want {
			t.Errorf("child %s (%s) delivered %s %s, want %s", c.ID, c.Spawned.Created.Task, d.Status, d.Message, want)
		}
	}
	// Every result reached the model once, in the wait's result.
	var waitResult string
	for _, tr := range st.Turns {
		for _, c := range tr.Calls {
			if c.Name == agent.WaitTool {
				waitResult = c.Finished.Content
			}
		}
	}
	if got := strings.Count(waitResult, "found it"); got != n-1 {
		t.Errorf("wait result has %d child outputs, want %d:\n%s", got, n-1, waitResult)
	}
	// Unspent slices came back: what counts against the lead is what
	// the children spent, not what was reserved.
	if used := st.Used(); used.Steps >= 20*4 {
		t.Errorf("lead's used steps %d still count the reserved slices", used.Steps)
	}
}

// TestSpawnWaitsAndReservesOnce: a spawn that waits returns the child's
// output as its result; re-executing the finished lead changes nothing.
func TestSpawnWaits(t *testing.T) {
	m := &taskModel{usage: model.Usage{InputTokens: 10, OutputTokens: 1}, turns: map[string][]model.Message{
		"lead":  {calls(spawnCall("s", map[string]any{"task": "child"})), answer("ok")},
		"child": {answer("the answer is 42")},
	}}
	e, team := teamEnv(t, m)
	id := e.createTeam(&agent.RunCreated{Task: "lead", Limits: agent.Limits{MaxSteps: 10}})
	p := e.params(m)
	p.Team = team
	out, err := e.rt.Execute(t.Context(), id, p)
	if err != nil {
		t.Fatal(err)
	}
	c := out.State.Turns[0].Calls[0]
	if !strings.Contains(c.Finished.Content, "the answer is 42") || c.Finished.IsError {
		t.Errorf("spawn result %q", c.Finished.Content)
	}
	ch := out.State.Children[0]
	if ch.Spawned.Slice.MaxSteps != 2 { // a quarter of the 9 left after keeping one
		t.Errorf("slice %+v", ch.Spawned.Slice)
	}
	if ch.Delivered == nil || ch.Delivered.Spend.Steps != 1 || out.State.Used().Steps != 3 {
		t.Errorf("delivered %+v, lead used %+v", ch.Delivered, out.State.Used())
	}
}

// TestWideningRefused: a spawn asking for more than its parent has is
// refused by the gate, each kind a case.
func TestWideningRefused(t *testing.T) {
	for _, tt := range []struct {
		name   string
		parent agent.RunCreated
		args   map[string]any
		// deny is a part of the refusal; "" means allowed.
		deny string
	}{
		{"tool the parent lacks", agent.RunCreated{}, map[string]any{"task": "x", "tools": []string{"echo", "bash"}}, "tools its parent does not have: bash"},
		{"host the parent may not reach", agent.RunCreated{Network: []string{"pypi.org"}}, map[string]any{"task": "x", "network": []string{"pypi.org", "evil.example"}}, "hosts its parent may not reach: evil.example"},
		{"path outside the parent's", agent.RunCreated{Parent: &agent.ParentLink{Run: "p", Call: "c", Root: "p", Depth: 1, Paths: []string{"src"}}},
			map[string]any{"task": "x", "paths": []string{"docs"}}, "outside its parent's paths"},
		{"nested spawn past the depth limit", agent.RunCreated{Limits: agent.Limits{MaxDepth: 1}},
			map[string]any{"task": "x", "tools": []string{"echo", agent.SpawnTool}, "limits": map[string]any{"max_children": 1}}, "the deepest this tree allows"},
		{"spawn from a child of a read-only agent", agent.RunCreated{Parent: &agent.ParentLink{Run: "p", Call: "c", Root: "p", Depth: 1}, Limits: agent.Limits{MaxDepth: 2}},
			map[string]any{"task": "x", "tools": []string{"write"}}, "tools its parent does not have: write"},
		{"credential scope the parent may not use", agent.RunCreated{Parent: &agent.ParentLink{Run: "p", Call: "c", Root: "p", Depth: 1, Scopes: map[string][]string{"github": {"repo:read"}}}, Limits: agent.Limits{MaxDepth: 2}},
			map[string]any{"task": "x", "scopes": map[string]any{"github": []string{"repo:read", "repo:write"}}}, "credential scopes its parent may not use: github: repo:write"},
		{"path outside the workspace: /", agent.RunCreated{}, map[string]any{"task": "x", "paths": []string{"/"}}, `asks to write "/", which it may not: /: path is outside the workspace`},
		{"path outside the workspace: ..", agent.RunCreated{}, map[string]any{"task": "x", "paths": []string{"src", ".."}}, `asks to write "..", which it may not`},
		{"protected path .keel", agent.RunCreated{}, map[string]any{"task": "x", "paths": []string{".keel"}}, `asks to write ".keel", a protected path`},
		{"protected path .git", agent.RunCreated{}, map[string]any{"task": "x", "paths": []string{"sub/.git/hooks"}}, `a protected path`},
		{"a path spelled under the mount path is the parent's", agent.RunCreated{Parent: &agent.ParentLink{Run: "p", Call: "c", Root: "p", Depth: 1, Paths: []string{"src"}}, Limits: agent.Limits{MaxDepth: 2}},
			map[string]any{"task": "x", "paths": []string{"/workspace/src/sub/"}}, ""},
		{"narrower is allowed", agent.RunCreated{Network: []string{"pypi.org"}}, map[string]any{"task": "x", "tools": []string{"echo"}, "network": []string{"pypi.org"}}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := &taskModel{turns: map[string][]model.Message{
				"lead": {calls(spawnCall("s", tt.args)), answer("ok")},
				"x":    {answer("child done")},
			}}
			e, team := teamEnv(t, m)
			c := tt.parent
			c.Task = "lead"
			if strings.Contains(tt.name, "read-only") {
				// The read-only agent's child has only read tools.
				c.Tools = append(c.Tools, agent.TeamTools()...)
				for _, s := range e.reg.Specs() {
					if s.Name == "echo" {
						c.Tools = append(c.Tools, agent.ToolInfo{ToolSpec: s, Effect: "read_only"})
					}
				}
				id, err := e.rt.Create(t.Context(), &c)
				if err != nil {
					t.Fatal(err)
				}
				checkSpawn(t, e, team, m, id, tt.deny)
				return
			}
			checkSpawn(t, e, team, m, e.createTeam(&c), tt.deny)
		})
	}
}

func checkSpawn(t *testing.T, e *env, team *agent.LocalTeam, m model.Model, id, deny string) {
	t.Helper()
	p := e.params(m)
	p.Team = team
	out, err := e.rt.Execute(t.Context(), id, p)
	if err != nil {
		t.Fatal(err)
	}
	c := out.State.Turns[0].Calls[0]
	if deny == "" {
		if c.Decision.Effect != policy.Allow || len(out.State.Children) != 1 {
			t.Fatalf("decision %+v, %d children", c.Decision.Decision, len(out.State.Children))
		}
		return
	}
	if c.Decision.Effect != policy.Deny || c.Decision.Policies[0] != agent.PolicyTeam || !strings.Contains(c.Decision.Reason, deny) {
		t.Errorf("decision %+v, want a keel.team deny with %q", c.Decision.Decision, deny)
	}
	if len(out.State.Children) != 0 || c.Attempts != 0 {
		t.Errorf("refused spawn started something: %d children, %d attempts", len(out.State.Children), c.Attempts)
	}
}

// TestChildPathCeiling: a child limited to some paths may not write
// elsewhere, nor run a tool that may write anywhere.
func TestChildPathCeiling(t *testing.T) {
	m := &taskModel{turns: map[string][]model.Message{
		"child": {calls(tc("a", "write", `{"path":"src/a.txt","content":"x"}`), tc("b", "write", `{"path":"docs/b.txt","content":"x"}`)), answer("ok")},
	}}
	e, _ := teamEnv(t, m)
	id := e.create(&agent.RunCreated{Task: "child", Parent: &agent.ParentLink{Run: "p", Call: "c", Root: "p", Depth: 1, Paths: []string{"src"}}})
	out, err := e.rt.Execute(t.Context(), id, e.params(m))
	if err != nil {
		t.Fatal(err)
	}
	calls := out.State.Turns[0].Calls
	if calls[0].Decision.Effect != policy.Allow || calls[1].Decision.Effect != policy.Deny || calls[1].Decision.Policies[0] != agent.PolicyTeam {
		t.Errorf("decisions %+v / %+v", calls[0].Decision.Decision, calls[1].Decision.Decision)
	}
}

// TestCancelParentCancelsSubtree: canceling the lead's execution while
// it waits cancels its child, whose result (canceled) is not lost.
func TestCancelParentCancelsSubtree(t *testing.T) {
	started := make(chan struct{})
	m := &taskModel{turns: map[string][]model.Message{
		"lead": {calls(spawnCall("s", map[string]any{"task": "slow"})), answer("ok")},
	}}
	slow := &blockOn{started: started}
	e, team := teamEnv(t, modelByTask{"slow": slow, "": m})
	id := e.createTeam(&agent.RunCreated{Task: "lead"})
	p := e.params(modelByTask{"slow": slow, "": m})
	p.Team = team
	ctx, cancel := context.WithCancelCause(t.Context())
	go func() { <-started; cancel(agent.ErrUserCanceled) }()
	out, err := e.rt.Execute(ctx, id, p)
	if err != nil {
		t.Fatal(err)
	}
	team.Close()
	if out.Status != journal.StatusCanceled {
		t.Errorf("lead %s", out.Status)
	}
	st, _, err := e.rt.Load(t.Context(), out.State.Children[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != journal.StatusCanceled {
		t.Errorf("child %s, want canceled with its parent", st.Status)
	}
}

// modelByTask routes requests by task to a model ("" for the rest).
type modelByTask map[string]model.Model

func (m modelByTask) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	if x, ok := m[req.Messages[0].Content]; ok {
		return x.Generate(ctx, req)
	}
	return m[""].Generate(ctx, req)
}

// blockOn blocks every call until ctx ends, closing started at the first.
type blockOn struct {
	once    sync.Once
	started chan struct{}
}

func (b *blockOn) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	b.once.Do(func() { close(b.started) })
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestSpawnIsACedarAction: a policy sees a spawn's depth and fan-out
// (context.facts) and can refuse it.
func TestSpawnIsACedarAction(t *testing.T) {
	eng, err := policy.Parse("team.cedar", []byte(`
@id("all") permit(principal, action, resource);
@id("fanout") forbid(principal, action == Keel::Action::"spawn_agent", resource) when { context.facts.fanout >= 2 };
@id("no-bash-children") forbid(principal, action == Keel::Action::"spawn_agent", resource) when { context.facts.tools.contains("write") };
`))
	if err != nil {
		t.Fatal(err)
	}
	m := &taskModel{turns: map[string][]model.Message{
		"lead": {calls(spawnCall("a", map[string]any{"task": "x", "wait": false}), spawnCall("b", map[string]any{"task": "x", "wait": false}),
			spawnCall("c", map[string]any{"task": "x", "wait": false}), spawnCall("d", map[string]any{"task": "x", "tools": []string{"write"}, "wait": false})), answer("ok")},
		"x": {answer("done")},
	}}
	e, team := teamEnv(t, m)
	id := e.createTeam(&agent.RunCreated{Task: "lead", Policy: agent.NewPolicyRef(eng)})
	p := e.params(m)
	p.Team = team
	out, err := e.rt.Execute(t.Context(), id, p)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range out.State.Turns[0].Calls {
		got = append(got, fmt.Sprintf("%s:%s:%s", c.ID[:1], c.Decision.Effect, strings.Join(c.Decision.Policies, ",")))
	}
	want := "a:allow:all b:allow:all c:deny:fanout d:deny:fanout,no-bash-children"
	if strings.Join(got, " ") != want {
		t.Errorf("decisions %s, want %s", strings.Join(got, " "), want)
	}
	if len(out.State.Children) != 2 {
		t.Errorf("%d children, want 2", len(out.State.Children))
	}
}

// TestFoldRefusesSecondDelivery: a journal that gives a child's result
// twice, or a result of a child never spawned, does not fold.
func TestFoldRefusesSecondDelivery(t *testing.T) {
	ev := func(seq int64, typ journal.Type, v any) journal.Event {
		b, _ := json.Marshal(v)
		return journal.Event{RunID: "r", Seq: seq, Type: typ, Payload: b}
	}
	created := ev(1, journal.RunCreated, &agent.RunCreated{Task: "t"})
	spawned := ev(2, journal.ChildSpawned, &agent.ChildSpawned{Child: "r.c", CallID: "c", Created: &agent.RunCreated{Task: "x"}})
	for _, tt := range []struct {
		name string
		evs  []journal.Event
		bad  string
	}{
		{"once", []journal.Event{created, spawned, ev(3, journal.ChildDelivered, &agent.ChildDelivered{Child: "r.c", CallID: "c"})}, ""},
		{"twice", []journal.Event{created, spawned, ev(3, journal.ChildDelivered, &agent.ChildDelivered{Child: "r.c", CallID: "c"}), ev(4, journal.ChildDelivered, &agent.ChildDelivered{Child: "r.c", CallID: "w"})}, "second child.delivered"},
		{"unknown child", []journal.Event{created, ev(2, journal.ChildDelivered, &agent.ChildDelivered{Child: "r.x"})}, "unknown child"},
		{"spawned twice", []journal.Event{created, spawned, ev(3, journal.ChildSpawned, &agent.ChildSpawned{Child: "r.c", CallID: "c", Created: &agent.RunCreated{Task: "x"}})}, "second child.spawned"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := agent.Fold("r", tt.evs)
			if tt.bad == "" && err != nil || tt.bad != "" && (err == nil || !strings.Contains(err.Error(), tt.bad)) {
				t.Errorf("Fold = %v, want %q", err, tt.bad)
			}
		})
	}
}

// waitFirst is a model whose second request (the lead's turn after its
// spawns) waits until the run wait ended, then answers from m.
type waitFirst struct {
	team *agent.LocalTeam
	wait func() string
	m    model.Model
}

func (w *waitFirst) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	if len(req.Messages) > 1 {
		if _, err := w.team.Wait(ctx, w.wait()); err != nil {
			return nil, err
		}
	}
	return w.m.Generate(ctx, req)
}

// TestParentEndsWithoutWaiting: a lead that answers without waiting for
// its two children (one done by then, one still working) stops the one
// still working (canceled, reason parent_ended), and journals both
// results before its own end, given to no call, their spend counted.
func TestParentEndsWithoutWaiting(t *testing.T) {
	started := make(chan struct{})
	m := &taskModel{usage: model.Usage{InputTokens: 10, OutputTokens: 5}, turns: map[string][]model.Message{
		"lead":  {calls(spawnCall("q", map[string]any{"task": "quick", "wait": false}), spawnCall("s", map[string]any{"task": "slow", "wait": false})), answer("lead done")},
		"quick": {answer("quick result")},
	}}
	slow := &blockOn{started: started}
	lead := &waitFirst{m: m}
	e, team := teamEnv(t, modelByTask{"slow": slow, "lead": lead, "": m})
	id := e.createTeam(&agent.RunCreated{Task: "lead", Limits: agent.Limits{MaxSteps: 20, MaxChildren: 2}})
	lead.team, lead.wait = team, func() string { <-started; return id + ".q_0" }
	p := e.params(modelByTask{"slow": slow, "lead": lead, "": m})
	p.Team = team
	out, err := e.rt.Execute(t.Context(), id, p)
	if err != nil {
		t.Fatal(err)
	}
	team.Close()
	if out.Status != journal.StatusCompleted {
		t.Fatalf("lead %s %+v", out.Status, out.End)
	}
	want := map[string]string{id + ".q_0": agent.ChildCompleted, id + ".s_0": agent.ChildCanceled}
	if len(out.State.Children) != 2 {
		t.Fatalf("%d children", len(out.State.Children))
	}
	for _, ch := range out.State.Children {
		d := ch.Delivered
		if d == nil || !d.Unwaited || d.CallID != "" || d.Status != want[ch.ID] {
			t.Errorf("child %s delivered %+v, want %s, unwaited", ch.ID, d, want[ch.ID])
			continue
		}
		st, _, err := e.rt.Load(t.Context(), ch.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d.Status == agent.ChildCanceled && (st.Ended == nil || st.Ended.Reason != agent.ReasonParentEnded) {
			t.Errorf("child %s ended %+v, want reason %s", ch.ID, st.Ended, agent.ReasonParentEnded)
		}
		if d.Spend != st.Used() {
			t.Errorf("child %s delivered spend %+v, journal says %+v", ch.ID, d.Spend, st.Used())
		}
	}
	// The end comes after the deliveries, and the total counts them.
	evs := e.events(id)
	if evs[len(evs)-1].Type != journal.RunCompleted || evs[len(evs)-2].Type != journal.ChildDelivered {
		t.Errorf("the lead's last events: %s, %s", evs[len(evs)-2].Type, evs[len(evs)-1].Type)
	}
	if u := out.State.Used(); u.Steps != 3 || u.Children != 2 {
		t.Errorf("lead used %+v: want its 2 model calls and the quick child's 1, 2 children", u)
	}
}

// TestHandoffToAgent: a lead hands the task over to another agent definition
// (its own instructions and narrower tools): the new agent is a child
// run under everything the lead had left, given the task and the lead's
// message; the lead ends as it ended, with its output, without another
// model call. A handoff to a definition wider than the lead is refused
// by the gate, and a Cedar policy sees the handoff as its own action.
func TestHandoffToAgent(t *testing.T) {
	handoff := func(agentName string) model.ToolCall {
		b, _ := json.Marshal(map[string]any{"agent": agentName, "message": "the bug is in parse(); fix it"})
		return tc("h", agent.HandoffTool, string(b))
	}
	defs := []agent.AgentDef{
		{Name: "fixer", Description: "fixes", System: "You fix bugs.", Tools: []string{"echo"}},
		{Name: "wide", Description: "wants bash", Tools: []string{"echo", "bash"}},
	}
	t.Run("completes as the next agent", func(t *testing.T) {
		var childReq *model.Request
		m := &taskModel{turns: map[string][]model.Message{
			"lead":            {calls(handoff("fixer")), answer("never asked")},
			"You take over *": {calls(tc("e", "echo", `{"text":"fixing"}`)), answer("fixed parse()")},
		}}
		spy := modelFunc(func(ctx context.Context, req *model.Request) (*model.Response, error) {
			if strings.HasPrefix(req.Messages[0].Content, "You take over") {
				childReq = req
			}
			return m.Generate(ctx, req)
		})
		e, team := teamEnv(t, spy)
		id := e.createTeam(&agent.RunCreated{Task: "lead", Agents: defs, Limits: agent.Limits{MaxSteps: 10, MaxToolCalls: 8, MaxChildren: 3}})
		p := e.params(spy)
		p.Team = team
		out, err := e.rt.Execute(t.Context(), id, p)
		if err != nil {
			t.Fatal(err)
		}
		team.Close()
		if out.Status != journal.StatusCompleted || out.End.Reason != agent.ReasonHandoff || out.End.Output != "fixed parse()" {
			t.Fatalf("lead %s %+v", out.Status, out.End)
		}
		if out.State.Steps != 1 || len(out.State.Children) != 1 {
			t.Errorf("lead made %d model calls and %d children, want 1 and 1", out.State.Steps, len(out.State.Children))
		}
		ch := out.State.Children[0]
		if s := ch.Spawned.Slice; ch.Spawned.Agent != "fixer" || s.MaxSteps != 8 || s.MaxToolCalls != 6 || s.MaxChildren != 2 {
			t.Errorf("handoff child %s with slice %+v, want everything left (8 steps, 6 tool calls, 2 children)", ch.Spawned.Agent, s)
		}
		if childReq == nil || !strings.Contains(childReq.Messages[0].Content, "the bug is in parse(); fix it") || !strings.Contains(childReq.System, "You fix bugs.") || len(childReq.Tools) != 1 || childReq.Tools[0].Name != "echo" {
			t.Errorf("the next agent was asked %+v", childReq)
		}
	})
	t.Run("wider than the lead is refused", func(t *testing.T) {
		m := &taskModel{turns: map[string][]model.Message{"lead": {calls(handoff("wide")), answer("ok")}}}
		e, team := teamEnv(t, m)
		id := e.createTeam(&agent.RunCreated{Task: "lead", Agents: defs})
		checkSpawn(t, e, team, m, id, "tools its parent does not have: bash")
	})
	t.Run("a Cedar policy forbids handoffs", func(t *testing.T) {
		m := &taskModel{turns: map[string][]model.Message{"lead": {calls(handoff("fixer")), answer("ok")}}}
		e, team := teamEnv(t, m)
		pol, err := policy.Parse("handoff.cedar", []byte(`
@id("all") permit(principal, action, resource);
@id("no-handoff-to-fixer") forbid (principal, action == Keel::Action::"handoff", resource) when { context.facts.handoff && context.facts.agent == "fixer" };
`))
		if err != nil {
			t.Fatal(err)
		}
		id := e.createTeam(&agent.RunCreated{Task: "lead", Agents: defs, Policy: agent.NewPolicyRef(pol)})
		p := e.params(m)
		p.Team = team
		out, err := e.rt.Execute(t.Context(), id, p)
		if err != nil {
			t.Fatal(err)
		}
		if c := out.State.Turns[0].Calls[0]; c.Decision.Effect != policy.Deny || c.Decision.Policies[0] != "no-handoff-to-fixer" || len(out.State.Children) != 0 {
			t.Errorf("decision %+v, %d children", c.Decision.Decision, len(out.State.Children))
		}
	})
}

type modelFunc func(ctx context.Context, req *model.Request) (*model.Response, error)

func (f modelFunc) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	return f(ctx, req)
}

// gated answers from m once release is closed.
type gated struct {
	release chan struct{}
	m       model.Model
}

func (g gated) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.m.Generate(ctx, req)
}

// TestPauseForChildren: with PauseForChildren (a cluster worker's
// executions), a lead whose wait_agents call waits for a child that has
// not ended pauses (reason children) instead of holding its execution;
// resumed once the children ended, the same call delivers each child
// once, and the call's re-runs count as one tool call.
func TestPauseForChildren(t *testing.T) {
	m := &taskModel{usage: model.Usage{InputTokens: 10, OutputTokens: 1}, turns: map[string][]model.Message{
		"lead": {calls(spawnCall("a", map[string]any{"task": "child a", "wait": false}), spawnCall("b", map[string]any{"task": "child b", "wait": false})),
			calls(tc("w", agent.WaitTool, `{}`)), answer("done")},
		"child a": {answer("result A")},
		"child b": {answer("result B")},
	}}
	release := make(chan struct{})
	mm := modelByTask{"child b": gated{release, m}, "": m}
	e, team := teamEnv(t, mm)
	id := e.createTeam(&agent.RunCreated{Task: "lead", Limits: agent.Limits{MaxSteps: 20, MaxToolCalls: 20}})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p := e.params(mm)
	p.Team, p.PauseForChildren = team, true
	out, err := e.rt.Execute(ctx, id, p)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusPaused || out.End == nil || out.End.Reason != agent.ReasonChildren {
		t.Fatalf("lead %s (%+v), want paused for its children", out.Status, out.End)
	}
	if w := out.State.Turns[1].Calls[0]; !w.Running() {
		t.Fatalf("wait call %+v, want left open", w)
	}
	close(release)
	for _, ch := range out.State.Children {
		if _, err := team.Wait(ctx, ch.ID); err != nil {
			t.Fatal(err)
		}
	}
	p = e.params(mm)
	p.Team, p.PauseForChildren = team, true
	out, err = e.rt.Execute(ctx, id, p)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusCompleted {
		t.Fatalf("lead %s (%+v), want completed", out.Status, out.End)
	}
	w := out.State.Turns[1].Calls[0]
	for _, r := range []string{"result A", "result B"} {
		if strings.Count(w.Finished.Content, r) != 1 {
			t.Errorf("wait result %q, want %q once", w.Finished.Content, r)
		}
	}
	for _, ch := range out.State.Children {
		if ch.Delivered == nil || ch.Delivered.CallID != w.ID {
			t.Errorf("child %s delivered %+v, want to %s", ch.ID, ch.Delivered, w.ID)
		}
	}
	paused := 0
	for _, ev := range e.events(id) {
		if ev.Type == journal.RunPaused {
			paused++
		}
	}
	if paused != 1 || out.State.ToolCalls != 3 || w.Attempts != 2 {
		t.Errorf("%d pauses, %d tool calls counted, wait call started %d times; want 1, 3, 2", paused, out.State.ToolCalls, w.Attempts)
	}
}

// TestEndedChildNotResumed: a child that ended (its result delivered to
// its parent, its spend counted there) is not resumed or followed up on
// its own, by an execution or a journaled resume: nothing is journaled.
func TestEndedChildNotResumed(t *testing.T) {
	m := &taskModel{usage: model.Usage{InputTokens: 10, OutputTokens: 1}, turns: map[string][]model.Message{
		"lead":  {calls(spawnCall("s", map[string]any{"task": "child"})), answer("ok")},
		"child": {answer("the answer is 42")},
	}}
	e, team := teamEnv(t, m)
	id := e.createTeam(&agent.RunCreated{Task: "lead", Limits: agent.Limits{MaxSteps: 10}})
	p := e.params(m)
	p.Team = team
	out, err := e.rt.Execute(t.Context(), id, p)
	if err != nil || out.Status != journal.StatusCompleted {
		t.Fatalf("lead %v %v", out, err)
	}
	child := out.State.Children[0].ID
	n := len(e.events(child))
	p = e.params(m)
	p.Message = "go on"
	_, err = e.rt.Execute(t.Context(), child, p)
	var ce *agent.ChildEndedError
	if !errors.Is(err, agent.ErrChildEnded) || !errors.As(err, &ce) || ce.Parent != id || ce.Root != id {
		t.Errorf("follow-up of the child: %v, want ErrChildEnded naming %s", err, id)
	}
	if _, err := e.rt.JournalResume(t.Context(), child, &agent.Resumption{Message: "go on"}); !errors.Is(err, agent.ErrChildEnded) {
		t.Errorf("journaled resume of the child: %v, want ErrChildEnded", err)
	}
	if got := len(e.events(child)); got != n {
		t.Errorf("the child's journal grew from %d to %d events", n, got)
	}
}

// TestChildWaitingForPersonPausesLead: with LocalTeam.ReturnPaused (keel
// run), a child that pauses for a person's approval pauses its lead,
// whose wait stays open and whose pause names the child's call; the
// child that ended is delivered already. Then either the child's call
// is approved and the lead resumed (each child delivered once, the
// lead completes), or the lead is canceled: the paused child is
// canceled with it, and the lead counts what the child spent, not its
// slice.
func TestChildWaitingForPersonPausesLead(t *testing.T) {
	const askWrite = `
@id("all") permit(principal, action, resource);
@id("w") @ask forbid(principal, action == Keel::Action::"write", resource);
@id("outside") forbid(principal, action, resource) when { context.outside };
`
	for _, then := range []string{"approve", "cancel"} {
		t.Run(then, func(t *testing.T) {
			m := &taskModel{usage: model.Usage{InputTokens: 10, OutputTokens: 1}, turns: map[string][]model.Message{
				"lead": {calls(spawnCall("a", map[string]any{"task": "child a", "wait": false}), spawnCall("b", map[string]any{"task": "child b", "wait": false})),
					calls(tc("w", agent.WaitTool, `{}`)), answer("done")},
				"child a": {calls(tc("w", "write", `{"path":"a.txt","content":"a"}`)), answer("result A")},
				"child b": {answer("result B")},
			}}
			e, team := teamEnv(t, m)
			team.ReturnPaused = true
			id := e.createTeam(&agent.RunCreated{Task: "lead", Policy: policyRef(t, askWrite), Limits: agent.Limits{MaxSteps: 20, MaxToolCalls: 20}})
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			p := e.params(m)
			p.Team = team
			out, err := e.rt.Execute(ctx, id, p)
			if err != nil {
				t.Fatal(err)
			}
			a, b := id+".a_0", id+".b_0"
			if out.Status != journal.StatusPaused || out.End == nil || out.End.Reason != agent.ReasonChildren ||
				!strings.Contains(out.End.Message, a+" waits for a person: approval of w_0 (write)") {
				t.Fatalf("lead %s (%+v), want paused for child a's approval", out.Status, out.End)
			}
			if w := out.State.Turns[1].Calls[0]; !w.Running() {
				t.Fatalf("wait call %+v, want left open", w)
			}
			for _, ch := range out.State.Children {
				if (ch.Delivered != nil) != (ch.ID == b) {
					t.Errorf("child %s delivered %+v; want only b", ch.ID, ch.Delivered)
				}
			}
			team.Close()
			if then == "cancel" {
				st, err := e.rt.Cancel(ctx, id, "ann")
				if err != nil {
					t.Fatal(err)
				}
				cs, _, err := e.rt.Load(ctx, a)
				if err != nil {
					t.Fatal(err)
				}
				if cs.Status != journal.StatusCanceled || !strings.Contains(cs.Ended.Message, "its parent run "+id+" was canceled") {
					t.Errorf("child a %s %+v, want canceled with its parent", cs.Status, cs.Ended)
				}
				want := st.Own()
				for _, ch := range st.Children {
					if ch.Delivered == nil {
						t.Fatalf("child %s not delivered after the cancel", ch.ID)
					}
					want.Steps += ch.Delivered.Spend.Steps
				}
				if d := st.Children[0].Delivered; st.Children[0].ID == a && (!d.Unwaited || d.Status != agent.ChildCanceled) {
					t.Errorf("child a delivered %+v, want canceled, unwaited", d)
				}
				if got := st.Used().Steps; got != want.Steps || got >= 10 {
					t.Errorf("lead counts %d steps after the cancel, want %d (the children's real spend, not their slices)", got, want.Steps)
				}
				return
			}
			if err := e.rt.Resolve(ctx, a, "w_0", &agent.ApprovalResolved{Decision: policy.Allow, By: "ann"}); err != nil {
				t.Fatal(err)
			}
			p = e.params(m)
			p.Team = team
			if out, err = e.rt.Execute(ctx, id, p); err != nil {
				t.Fatal(err)
			}
			if out.Status != journal.StatusCompleted {
				t.Fatalf("lead %s (%+v), want completed", out.Status, out.End)
			}
			w := out.State.Turns[1].Calls[0]
			for _, r := range []string{"result A", "result B"} {
				if strings.Count(w.Finished.Content, r) != 1 {
					t.Errorf("wait result %q, want %q once", w.Finished.Content, r)
				}
			}
			if got := e.log.get(); len(got) != 1 || got[0] != "write a.txt=a" {
				t.Errorf("tool log %v, want child a's write once, after the approval", got)
			}
		})
	}
}

// TestLeadKeepsAnAnswerAfterWaiting: under a tight step limit, a lead
// that spawns without waiting keeps two model calls, one to call
// wait_agents and one to answer with the results (fresh-user report 3,
// F12 b: it kept one, spent it on wait_agents and failed max_steps).
func TestLeadKeepsAnAnswerAfterWaiting(t *testing.T) {
	var spawns []model.ToolCall
	for i := range 4 {
		spawns = append(spawns, spawnCall(fmt.Sprintf("s%d", i), map[string]any{"task": "child", "wait": false, "limits": map[string]any{"max_steps": 3}}))
	}
	m := &taskModel{usage: model.Usage{InputTokens: 10, OutputTokens: 1}, turns: map[string][]model.Message{
		"lead":  {calls(spawns...), calls(tc("w", agent.WaitTool, `{}`)), answer("summary of the results")},
		"child": {calls(tc("e", "echo", `{"text":"a"}`)), calls(tc("e", "echo", `{"text":"b"}`)), answer("found")},
	}}
	e, team := teamEnv(t, m)
	id := e.createTeam(&agent.RunCreated{Task: "lead", Limits: agent.Limits{MaxSteps: 8}})
	p := e.params(m)
	p.Team = team
	out, err := e.rt.Execute(t.Context(), id, p)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusCompleted || out.End.Output != "summary of the results" {
		t.Fatalf("lead %s %+v, want completed with its answer", out.Status, out.End)
	}
	refused := 0
	for _, c := range out.State.Turns[0].Calls {
		if c.Finished != nil && c.Finished.IsError && strings.Contains(c.Finished.Content, "model calls: asks 3") {
			refused++
		}
	}
	if u := out.State.Used(); u.Steps > 8 || len(out.State.Children)+refused != 4 || len(out.State.Children) == 0 {
		t.Errorf("lead used %s with %d children (%d refused), want within 8 steps, each spawn given or refused", u, len(out.State.Children), refused)
	}
	t.Logf("%d children spawned, %d refused; tree used %s of 8 model calls", len(out.State.Children), refused, out.State.Used())
}
