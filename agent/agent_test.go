package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool"
)

// script is a fake model: it answers the k-th request with turns[k],
// where k counts the assistant messages in the request, and records
// every request.
type script struct {
	mu    sync.Mutex
	turns []model.Message
	reqs  []*model.Request
	usage model.Usage
}

func (s *script) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, req)
	k := 0
	for _, m := range req.Messages {
		if m.Role == model.RoleAssistant {
			k++
		}
	}
	if k >= len(s.turns) {
		return nil, &model.Error{Kind: model.KindExhausted, Message: "script exhausted"}
	}
	m := s.turns[k]
	m.Role = model.RoleAssistant
	return &model.Response{Message: m, Usage: s.usage}, nil
}

func calls(cs ...model.ToolCall) model.Message { return model.Message{ToolCalls: cs} }
func tc(id, name, args string) model.ToolCall {
	return model.ToolCall{ID: id, Name: name, Arguments: args}
}
func answer(s string) model.Message { return model.Message{Content: s} }

type env struct {
	t     *testing.T
	store *mem.Store
	rt    *agent.Runtime
	reg   *tool.Registry
	ws    *tool.Workspace
	log   *callLog
}

type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) add(s string) { l.mu.Lock(); l.calls = append(l.calls, s); l.mu.Unlock() }
func (l *callLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.calls...)
}

type echoArgs struct {
	Text string `json:"text"`
}

type pathArgs struct {
	Path    string `json:"path"`
	Content string `json:"content,omitempty"`
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ws, err := tool.NewWorkspace(t.TempDir(), "/workspace", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	e := &env{t: t, store: mem.New(), reg: tool.NewRegistry(), ws: ws, log: &callLog{}}
	n := 0
	e.rt = agent.NewRuntime(e.store, &agent.RuntimeOptions{
		Clock: func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) },
		NewID: func() string { n++; return fmt.Sprintf("run%d", n) },
	})
	tool.Add(e.reg, &tool.Tool{Name: "echo", Description: "echo text", Effect: tool.ReadOnly, Scope: func(json.RawMessage) []string { return nil }},
		func(ctx context.Context, req *tool.Request, in echoArgs) (*tool.Result, error) {
			e.log.add("echo " + in.Text)
			return tool.Text(in.Text), nil
		})
	tool.Add(e.reg, &tool.Tool{Name: "write", Description: "write a file", Effect: tool.WorkspaceWrite,
		Scope: func(a json.RawMessage) []string {
			var p pathArgs
			json.Unmarshal(a, &p)
			return []string{p.Path}
		}},
		func(ctx context.Context, req *tool.Request, in pathArgs) (*tool.Result, error) {
			e.log.add("write " + in.Path + "=" + in.Content)
			rel, err := req.Env.Workspace.ResolveWrite(in.Path)
			if err != nil {
				return tool.Errorf("%v", err), nil
			}
			f, err := req.Env.Workspace.FS().OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
			if err != nil {
				return tool.Errorf("%v", err), nil
			}
			defer f.Close()
			f.WriteString(in.Content)
			return tool.Text("ok"), nil
		})
	return e
}

func (e *env) create(c *agent.RunCreated) string {
	e.t.Helper()
	if c.Task == "" {
		c.Task = "do the thing"
	}
	for _, s := range e.reg.Specs() {
		t := e.reg.Tool(s.Name)
		c.Tools = append(c.Tools, agent.ToolInfo{ToolSpec: s, Effect: t.Effect.String(), Idempotent: t.Idempotent})
	}
	id, err := e.rt.Create(context.Background(), c)
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

func (e *env) params(m model.Model) *agent.ExecParams {
	return &agent.ExecParams{Wiring: agent.Wiring{Model: m, Tools: e.reg, Env: &tool.Env{Workspace: e.ws}}}
}

func (e *env) events(id string) []journal.Event {
	e.t.Helper()
	evs, err := e.store.Read(context.Background(), id, 1)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := journal.Verify(id, evs); err != nil {
		e.t.Fatal(err)
	}
	return evs
}

func types(evs []journal.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, string(e.Type))
	}
	return out
}

// checkPairs asserts that every tool call in every request is answered by
// exactly one tool message, right after its assistant message.
func checkPairs(t *testing.T, reqs []*model.Request) {
	t.Helper()
	for ri, r := range reqs {
		for i, m := range r.Messages {
			if m.Role != model.RoleAssistant || len(m.ToolCalls) == 0 {
				continue
			}
			want := map[string]bool{}
			for _, c := range m.ToolCalls {
				want[c.ID] = true
				var v map[string]any
				if json.Unmarshal([]byte(c.Arguments), &v) != nil {
					t.Errorf("request %d: call %s resends unparseable arguments %q", ri, c.ID, c.Arguments)
				}
			}
			for j := i + 1; j < len(r.Messages) && r.Messages[j].Role == model.RoleTool; j++ {
				if !want[r.Messages[j].ToolCallID] {
					t.Errorf("request %d: tool message for unexpected id %s", ri, r.Messages[j].ToolCallID)
				}
				delete(want, r.Messages[j].ToolCallID)
			}
			if len(want) > 0 {
				t.Errorf("request %d: calls without results: %v", ri, want)
			}
		}
	}
}

func TestRunCompletesWithAnswer(t *testing.T) {
	e := newEnv(t)
	m := &script{turns: []model.Message{
		calls(tc("c1", "echo", `{"text":"hi"}`)),
		answer("done"),
	}, usage: model.Usage{InputTokens: 10, OutputTokens: 5}}
	id := e.create(&agent.RunCreated{})
	out, err := e.rt.Execute(context.Background(), id, e.params(m))
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusCompleted || out.End.Output != "done" || out.End.Reason != "answer" {
		t.Fatalf("outcome = %v %+v", out.Status, out.End)
	}
	want := []string{"run.created", "model.responded", "gate.decided", "tool.started", "tool.finished", "model.responded", "run.completed"}
	if diff := cmp.Diff(want, types(e.events(id))); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if out.State.Usage.Total() != 30 {
		t.Errorf("usage = %d, want 30", out.State.Usage.Total())
	}
	checkPairs(t, m.reqs)
	if got := m.reqs[1].Messages[2].Content; got != "hi" {
		t.Errorf("tool result seen by model = %q", got)
	}
}

// Bug case 9 (TOOLCALL/malformed-args) at the loop level.
func TestMalformedArgumentsBecomeErrorResults(t *testing.T) {
	e := newEnv(t)
	m := &script{turns: []model.Message{
		calls(
			tc("c1", "write", `{"path":"a.txt","content":"x`),
			tc("c2", "write", `{"path":"a.txt",}`),
			tc("c3", "echo", `["a.txt"]`),
			tc("c4", "echo", `{"text":"ok"}`),
			tc("c5", "nosuch", `{}`),
		),
		answer("done"),
	}}
	id := e.create(&agent.RunCreated{})
	out, err := e.rt.Execute(context.Background(), id, e.params(m))
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusCompleted {
		t.Fatalf("status = %v (%+v)", out.Status, out.End)
	}
	if diff := cmp.Diff([]string{"echo ok"}, e.log.get()); diff != "" {
		t.Errorf("executed calls (-want +got):\n%s", diff)
	}
	results := map[string]*agent.ToolFinished{}
	for _, ev := range e.events(id) {
		if v, _ := agent.Decode(&ev); v != nil {
			if f, ok := v.(*agent.ToolFinished); ok {
				results[f.CallID] = f
			}
		}
	}
	for _, id := range []string{"c1", "c2", "c3", "c5"} {
		r := results[id]
		if r == nil || !r.IsError {
			t.Errorf("call %s: result %+v, want an error result", id, r)
		}
	}
	if !strings.Contains(results["c1"].Content, "not a valid JSON object") || !strings.Contains(results["c3"].Content, "must be a JSON object") {
		t.Errorf("c1/c3 messages: %q / %q", results["c1"].Content, results["c3"].Content)
	}
	if !strings.Contains(results["c5"].Content, "echo, write") {
		t.Errorf("unknown tool result should list the tools: %q", results["c5"].Content)
	}
	if results["c4"].IsError || results["c4"].Content != "ok" {
		t.Errorf("c4 = %+v", results["c4"])
	}
	checkPairs(t, m.reqs)
}

func TestInvalidCallStreakStopsRun(t *testing.T) {
	e := newEnv(t)
	var turns []model.Message
	for i := 0; i < 10; i++ {
		turns = append(turns, calls(tc(fmt.Sprint("c", i), "echo", `{bad`)))
	}
	m := &script{turns: turns}
	id := e.create(&agent.RunCreated{MaxInvalidCalls: 3})
	out, err := e.rt.Execute(context.Background(), id, e.params(m))
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusFailed || out.End.Reason != "invalid_calls" || out.State.Steps != 3 {
		t.Fatalf("outcome = %v %+v after %d steps", out.Status, out.End, out.State.Steps)
	}
}

func TestLimits(t *testing.T) {
	loop := func() []model.Message {
		var turns []model.Message
		for i := 0; i < 20; i++ {
			turns = append(turns, calls(tc(fmt.Sprint("c", i), "echo", `{"text":"x"}`)))
		}
		return turns
	}
	for _, tt := range []struct {
		name   string
		limits agent.Limits
		reason string
		steps  int
	}{
		{"steps", agent.Limits{MaxSteps: 4}, "max_steps", 4},
		// 100 tokens a call: the third request (90 tokens in, as the
		// provider counted the last one) does not fit in the 50 left,
		// so it is not sent.
		{"tokens", agent.Limits{MaxTokens: 250}, "max_tokens", 2},
		{"cost", agent.Limits{MaxCost: 0.5}, "max_cost", 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			m := &script{turns: loop(), usage: model.Usage{InputTokens: 90, OutputTokens: 10}}
			id := e.create(&agent.RunCreated{Limits: tt.limits})
			p := e.params(m)
			p.Price = func(model.Usage) float64 { return 0.1 }
			out, err := e.rt.Execute(context.Background(), id, p)
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != journal.StatusFailed || out.End.Reason != tt.reason || out.State.Steps != tt.steps {
				t.Errorf("got %v %s after %d steps, want failed %s after %d", out.Status, out.End.Reason, out.State.Steps, tt.reason, tt.steps)
			}
		})
	}
}

// A queued run (only run.created) started with limits of its own (keel
// runs resume --max-steps N on a fired, never-started run) obeys them and
// journals them in run.resumed, as a resume of a started run does; they
// were dropped.
func TestFirstExecutionWithLimits(t *testing.T) {
	e := newEnv(t)
	var turns []model.Message
	for i := 0; i < 20; i++ {
		turns = append(turns, calls(tc(fmt.Sprint("c", i), "echo", `{"text":"x"}`)))
	}
	id := e.create(&agent.RunCreated{Limits: agent.Limits{MaxSteps: 500}})
	p := e.params(&script{turns: turns})
	p.Limits = &agent.Limits{MaxSteps: 3}
	out, err := e.rt.Execute(context.Background(), id, p)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusFailed || out.End.Reason != "max_steps" || out.State.Steps != 3 {
		t.Errorf("got %v %s after %d steps, want failed max_steps after 3", out.Status, out.End.Reason, out.State.Steps)
	}
	evs, err := e.store.Read(context.Background(), id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) < 2 || evs[1].Type != journal.RunResumed || !strings.Contains(string(evs[1].Payload), `"max_steps":3`) {
		t.Errorf("second event %s %s, want run.resumed with the limits", evs[1].Type, evs[1].Payload)
	}
}

// What the sandbox reports from its own goroutines may arrive after the
// run's last step (the end of a connection under load): appended after
// run.completed, it keeps the run readable and completed; the fold said
// the journal was corrupt.
func TestSandboxEventsAfterCompletion(t *testing.T) {
	e := newEnv(t)
	id := e.create(&agent.RunCreated{})
	out, err := e.rt.Execute(context.Background(), id, e.params(&script{turns: []model.Message{answer("done")}}))
	if err != nil || out.Status != journal.StatusCompleted {
		t.Fatalf("Execute = %+v %v", out, err)
	}
	for _, d := range []journal.Draft{
		{Type: journal.SandboxEgress, Time: time.Now(), Payload: []byte(`{"phase":"end","host":"example.com","port":80,"allowed":true,"bytes_out":5}`)},
		{Type: journal.SandboxQuarantine, Time: time.Now(), Payload: []byte(`{"path":".git/hooks/pre-commit","action":"moved","reason":"planted"}`)},
	} {
		st, _, err := e.rt.Load(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.Append(context.Background(), id, st.LastSeq, d); err != nil {
			t.Fatal(err)
		}
	}
	st, _, err := e.rt.Load(context.Background(), id)
	if err != nil || st.Status != journal.StatusCompleted {
		t.Errorf("Load after late sandbox events = %v %v, want completed", st.Status, err)
	}
}

func TestCompletionMarker(t *testing.T) {
	e := newEnv(t)
	code := 0
	tool.Add(e.reg, &tool.Tool{Name: "sh", Description: "fake shell", Effect: tool.External},
		func(ctx context.Context, req *tool.Request, in echoArgs) (*tool.Result, error) {
			return &tool.Result{Content: "exit code: 0\n" + in.Text, ExitCode: &code}, nil
		})
	m := &script{turns: []model.Message{
		calls(tc("c1", "sh", `{"text":"not yet\n"}`)),
		calls(tc("c2", "sh", `{"text":"DONE_MARK\ndiff --git a b\n+x\n"}`)),
		answer("never reached"),
	}}
	id := e.create(&agent.RunCreated{CompletionMarker: "DONE_MARK"})
	out, err := e.rt.Execute(context.Background(), id, e.params(m))
	if err != nil {
		t.Fatal(err)
	}
	if out.End.Reason != "marker" || out.End.Output != "diff --git a b\n+x\n" {
		t.Fatalf("end = %+v", out.End)
	}
}

// Mutations of one path run in the model's order even when the turn runs
// concurrently; calls on other paths do not wait for them.
func TestConcurrentCallsSerialiseSamePath(t *testing.T) {
	e := newEnv(t)
	var turn []model.ToolCall
	for i := 0; i < 8; i++ {
		turn = append(turn, tc(fmt.Sprint("w", i), "write", fmt.Sprintf(`{"path":"same.txt","content":"%d"}`, i)))
		turn = append(turn, tc(fmt.Sprint("o", i), "write", fmt.Sprintf(`{"path":"other%d.txt","content":"x"}`, i)))
	}
	m := &script{turns: []model.Message{calls(turn...), answer("ok")}}
	id := e.create(&agent.RunCreated{})
	p := e.params(m)
	p.Concurrency = 8
	if _, err := e.rt.Execute(context.Background(), id, p); err != nil {
		t.Fatal(err)
	}
	b, err := e.ws.FS().ReadFile("same.txt")
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "01234567" {
		t.Errorf("same.txt = %q, want the writes in call order", b)
	}
}

// Two read-only calls of one turn run at the same time: each waits for the
// other to start, which deadlocks (and fails on the context deadline) if
// the executor ran them one after the other.
func TestReadOnlyCallsRunConcurrently(t *testing.T) {
	e := newEnv(t)
	var wg sync.WaitGroup
	wg.Add(2)
	tool.Add(e.reg, &tool.Tool{Name: "meet", Description: "rendezvous", Effect: tool.ReadOnly, Scope: func(json.RawMessage) []string { return nil }},
		func(ctx context.Context, req *tool.Request, in echoArgs) (*tool.Result, error) {
			wg.Done()
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
				return tool.Text("met"), nil
			case <-ctx.Done():
				return tool.Errorf("never met"), nil
			}
		})
	m := &script{turns: []model.Message{calls(tc("a", "meet", `{"text":""}`), tc("b", "meet", `{"text":""}`)), answer("ok")}}
	id := e.create(&agent.RunCreated{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := e.rt.Execute(ctx, id, e.params(m))
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusCompleted {
		t.Fatalf("status %v: calls did not run concurrently", out.Status)
	}
}

// Bug case 10 (LOOP/orphan-tool-call): a user interrupt during a turn of
// two parallel calls gives every unfinished call a synthetic result; the
// next request, after "continue", pairs every call with a result.
func TestCancelGivesEveryCallAResult(t *testing.T) {
	e := newEnv(t)
	started := make(chan struct{})
	tool.Add(e.reg, &tool.Tool{Name: "sleep", Description: "block until canceled", Effect: tool.External},
		func(ctx context.Context, req *tool.Request, in echoArgs) (*tool.Result, error) {
			close(started)
			<-ctx.Done()
			return tool.Errorf("killed"), nil
		})
	m := &script{turns: []model.Message{
		calls(tc("s", "sleep", `{"text":""}`), tc("l", "echo", `{"text":"ls"}`)),
		answer("resumed fine"),
	}}
	id := e.create(&agent.RunCreated{})
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() { <-started; cancel(agent.ErrUserCanceled) }()
	out, err := e.rt.Execute(ctx, id, e.params(m))
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusCanceled {
		t.Fatalf("status = %v", out.Status)
	}
	for _, c := range out.State.LastTurn().Calls {
		if c.Finished == nil {
			t.Errorf("call %s has no result after cancel", c.ID)
		}
	}
	p := e.params(m)
	p.Message = "continue"
	out, err = e.rt.Execute(context.Background(), id, p)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusCompleted || out.End.Output != "resumed fine" {
		t.Fatalf("after resume: %v %+v", out.Status, out.End)
	}
	checkPairs(t, m.reqs)
	last := m.reqs[len(m.reqs)-1].Messages
	if got := last[len(last)-1]; got.Role != model.RoleUser || got.Content != "continue" {
		t.Errorf("last message = %+v, want the user's continue", got)
	}
}

// A crash between tool.started and tool.finished: on resume a read-only
// call runs again, a non-idempotent one is reported as unknown and never
// re-run.
func TestResumeRepairsInterruptedCalls(t *testing.T) {
	e := newEnv(t)
	m := &script{turns: []model.Message{
		calls(tc("r", "echo", `{"text":"again"}`), tc("w", "write", `{"path":"f.txt","content":"once"}`)),
		answer("ok"),
	}}
	id := e.create(&agent.RunCreated{})
	// Write the journal of a runtime that died mid-turn.
	ctx := context.Background()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	resp, _ := m.Generate(ctx, &model.Request{})
	m.reqs = nil
	drafts := []journal.Draft{
		{Type: journal.ModelResponded, Time: at, Payload: mustJSON(&agent.ModelResponded{Message: resp.Message})},
		{Type: journal.GateDecided, Time: at, Payload: mustJSON(&agent.GateDecided{CallID: "r", Tool: "echo", Decision: policy.Decision{Effect: policy.Allow}})},
		{Type: journal.GateDecided, Time: at, Payload: mustJSON(&agent.GateDecided{CallID: "w", Tool: "write", Decision: policy.Decision{Effect: policy.Allow}, Paths: []string{"f.txt"}})},
		{Type: journal.ToolStarted, Time: at, Payload: mustJSON(&agent.ToolStarted{CallID: "r", Tool: "echo", Arguments: json.RawMessage(`{"text":"again"}`)})},
		{Type: journal.ToolStarted, Time: at, Payload: mustJSON(&agent.ToolStarted{CallID: "w", Tool: "write", Arguments: json.RawMessage(`{"path":"f.txt","content":"once"}`)})},
	}
	if _, err := e.store.Append(ctx, id, 1, drafts...); err != nil {
		t.Fatal(err)
	}
	out, err := e.rt.Execute(ctx, id, e.params(m))
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusCompleted {
		t.Fatalf("status %v %+v", out.Status, out.End)
	}
	if diff := cmp.Diff([]string{"echo again"}, e.log.get()); diff != "" {
		t.Errorf("re-executed (-want +got):\n%s", diff)
	}
	var w *agent.Call
	for _, c := range out.State.Turns[0].Calls {
		if c.ID == "w" {
			w = c
		}
	}
	if !w.Finished.Synthetic || !strings.Contains(w.Finished.Content, "outcome is unknown") {
		t.Errorf("interrupted write result = %+v", w.Finished)
	}
	checkPairs(t, m.reqs)
}

func TestExecuteCompletedRunRefused(t *testing.T) {
	e := newEnv(t)
	m := &script{turns: []model.Message{answer("done")}}
	id := e.create(&agent.RunCreated{})
	if _, err := e.rt.Execute(context.Background(), id, e.params(m)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rt.Execute(context.Background(), id, e.params(m)); !errors.Is(err, agent.ErrRunCompleted) {
		t.Fatalf("second Execute err = %v, want ErrRunCompleted", err)
	}
}

func TestModelErrorFailsRun(t *testing.T) {
	e := newEnv(t)
	m := &script{}
	id := e.create(&agent.RunCreated{})
	out, err := e.rt.Execute(context.Background(), id, e.params(m))
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusFailed || out.End.Reason != "model_error" {
		t.Fatalf("outcome %v %+v", out.Status, out.End)
	}
}

func TestProtectedPathDenied(t *testing.T) {
	e := newEnv(t)
	m := &script{turns: []model.Message{calls(tc("c", "write", `{"path":".git/hooks/pre-commit","content":"evil"}`)), answer("ok")}}
	id := e.create(&agent.RunCreated{})
	out, err := e.rt.Execute(context.Background(), id, e.params(m))
	if err != nil {
		t.Fatal(err)
	}
	f := out.State.Turns[0].Calls[0].Finished
	if !f.IsError || !strings.Contains(f.Content, "protected") || len(e.log.get()) != 0 {
		t.Errorf("result %+v, executed %v", f, e.log.get())
	}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// A second executor of a run that is executing is refused before it
// touches the journal.
func TestSecondExecutorRefused(t *testing.T) {
	e := newEnv(t)
	started := make(chan struct{})
	release := make(chan struct{})
	tool.Add(e.reg, &tool.Tool{Name: "hold", Description: "block", Effect: tool.External},
		func(ctx context.Context, req *tool.Request, in echoArgs) (*tool.Result, error) {
			close(started)
			<-release
			return tool.Text("held"), nil
		})
	m := &script{turns: []model.Message{calls(tc("h", "hold", `{"text":""}`)), answer("done")}}
	id := e.create(&agent.RunCreated{})
	done := make(chan error, 1)
	go func() {
		_, err := e.rt.Execute(context.Background(), id, e.params(m))
		done <- err
	}()
	<-started
	before := len(e.events(id))
	if _, err := e.rt.Execute(context.Background(), id, e.params(m)); !errors.Is(err, agent.ErrRunBusy) {
		t.Errorf("second Execute = %v, want ErrRunBusy", err)
	}
	if after := len(e.events(id)); after != before {
		t.Errorf("the refused executor appended %d events", after-before)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Tool-call ids that could name another call in a URL or a path are
// replaced by safe ones, consistently in the journal and later requests.
func TestUnsafeCallIDsReplaced(t *testing.T) {
	e := newEnv(t)
	m := &script{turns: []model.Message{
		calls(tc("A", "echo", `{"text":"a"}`), tc("B/../A", "echo", `{"text":"b"}`), tc("q?x=1#f", "echo", `{"text":"c"}`), tc("A", "echo", `{"text":"d"}`)),
		answer("done"),
	}}
	id := e.create(&agent.RunCreated{})
	out, err := e.rt.Execute(context.Background(), id, e.params(m))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range out.State.Turns[0].Calls {
		ids = append(ids, c.ID)
	}
	want := []string{"A", "call_keel_1_1", "call_keel_1_2", "call_keel_1_3"}
	if diff := cmp.Diff(want, ids); diff != "" {
		t.Errorf("ids (-want +got):\n%s", diff)
	}
	checkPairs(t, m.reqs)
}

// blocking is a model whose first call blocks until its context ends
// (a person interrupts it); later calls go to next.
type blocking struct {
	next    model.Model
	started chan struct{}
	once    sync.Once
}

func (b *blocking) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	first := false
	b.once.Do(func() { first = true })
	if first {
		close(b.started)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return b.next.Generate(ctx, req)
}

// ErrInterrupted (Ctrl-C in keel chat) stops the turn, in a tool call or
// in the model call: open calls get results saying the user interrupted
// them, a note tells the model, the run pauses with reason interrupted,
// and the next message goes on in the same run, the model reading both.
func TestInterruptPausesAndTellsTheModel(t *testing.T) {
	for _, tt := range []struct {
		name     string
		inTool   bool
		wantSeen []string
	}{
		{"in a tool call", true, []string{"interrupted by the user while this call ran", agent.InterruptNote, "go on"}},
		{"in the model call", false, []string{agent.InterruptNote, "go on"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			started := make(chan struct{})
			tool.Add(e.reg, &tool.Tool{Name: "sleep", Description: "block until canceled", Effect: tool.External},
				func(ctx context.Context, req *tool.Request, in echoArgs) (*tool.Result, error) {
					close(started)
					<-ctx.Done()
					return tool.Errorf("killed"), nil
				})
			s := &script{turns: []model.Message{calls(tc("s", "sleep", `{"text":""}`)), answer("done")}}
			var m model.Model = s
			if !tt.inTool {
				s.turns = s.turns[1:]
				m = &blocking{next: s, started: started}
			}
			id := e.create(&agent.RunCreated{})
			ctx, cancel := context.WithCancelCause(context.Background())
			go func() { <-started; cancel(agent.ErrInterrupted) }()
			out, err := e.rt.Execute(ctx, id, e.params(m))
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != journal.StatusPaused || out.End.Reason != agent.ReasonInterrupted {
				t.Fatalf("after the interrupt: %v %+v, want paused, interrupted", out.Status, out.End)
			}
			p := e.params(m)
			p.Message = "go on"
			out, err = e.rt.Execute(context.Background(), id, p)
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != journal.StatusCompleted || out.End.Output != "done" {
				t.Fatalf("after the next message: %v %+v", out.Status, out.End)
			}
			checkPairs(t, s.reqs)
			var seen strings.Builder
			for _, msg := range s.reqs[len(s.reqs)-1].Messages {
				seen.WriteString(msg.Content + "\n")
			}
			for _, want := range tt.wantSeen {
				if !strings.Contains(seen.String(), want) {
					t.Errorf("the model's request after the interrupt lacks %q:\n%s", want, seen.String())
				}
			}
		})
	}
}
