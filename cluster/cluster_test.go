package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/cluster"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/model/replay"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/sandbox/none"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin"
)

const askRm = `
@id("all") permit(principal, action, resource);
@id("rm") @ask @reason("deleting files needs a person")
forbid(principal, action, resource) when { resource has name && resource.name == "rm" };
`

// trajectory writes a recording whose k-th turn runs commands[k] with
// bash; an empty command is a final answer.
func trajectory(t *testing.T, commands ...string) string {
	t.Helper()
	msgs := []map[string]any{{"role": "system", "content": "test"}, {"role": "user", "content": "do it"}}
	for i, c := range commands {
		if c == "" {
			msgs = append(msgs, map[string]any{"role": "assistant", "content": "done"})
			continue
		}
		args, _ := json.Marshal(map[string]string{"command": c})
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs, map[string]any{"role": "assistant", "content": fmt.Sprintf("step %d", i+1), "tool_calls": []map[string]any{
			{"id": id, "type": "function", "function": map[string]any{"name": "bash", "arguments": string(args)}}}},
			map[string]any{"role": "tool", "tool_call_id": id, "content": "recorded"})
	}
	b, _ := json.Marshal(map[string]any{"trajectory_format": "mini-swe-agent-1.1", "instance_id": "t", "messages": msgs,
		"info": map[string]any{"exit_status": "Submitted", "submission": ""}})
	p := filepath.Join(t.TempDir(), "t.traj.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

type closers []io.Closer

func (cs closers) Close() error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// fixture is a journal, a runtime and a worker wired with replay models,
// the builtin tools and no sandbox isolation.
type fixture struct {
	rt    *agent.Runtime
	w     *cluster.Worker
	wired atomic.Int64
	// settings are those of the run.created the worker wired last.
	settings atomic.Pointer[agent.Settings]
}

func newFixture(t *testing.T, d cluster.Driver) *fixture {
	store, err := sqlite.Open(filepath.Join(t.TempDir(), "j.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	f := &fixture{rt: agent.NewRuntime(store, nil)}
	f.w = cluster.NewWorker(f.rt, &cluster.WorkerOptions{Driver: d, Wire: func(_ context.Context, c *agent.RunCreated) (*agent.Wiring, io.Closer, error) {
		f.wired.Add(1)
		f.settings.Store(c.Settings)
		tr, err := replay.Load(c.Model[len("replay:"):])
		if err != nil {
			return nil, nil, err
		}
		ws, err := tool.NewWorkspace(c.Workspace, c.MountPath, nil)
		if err != nil {
			return nil, nil, err
		}
		sb, err := none.New(&sandbox.Spec{Workspace: ws.Root(), MountPath: c.MountPath})
		if err != nil {
			ws.Close()
			return nil, nil, err
		}
		reg := tool.NewRegistry()
		builtin.Register(reg, &builtin.Options{NoWeb: true})
		return &agent.Wiring{Model: replay.New(tr, nil), ModelName: c.Model, Tools: reg, Env: &tool.Env{Sandbox: sb, Workspace: ws}}, closers{ws, sb}, nil
	}})
	return f
}

func (f *fixture) create(t *testing.T, traj, pol string) (string, string) {
	t.Helper()
	reg := tool.NewRegistry()
	builtin.Register(reg, &builtin.Options{NoWeb: true})
	var infos []agent.ToolInfo
	for _, s := range reg.Specs() {
		tl := reg.Tool(s.Name)
		infos = append(infos, agent.ToolInfo{ToolSpec: s, Effect: tl.Effect.String(), Idempotent: tl.Idempotent})
	}
	ws := t.TempDir()
	c := &agent.RunCreated{Task: "do it", Model: "replay:" + traj, Workspace: ws, MountPath: ws, Sandbox: "none", Tools: infos}
	if pol != "" {
		eng, err := policy.Parse("ask.cedar", []byte(pol))
		if err != nil {
			t.Fatal(err)
		}
		c.Policy = agent.NewPolicyRef(eng)
	}
	id, err := f.rt.Create(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	return id, ws
}

func (f *fixture) env(s *testsuite.WorkflowTestSuite) *testsuite.TestWorkflowEnvironment {
	env := s.NewTestWorkflowEnvironment()
	// The workflow never blocks; a second's stall is a loaded machine.
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: time.Minute})
	f.w.Register(env, env)
	return env
}

func (f *fixture) events(t *testing.T, id string) (*agent.State, []journal.Event) {
	t.Helper()
	evs, err := journal.ReadVerified(context.Background(), f.rt.Store(), id)
	if err != nil {
		t.Fatal(err)
	}
	st, err := agent.Fold(id, evs)
	if err != nil {
		t.Fatal(err)
	}
	return st, evs
}

// drive runs run id's workflow in env to its end and returns the run's
// state and events; the workflow must end without an error, the run
// with status want.
func (f *fixture) drive(t *testing.T, env *testsuite.TestWorkflowEnvironment, id string, want journal.Status) (*agent.State, []journal.Event) {
	t.Helper()
	env.ExecuteWorkflow(cluster.WorkflowName, cluster.RunInput{RunID: id})
	if !env.IsWorkflowCompleted() || env.GetWorkflowError() != nil {
		t.Fatalf("workflow: completed %t, %v", env.IsWorkflowCompleted(), env.GetWorkflowError())
	}
	st, evs := f.events(t, id)
	if st.Status != want {
		t.Fatalf("run %s, want %s", st.Status, want)
	}
	return st, evs
}

func count(evs []journal.Event, typ journal.Type) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// The workflow drives a run to completion one batch per activity: the
// journal is the run's record (no run.resumed between steps), the sandbox
// is wired once and kept between steps on the worker holding the run.
func TestWorkflowCompletesRun(t *testing.T) {
	f := newFixture(t, cluster.Driver{})
	id, ws := f.create(t, trajectory(t, "echo one > a", "cat a && echo two >> a", ""), "")
	var s testsuite.WorkflowTestSuite
	env := f.env(&s)
	_, evs := f.drive(t, env, id, journal.StatusCompleted)
	if n := count(evs, journal.RunResumed); n != 0 {
		t.Errorf("%d run.resumed events, want none (each step continues the previous one)", n)
	}
	if n := f.wired.Load(); n != 1 {
		t.Errorf("wired %d times, want once (the sandbox stays with the worker between steps)", n)
	}
	b, _ := os.ReadFile(filepath.Join(ws, "a"))
	if string(b) != "one\ntwo\n" {
		t.Errorf("workspace file %q", b)
	}
}

// A run waiting three (simulated) days for a person holds no worker: no
// step executes and no sandbox is kept while it waits; the decision's
// wake signal resumes it.
func TestApprovalWaitHoldsNoWorker(t *testing.T) {
	f := newFixture(t, cluster.Driver{})
	id, ws := f.create(t, trajectory(t, "echo x > old.log", "rm old.log", ""), askRm)
	var s testsuite.WorkflowTestSuite
	env := f.env(&s)
	var during int
	env.RegisterDelayedCallback(func() {
		st, _ := f.events(t, id)
		if st.Status != journal.StatusPaused {
			t.Errorf("after three days the run is %s, want paused", st.Status)
		}
		during = f.w.Holding()
		list, err := f.rt.Approvals(context.Background(), nil)
		if err != nil || len(list) != 1 {
			t.Errorf("approvals %v %v", list, err)
			return
		}
		if err := f.rt.Resolve(context.Background(), id, list[0].CallID, &agent.ApprovalResolved{Decision: policy.Allow, By: "ops"}); err != nil {
			t.Error(err)
		}
		env.SignalWorkflow(cluster.WakeSignal, nil)
	}, 72*time.Hour)
	start := env.Now()
	env.ExecuteWorkflow(cluster.WorkflowName, cluster.RunInput{RunID: id})
	if !env.IsWorkflowCompleted() || env.GetWorkflowError() != nil {
		t.Fatalf("workflow: completed %t, %v", env.IsWorkflowCompleted(), env.GetWorkflowError())
	}
	if waited := env.Now().Sub(start); waited < 72*time.Hour {
		t.Errorf("the workflow ended after %s of workflow time, before the decision", waited)
	}
	if during != 0 {
		t.Errorf("while paused the worker held %d runs' sandboxes, want 0", during)
	}
	st, _ := f.events(t, id)
	if st.Status != journal.StatusCompleted {
		t.Fatalf("run %s", st.Status)
	}
	if _, err := os.Stat(filepath.Join(ws, "old.log")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the approved rm did not run: %v", err)
	}
}

// Wake-ups that bring nothing (the start's signal, a server's adoption,
// a signal for a decision an earlier look already saw) journal nothing:
// the approved run is resumed once, by its approval.
func TestStaleWakesJournalNothing(t *testing.T) {
	f := newFixture(t, cluster.Driver{})
	id, _ := f.create(t, trajectory(t, "echo x > old.log", "rm old.log", ""), askRm)
	var s testsuite.WorkflowTestSuite
	env := f.env(&s)
	for _, at := range []time.Duration{time.Hour, 2 * time.Hour, 2*time.Hour + time.Minute} {
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(cluster.WakeSignal, nil) }, at)
	}
	env.RegisterDelayedCallback(func() {
		list, err := f.rt.Approvals(context.Background(), nil)
		if err != nil || len(list) != 1 {
			t.Errorf("approvals %v %v", list, err)
			return
		}
		if err := f.rt.Resolve(context.Background(), id, list[0].CallID, &agent.ApprovalResolved{Decision: policy.Allow, By: "ops"}); err != nil {
			t.Error(err)
		}
		env.SignalWorkflow(cluster.WakeSignal, nil)
	}, 72*time.Hour)
	env.ExecuteWorkflow(cluster.WorkflowName, cluster.RunInput{RunID: id})
	if !env.IsWorkflowCompleted() || env.GetWorkflowError() != nil {
		t.Fatalf("workflow: completed %t, %v", env.IsWorkflowCompleted(), env.GetWorkflowError())
	}
	st, evs := f.events(t, id)
	if st.Status != journal.StatusCompleted {
		t.Fatalf("run %s", st.Status)
	}
	if r, p := count(evs, journal.RunResumed), count(evs, journal.RunPaused); r != 1 || p != 0 {
		t.Errorf("%d run.resumed and %d run.paused, want 1 and 0 (the approval resumes the run once)", r, p)
		for _, e := range evs {
			t.Log(e.Seq, e.Type)
		}
	}
}

// A long run continues as new every MaxSteps activities; the state that
// crosses over is ids and a sequence number.
func TestContinueAsNew(t *testing.T) {
	f := newFixture(t, cluster.Driver{MaxSteps: 2})
	id, _ := f.create(t, trajectory(t, "echo 1", "echo 2", "echo 3", "echo 4", "echo 5", "echo 6", ""), "")
	var s testsuite.WorkflowTestSuite
	in := cluster.RunInput{RunID: id}
	for execs := 1; ; execs++ {
		if execs > 10 {
			t.Fatal("the workflow never ended")
		}
		env := f.env(&s)
		env.ExecuteWorkflow(cluster.WorkflowName, in)
		err := env.GetWorkflowError()
		if err == nil {
			if execs < 3 {
				t.Errorf("ended after %d executions, want continue-as-new in between", execs)
			}
			break
		}
		var can *workflow.ContinueAsNewError
		if !errors.As(err, &can) {
			t.Fatalf("execution %d: %v", execs, err)
		}
		if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &in); err != nil {
			t.Fatal(err)
		}
		if in.RunID != id || in.AfterSeq == 0 || in.AfterHash == "" {
			t.Fatalf("continue-as-new input %+v", in)
		}
	}
	st, _ := f.events(t, id)
	if st.Status != journal.StatusCompleted {
		t.Errorf("run %s", st.Status)
	}
}
