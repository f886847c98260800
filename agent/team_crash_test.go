package agent_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/tool"
)

// crashTeam is a lead, its children and a model, on a store, with every
// append recorded in the order the process made them.
type crashTeam struct {
	store   *mem.Store
	rt      *agent.Runtime
	team    *agent.LocalTeam
	m       *taskModel
	mu      sync.Mutex
	appends [][]journal.Event
}

func newCrashTeam(t *testing.T, store *mem.Store, m *taskModel, e *env) *crashTeam {
	c := &crashTeam{store: store, m: m}
	c.rt = agent.NewRuntime(store, &agent.RuntimeOptions{
		Clock: func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) },
		NewID: func() string { return "lead" },
		OnAppend: func(evs []journal.Event, _ time.Duration) {
			c.mu.Lock()
			c.appends = append(c.appends, append([]journal.Event(nil), evs...))
			c.mu.Unlock()
		},
	})
	c.team = &agent.LocalTeam{Runtime: c.rt, Poll: 5 * time.Millisecond, Wire: func(ctx context.Context, _ *agent.RunCreated) (*agent.Wiring, io.Closer, error) {
		return &agent.Wiring{Model: m, Tools: e.reg, Env: &tool.Env{Workspace: e.ws}}, nil, nil
	}}
	return c
}

func (c *crashTeam) execute(t *testing.T, e *env) *agent.Outcome {
	t.Helper()
	p := e.params(c.m)
	p.Team = c.team
	out, err := c.rt.Execute(t.Context(), "lead", p)
	if err != nil {
		t.Fatal(err)
	}
	c.team.Close()
	return out
}

// TestTeamCrashAtEveryBoundary kills the process (lead and children, which
// run in it) between every two appends of a team run, resumes the lead,
// and checks that every child's result is delivered exactly once, no
// child is created twice or runs a step twice, and the lead completes. A
// kill -9 loses exactly what was not appended: here, the appends after
// the k-th, in the order the process made them.
func TestTeamCrashAtEveryBoundary(t *testing.T) {
	script := map[string][]model.Message{
		"lead": {
			calls(spawnCall("a", map[string]any{"task": "child a", "wait": false}), spawnCall("b", map[string]any{"task": "child b", "wait": false})),
			calls(tc("w", agent.WaitTool, `{}`)),
			calls(spawnCall("c", map[string]any{"task": "child c"})),
			answer("lead done"),
		},
		"child *": {calls(tc("e", "echo", `{"text":"look"}`)), answer("result of the child")},
	}
	e := newEnv(t)
	whole := newCrashTeam(t, mem.New(), &taskModel{turns: script}, e)
	created := &agent.RunCreated{Task: "lead", Limits: agent.Limits{MaxSteps: 40, MaxChildren: 3}}
	for _, s := range e.reg.Specs() {
		tt := e.reg.Tool(s.Name)
		created.Tools = append(created.Tools, agent.ToolInfo{ToolSpec: s, Effect: tt.Effect.String(), Idempotent: tt.Idempotent})
	}
	created.Tools = append(created.Tools, agent.TeamTools()...)
	if _, err := whole.rt.CreateAs(t.Context(), "lead", created); err != nil {
		t.Fatal(err)
	}
	if out := whole.execute(t, e); out.Status != journal.StatusCompleted {
		t.Fatalf("uncrashed lead %s %+v", out.Status, out.End)
	}
	n := len(whole.appends)
	t.Logf("%d appends across the lead and its 3 children", n)
	for k := 1; k < n; k++ {
		t.Run(fmt.Sprint("after_append_", k), func(t *testing.T) {
			store := mem.New()
			for _, evs := range whole.appends[:k] {
				drafts := make([]journal.Draft, len(evs))
				for i, ev := range evs {
					drafts[i] = journal.Draft{Type: ev.Type, Time: ev.Time, Payload: ev.Payload}
				}
				if _, err := store.Append(t.Context(), evs[0].RunID, evs[0].Seq-1, drafts...); err != nil {
					t.Fatal(err)
				}
			}
			c := newCrashTeam(t, store, &taskModel{turns: script}, e)
			out := c.execute(t, e)
			if out.Status != journal.StatusCompleted {
				t.Fatalf("resumed lead %s %+v", out.Status, out.End)
			}
			checkDeliveredOnce(t, c.rt, out.State)
		})
	}
}

// checkDeliveredOnce checks the lead's children after a resume: three,
// each completed after exactly one run of each of its steps, each
// delivered once, and each result in exactly one call's result.
func checkDeliveredOnce(t *testing.T, rt *agent.Runtime, lead *agent.State) {
	t.Helper()
	if len(lead.Children) != 3 {
		t.Fatalf("%d children, want 3", len(lead.Children))
	}
	results := 0
	for _, tr := range lead.Turns {
		for _, c := range tr.Calls {
			if c.Finished != nil {
				results += strings.Count(c.Finished.Content, "result of the child")
			}
		}
	}
	if results != 3 {
		t.Errorf("the children's results appear %d times in the lead's call results, want 3", results)
	}
	for _, ch := range lead.Children {
		if ch.Delivered == nil || ch.Delivered.Status != agent.ChildCompleted {
			t.Errorf("child %s delivered %+v", ch.ID, ch.Delivered)
		}
		st, evs, err := rt.Load(t.Context(), ch.ID)
		if err != nil {
			t.Fatal(err)
		}
		if st.Status != journal.StatusCompleted || st.Steps != 2 {
			t.Errorf("child %s %s after %d model calls, want completed after 2", ch.ID, st.Status, st.Steps)
		}
		started := 0
		for _, ev := range evs {
			if ev.Type == journal.ToolStarted {
				started++
			}
		}
		// The echo is read-only: a crash while it ran re-runs it.
		if started < 1 || started > 2 || st.ToolCalls != 1 {
			t.Errorf("child %s started its one call %d times (%d counted)", ch.ID, started, st.ToolCalls)
		}
	}
}

// TestHandoffCrashAtEveryBoundary: the same kill between every two
// appends of a handoff (the lead hands over to a definition, which runs
// a tool and answers): resumed, the lead ends completed with the next
// agent's output, and the next agent was created once, ran each of its
// model calls once and was delivered once.
func TestHandoffCrashAtEveryBoundary(t *testing.T) {
	script := map[string][]model.Message{
		"lead":            {calls(tc("h", agent.HandoffTool, `{"agent":"fixer","message":"over to you"}`)), answer("never asked")},
		"You take over *": {calls(tc("e", "echo", `{"text":"fix"}`)), answer("fixed by the next agent")},
	}
	e := newEnv(t)
	created := &agent.RunCreated{Task: "lead", Limits: agent.Limits{MaxSteps: 10, MaxChildren: 1},
		Agents: []agent.AgentDef{{Name: "fixer", Tools: []string{"echo"}}}}
	for _, s := range e.reg.Specs() {
		tt := e.reg.Tool(s.Name)
		created.Tools = append(created.Tools, agent.ToolInfo{ToolSpec: s, Effect: tt.Effect.String(), Idempotent: tt.Idempotent})
	}
	created.Tools = append(created.Tools, agent.TeamTools()...)
	whole := newCrashTeam(t, mem.New(), &taskModel{turns: script}, e)
	if _, err := whole.rt.CreateAs(t.Context(), "lead", created); err != nil {
		t.Fatal(err)
	}
	if out := whole.execute(t, e); out.Status != journal.StatusCompleted || out.End.Reason != agent.ReasonHandoff {
		t.Fatalf("uncrashed lead %s %+v", out.Status, out.End)
	}
	n := len(whole.appends)
	t.Logf("%d appends across the lead and the agent it hands over to", n)
	for k := 1; k < n; k++ {
		t.Run(fmt.Sprint("after_append_", k), func(t *testing.T) {
			store := mem.New()
			for _, evs := range whole.appends[:k] {
				drafts := make([]journal.Draft, len(evs))
				for i, ev := range evs {
					drafts[i] = journal.Draft{Type: ev.Type, Time: ev.Time, Payload: ev.Payload}
				}
				if _, err := store.Append(t.Context(), evs[0].RunID, evs[0].Seq-1, drafts...); err != nil {
					t.Fatal(err)
				}
			}
			c := newCrashTeam(t, store, &taskModel{turns: script}, e)
			out := c.execute(t, e)
			if out.Status != journal.StatusCompleted || out.End.Reason != agent.ReasonHandoff || out.End.Output != "fixed by the next agent" || out.State.Steps != 1 {
				t.Fatalf("resumed lead %s %+v after %d model calls", out.Status, out.End, out.State.Steps)
			}
			if len(out.State.Children) != 1 || out.State.Children[0].Delivered == nil {
				t.Fatalf("children %+v", out.State.Children)
			}
			st, _, err := c.rt.Load(t.Context(), out.State.Children[0].ID)
			if err != nil {
				t.Fatal(err)
			}
			if st.Status != journal.StatusCompleted || st.Steps != 2 {
				t.Errorf("next agent %s after %d model calls, want completed after 2", st.Status, st.Steps)
			}
		})
	}
}
