package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool"
)

// askRm is a policy that allows everything in the workspace, asks before
// any rm and denies paths outside the workspace.
const askRm = `
@id("all") permit(principal, action, resource);
@id("rm") @ask forbid(principal, action, resource) when { resource has name && resource.name == "rm" };
@id("outside") forbid(principal, action, resource) when { context.outside };
`

func policyRef(t *testing.T, src string) *agent.PolicyRef {
	t.Helper()
	e, err := policy.Parse("test.cedar", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return agent.NewPolicyRef(e)
}

// withBash adds a fake bash tool that logs its commands.
func withBash(e *env) {
	tool.Add(e.reg, &tool.Tool{Name: "bash", Description: "run a command", Effect: tool.External},
		func(ctx context.Context, req *tool.Request, in struct {
			Command string `json:"command"`
		}) (*tool.Result, error) {
			e.log.add("bash " + in.Command)
			return tool.Text("ran: " + in.Command), nil
		})
}

func bash(id, cmd string) model.ToolCall {
	b, _ := json.Marshal(map[string]string{"command": cmd})
	return tc(id, "bash", string(b))
}

// payloads returns the decoded payloads of events of type typ.
func payloads[T any](t *testing.T, evs []journal.Event, typ journal.Type) []*T {
	t.Helper()
	var out []*T
	for i := range evs {
		if evs[i].Type != typ {
			continue
		}
		v, err := agent.Decode(&evs[i])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v.(*T))
	}
	return out
}

func effects(parts []policy.Part) []policy.Effect {
	var out []policy.Effect
	for _, p := range parts {
		out = append(out, p.Effect)
	}
	return out
}

// One part of a compound command asks: the call waits with the exact
// action shown raw and only the asking part listed; approving it runs the
// whole command once.
func TestCompoundCommandAsksForItsPart(t *testing.T) {
	for _, tt := range []struct {
		name, cmd string
		parts     []policy.Effect
	}{
		{"and list", "ls && rm -rf build", []policy.Effect{policy.Allow, policy.Ask}},
		{"pipe", "ls | rm x", []policy.Effect{policy.Allow, policy.Ask}},
		{"substitution", "echo $(rm x)", []policy.Effect{policy.Allow, policy.Ask}},
		{"nested shell", "bash -c 'cat a; rm b'", []policy.Effect{policy.Allow, policy.Ask}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			withBash(e)
			m := &script{turns: []model.Message{calls(bash("c1", tt.cmd)), answer("done")}}
			id := e.create(&agent.RunCreated{Policy: policyRef(t, askRm), MountPath: "/workspace"})
			out, err := e.rt.Execute(t.Context(), id, e.params(m))
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != journal.StatusPaused || len(e.log.get()) != 0 {
				t.Fatalf("status %s, ran %v", out.Status, e.log.get())
			}
			evs := e.events(id)
			gd := payloads[agent.GateDecided](t, evs, journal.GateDecided)
			if len(gd) != 1 || gd[0].Effect != policy.Ask || !slices.Equal(effects(gd[0].Parts), tt.parts) {
				t.Fatalf("gate.decided = %+v", gd)
			}
			ar := payloads[agent.ApprovalRequested](t, evs, journal.ApprovalRequested)
			if len(ar) != 1 || ar[0].Action != tt.cmd || len(ar[0].Parts) != 1 || ar[0].Parts[0].Command != "rm" {
				t.Fatalf("approval.requested = %+v", ar)
			}
			pending := out.State.Pending()
			if len(pending) != 1 || pending[0].Seq != evs[len(evs)-1].Seq || pending[0].Action != tt.cmd {
				t.Errorf("pending = %+v", pending)
			}
			if err := e.rt.Resolve(t.Context(), id, "c1", &agent.ApprovalResolved{Decision: policy.Allow, By: "ann"}); err != nil {
				t.Fatal(err)
			}
			out, err = e.rt.Execute(t.Context(), id, e.params(m))
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != journal.StatusCompleted || !slices.Equal(e.log.get(), []string{"bash " + tt.cmd}) {
				t.Errorf("after approval: %s, ran %v", out.Status, e.log.get())
			}
			checkPairs(t, m.reqs)
		})
	}
}

func TestDenialReachesTheModel(t *testing.T) {
	e := newEnv(t)
	withBash(e)
	m := &script{turns: []model.Message{calls(bash("c1", "ls && cat ../../etc/passwd")), answer("done")}}
	id := e.create(&agent.RunCreated{Policy: agent.NewPolicyRef(policy.Default()), MountPath: "/workspace", Sandbox: "linux"})
	out, err := e.rt.Execute(t.Context(), id, e.params(m))
	if err != nil {
		t.Fatal(err)
	}
	// The run's only call was denied: the answer after it is no
	// completion, and the run says so.
	if out.Status != journal.StatusFailed || out.End.Reason != "all_denied" || !strings.Contains(out.End.Message, "every one of the run's 1 tool calls was denied") || len(e.log.get()) != 0 {
		t.Fatalf("status %s %+v, ran %v", out.Status, out.End, e.log.get())
	}
	res := m.reqs[1].Messages[2]
	if !res.IsError || !strings.Contains(res.Content, "the policy denied this call") || !strings.Contains(res.Content, "cat ../../etc/passwd") {
		t.Errorf("the model saw %q", res.Content)
	}
}

// The policy recorded in run.created decides, whatever the executor is
// given, and a tampered policy source is refused.
func TestJournaledPolicyDecides(t *testing.T) {
	e := newEnv(t)
	withBash(e)
	m := &script{turns: []model.Message{calls(bash("c1", "rm x")), answer("done")}}
	id := e.create(&agent.RunCreated{Policy: policyRef(t, askRm)})
	p := e.params(m)
	p.Policy = policy.AllowAll
	out, err := e.rt.Execute(t.Context(), id, p)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusPaused {
		t.Errorf("status %s: ExecParams.Policy overrode the run's policy", out.Status)
	}
	bad := policyRef(t, askRm)
	bad.Source += "\n// changed"
	id2 := e.create(&agent.RunCreated{Policy: bad})
	if _, err := e.rt.Execute(t.Context(), id2, e.params(m)); !errors.Is(err, agent.ErrPolicy) {
		t.Errorf("Execute with a tampered policy = %v, want ErrPolicy", err)
	}
}

// Remembered approvals are narrow: the exact part, or a stated prefix;
// other commands still ask, and a prefix must fit what asked.
func TestRememberedApprovals(t *testing.T) {
	e := newEnv(t)
	withBash(e)
	m := &script{turns: []model.Message{
		calls(bash("c1", "rm a.txt")),
		calls(bash("c2", "ls && rm a.txt")),
		calls(bash("c3", "rm b.txt")),
		answer("done"),
	}}
	id := e.create(&agent.RunCreated{Policy: policyRef(t, askRm)})
	run := func() *agent.Outcome {
		t.Helper()
		out, err := e.rt.Execute(t.Context(), id, e.params(m))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	run()
	err := e.rt.Resolve(t.Context(), id, "c1", &agent.ApprovalResolved{Decision: policy.Allow, Remember: "run", Prefix: []string{"git", "push"}})
	if !errors.Is(err, policy.ErrBadPrefix) {
		t.Fatalf("Resolve with a prefix that does not fit = %v", err)
	}
	d := &agent.ApprovalResolved{Decision: policy.Allow, By: "ann", Remember: "run"}
	if err := e.rt.Resolve(t.Context(), id, "c1", d); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]policy.Grant{{ID: id + "/c1#0", Scope: "run", Tool: "bash", Exact: "rm a.txt", By: "ann", Run: id, Call: "c1"}}, d.Grants); diff != "" {
		t.Fatalf("grants (-want +got):\n%s", diff)
	}
	out := run()
	if out.Status != journal.StatusPaused || len(out.State.Pending()) != 1 || out.State.Pending()[0].CallID != "c3" {
		t.Fatalf("status %s, pending %+v", out.Status, out.State.Pending())
	}
	if diff := cmp.Diff([]string{"bash rm a.txt", "bash ls && rm a.txt"}, e.log.get()); diff != "" {
		t.Errorf("ran (-want +got):\n%s", diff)
	}
	gd := payloads[agent.GateDecided](t, e.events(id), journal.GateDecided)
	if gd[1].Effect != policy.Allow || gd[1].Parts[1].Grant != id+"/c1#0" {
		t.Errorf("c2 decision %+v", gd[1])
	}
	if err := e.rt.Resolve(t.Context(), id, "c3", &agent.ApprovalResolved{Decision: policy.Deny, Remember: "run"}); err == nil {
		t.Error("a denial was remembered")
	}
}

// Standing approvals of the principal come from the principal check.
func TestAgentGrantsApply(t *testing.T) {
	e := newEnv(t)
	withBash(e)
	m := &script{turns: []model.Message{calls(bash("c1", "rm -f tmp/x")), calls(bash("c2", "rmdir tmp")), answer("done")}}
	id := e.create(&agent.RunCreated{Policy: policyRef(t, askRm), Principal: "worker"})
	p := e.params(m)
	p.Principals = func(_ context.Context, principal, obo string) ([]policy.Grant, error) {
		if principal != "worker" || obo != "" {
			t.Errorf("check(%q, %q)", principal, obo)
		}
		return []policy.Grant{{ID: "g1", Scope: "agent", Tool: "bash", Prefix: []string{"rm", "-f", "tmp/x"}}}, nil
	}
	out, err := e.rt.Execute(t.Context(), id, p)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusCompleted {
		t.Fatalf("status %s (%+v)", out.Status, out.End)
	}
	if diff := cmp.Diff([]string{"bash rm -f tmp/x", "bash rmdir tmp"}, e.log.get()); diff != "" {
		t.Errorf("ran (-want +got):\n%s", diff)
	}
}

// A run that waits (ExecParams.Wait) picks up a decision that another
// process, with its own handle on the same SQLite file, records.
func TestWaitingRunPicksUpApprovalFromAnotherProcess(t *testing.T) {
	db := filepath.Join(t.TempDir(), "j.db")
	s1, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	s2, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	e := newEnv(t)
	withBash(e)
	e.rt = agent.NewRuntime(s1, nil)
	m := &script{turns: []model.Message{calls(bash("c1", "rm old.log")), answer("done")}}
	id := e.create(&agent.RunCreated{Policy: policyRef(t, askRm)})
	waiting := make(chan []agent.PendingApproval, 1)
	p := e.params(m)
	p.Wait = true
	p.OnWait = func(ps []agent.PendingApproval) { waiting <- ps }
	type result struct {
		out *agent.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := e.rt.Execute(t.Context(), id, p)
		done <- result{out, err}
	}()
	ps := <-waiting
	if len(ps) != 1 || ps[0].Action != "rm old.log" {
		t.Fatalf("waiting for %+v", ps)
	}
	other := agent.NewRuntime(s2, nil)
	list, err := other.Approvals(t.Context(), nil)
	if err != nil || len(list) != 1 || list[0].RunID != id || list[0].CallID != "c1" {
		t.Fatalf("Approvals = %+v, %v", list, err)
	}
	if err := other.Resolve(t.Context(), id, "c1", &agent.ApprovalResolved{Decision: policy.Allow, By: "ops"}); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.out.Status != journal.StatusCompleted {
		t.Fatalf("Execute = %+v, %v", r.out, r.err)
	}
	if diff := cmp.Diff([]string{"bash rm old.log"}, e.log.get()); diff != "" {
		t.Errorf("ran (-want +got):\n%s", diff)
	}
	// The approver continuing too late is told the run moved on.
	evs, _ := s2.Read(t.Context(), id, 1)
	var resolved int64
	for _, ev := range evs {
		if ev.Type == journal.ApprovalResolved {
			resolved = ev.Seq
		}
	}
	p2 := e.params(m)
	p2.IfLastSeq = resolved
	if _, err := other.Execute(t.Context(), id, p2); !errors.Is(err, agent.ErrRunCompleted) && !errors.Is(err, agent.ErrRunBusy) {
		t.Errorf("late approver Execute = %v", err)
	}
}

// With a deadline, a waiting run applies the default decision when
// nobody decides in time, and journals who decided (keel.timeout).
func TestApprovalTimeout(t *testing.T) {
	for _, tt := range []struct {
		name string
		def  policy.Effect
		ran  []string
		want journal.Status // the only call denied: no completion
	}{
		{"default deny", "", nil, journal.StatusFailed},
		{"default allow", policy.Allow, []string{"bash rm x"}, journal.StatusCompleted},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t)
				e.store = mem.New()
				e.rt = agent.NewRuntime(e.store, nil)
				withBash(e)
				m := &script{turns: []model.Message{calls(bash("c1", "rm x")), answer("done")}}
				id := e.create(&agent.RunCreated{Policy: policyRef(t, askRm),
					Approval: &agent.ApprovalSettings{Timeout: agent.Duration(time.Hour), Default: tt.def}})
				p := e.params(m)
				p.Wait = true
				start := time.Now()
				out, err := e.rt.Execute(context.Background(), id, p)
				if err != nil {
					t.Fatal(err)
				}
				if out.Status != tt.want || time.Since(start) < time.Hour {
					t.Fatalf("status %s after %s", out.Status, time.Since(start))
				}
				if diff := cmp.Diff(tt.ran, e.log.get()); diff != "" {
					t.Errorf("ran (-want +got):\n%s", diff)
				}
				evs := e.events(id)
				ar := payloads[agent.ApprovalRequested](t, evs, journal.ApprovalRequested)
				rs := payloads[agent.ApprovalResolved](t, evs, journal.ApprovalResolved)
				want := policy.Deny
				if tt.def == policy.Allow {
					want = policy.Allow
				}
				if ar[0].Expires == nil || ar[0].Default != want || len(rs) != 1 || rs[0].By != agent.ByTimeout || rs[0].Decision != want {
					t.Errorf("requested %+v, resolved %+v", ar[0], rs)
				}
				if tt.def != policy.Allow && !strings.Contains(m.reqs[1].Messages[2].Content, "nobody approved this call in time") {
					t.Errorf("the model saw %q", m.reqs[1].Messages[2].Content)
				}
			})
		})
	}
}

// A deadline that passed while no process waited is applied by the next
// execution.
func TestExpiredApprovalAppliedOnResume(t *testing.T) {
	e := newEnv(t)
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	e.rt = agent.NewRuntime(e.store, &agent.RuntimeOptions{Clock: func() time.Time { return time.Unix(0, now.Load()).UTC() }})
	withBash(e)
	m := &script{turns: []model.Message{calls(bash("c1", "rm x")), answer("done")}}
	id := e.create(&agent.RunCreated{Policy: policyRef(t, askRm), Approval: &agent.ApprovalSettings{Timeout: agent.Duration(72 * time.Hour)}})
	out, err := e.rt.Execute(t.Context(), id, e.params(m))
	if err != nil || out.Status != journal.StatusPaused {
		t.Fatalf("%v %v", out, err)
	}
	now.Add(int64(24 * time.Hour))
	if out, err = e.rt.Execute(t.Context(), id, e.params(m)); err != nil || out.Status != journal.StatusPaused {
		t.Fatalf("a day later: %v %v", out.Status, err)
	}
	now.Add(int64(49 * time.Hour))
	// The only call was denied at the deadline, so the model's answer is
	// no completion.
	if out, err = e.rt.Execute(t.Context(), id, e.params(m)); err != nil || out.Status != journal.StatusFailed || out.End.Reason != "all_denied" {
		t.Fatalf("after the deadline: %v %v %v", out.Status, out.End, err)
	}
	if len(e.log.get()) != 0 {
		t.Errorf("ran %v", e.log.get())
	}
	checkPairs(t, m.reqs)
}

// Replaying a journal with its recorded policy yields the recorded
// decisions (docs/architecture.md, "Contract — determinism").
func TestRecordedDecisionsReplay(t *testing.T) {
	e := newEnv(t)
	withBash(e)
	m := &script{turns: []model.Message{
		calls(bash("c1", "ls -la && cat README.md"), bash("c2", "cat /etc/hosts | wc -l")),
		calls(bash("c3", "echo $(whoami) > who.txt; rm -rf /usr/lib")),
		answer("done"),
	}}
	id := e.create(&agent.RunCreated{Policy: agent.NewPolicyRef(policy.Default()), MountPath: "/workspace", Sandbox: "linux"})
	if _, err := e.rt.Execute(t.Context(), id, e.params(m)); err != nil {
		t.Fatal(err)
	}
	evs := e.events(id)
	st, err := agent.Fold(id, evs)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := agent.RunPolicy(st.Created)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, turn := range st.Turns {
		for _, c := range turn.Calls {
			n++
			got := eng.Decide(t.Context(), &policy.Call{RunID: id, CallID: c.ID, Principal: st.Created.Principal, Tool: c.Name, Effect: "external",
				Arguments: json.RawMessage(c.Arguments), MountPath: st.Created.MountPath, Sandbox: st.Created.Sandbox})
			if diff := cmp.Diff(c.Decision.Decision, got); diff != "" {
				t.Errorf("call %s: replayed decision differs (-recorded +replayed):\n%s", c.ID, diff)
			}
		}
	}
	if n != 3 {
		t.Fatalf("%d calls", n)
	}
}

// A person's deny is an answer: the model acknowledging it ends the turn
// completed, and a later turn is judged on its own calls. The policy's
// denials fail a turn, counted from the newest person's message only.
func TestPersonDenyIsAnEndOfTurn(t *testing.T) {
	e := newEnv(t)
	withBash(e)
	m := &script{turns: []model.Message{
		calls(bash("c1", "rm notes.txt")), answer("ok, I left notes.txt alone"),
		answer("hi"),
		calls(bash("c2", "cat ../../etc/passwd")), answer("I could not read it"),
		answer("hello again"),
	}}
	id := e.create(&agent.RunCreated{Policy: policyRef(t, askRm)})
	out, err := e.rt.Execute(t.Context(), id, e.params(m))
	if err != nil || out.Status != journal.StatusPaused {
		t.Fatalf("%v %v", out, err)
	}
	if err := e.rt.Resolve(t.Context(), id, "c1", &agent.ApprovalResolved{Decision: policy.Deny, By: "ann", Reason: "not now"}); err != nil {
		t.Fatal(err)
	}
	step := func(msg string) *agent.Outcome {
		t.Helper()
		p := e.params(m)
		p.Message = msg
		out, err := e.rt.Execute(t.Context(), id, p)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for i, tt := range []struct {
		msg            string
		status         journal.Status
		reason, output string
	}{
		{"", journal.StatusCompleted, "answer", "ok, I left notes.txt alone"},
		{"just say hi", journal.StatusCompleted, "answer", "hi"},
		{"read the passwd file", journal.StatusFailed, "all_denied", "I could not read it"},
		{"say hello", journal.StatusCompleted, "answer", "hello again"},
	} {
		out := step(tt.msg)
		if out.Status != tt.status || out.End.Reason != tt.reason || out.End.Output != tt.output {
			t.Errorf("turn %d (%q): %s %+v, want %s %s", i, tt.msg, out.Status, out.End, tt.status, tt.reason)
		}
		if tt.reason == "all_denied" && (!strings.Contains(out.End.Message, "every one of the 1 tool calls since the newest message was denied by the policy") || !strings.Contains(out.End.Message, "keel policy check")) {
			t.Errorf("all_denied says %q", out.End.Message)
		}
	}
	if len(e.log.get()) != 0 {
		t.Errorf("ran %v", e.log.get())
	}
}
