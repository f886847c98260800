package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/replay"
	"github.com/keel-run/keel/tool"
)

// turnModel is a fake model for compaction tests: it answers the k-th
// turn with turns[k], k counting the assistant messages of the request
// plus its PriorTurns (as the replay model does), and answers summary
// requests with summary (or fails them with summaryErr).
type turnModel struct {
	mu         sync.Mutex
	turns      []model.Message
	summary    string
	summaryErr error
	// summaryFn, when set, answers summary requests instead.
	summaryFn func() (*model.Response, error)
	reqs      []*model.Request
	summaries []*model.Request
}

func (m *turnModel) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if req.Purpose == model.PurposeSummary {
		m.summaries = append(m.summaries, req)
		if m.summaryFn != nil {
			return m.summaryFn()
		}
		if m.summaryErr != nil {
			return nil, m.summaryErr
		}
		return &model.Response{Message: model.Message{Role: model.RoleAssistant, Content: m.summary}, Usage: model.Usage{InputTokens: 100, OutputTokens: 20}}, nil
	}
	m.reqs = append(m.reqs, req)
	k := req.PriorTurns
	for _, msg := range req.Messages {
		if msg.Role == model.RoleAssistant {
			k++
		}
	}
	if k >= len(m.turns) {
		return nil, &model.Error{Kind: model.KindExhausted, Message: fmt.Sprintf("no turn %d", k)}
	}
	msg := m.turns[k]
	msg.Role = model.RoleAssistant
	return &model.Response{Message: msg}, nil
}

// echoTurns returns n turns that each echo a text of size chars, then a
// final answer.
func echoTurns(n, size int) []model.Message {
	var turns []model.Message
	for i := range n {
		text := fmt.Sprintf("%d:%s", i, strings.Repeat("lorem ipsum ", size/12))
		args, _ := json.Marshal(map[string]string{"text": text})
		turns = append(turns, model.Message{Content: fmt.Sprintf("step %d", i+1), ToolCalls: []model.ToolCall{tc(fmt.Sprintf("c%d", i), "echo", string(args))}})
	}
	return append(turns, answer("done"))
}

func estimate(req *model.Request, s *agent.State) int { return agent.EstimateRequest(req, s.Family()) }

// A run whose turns outgrow a small window compacts several times, its
// requests stay within the window, the model still gets the right turn
// (PriorTurns), and the run completes.
func TestCompactionKeepsRequestsInWindow(t *testing.T) {
	for _, tt := range []struct {
		name       string
		summaryErr error
		mechanical bool
	}{
		{"model summary", nil, false},
		{"mechanical fallback", &model.Error{Kind: model.KindInvalidRequest, Message: "cannot summarise"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			m := &turnModel{turns: echoTurns(24, 1200), summary: "Goal: echo things. Done: echoed.", summaryErr: tt.summaryErr}
			const window = 3000
			id := e.create(&agent.RunCreated{Context: &agent.ContextConfig{Window: window, Family: "generic"}})
			out, err := e.rt.Execute(context.Background(), id, e.params(m))
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != journal.StatusCompleted || out.End.Output != "done" {
				t.Fatalf("outcome %v %+v", out.Status, out.End)
			}
			cs := out.State.Compactions()
			if len(cs) < 2 {
				t.Fatalf("%d compactions, want at least 2", len(cs))
			}
			for i, c := range cs {
				if c.Mechanical != tt.mechanical {
					t.Errorf("compaction %d: mechanical = %v, want %v", i, c.Mechanical, tt.mechanical)
				}
				if c.TokensAfter >= c.TokensBefore {
					t.Errorf("compaction %d: tokens %d → %d, want fewer", i, c.TokensBefore, c.TokensAfter)
				}
				if tt.mechanical && !strings.Contains(c.Summary, "Mechanical summary") {
					t.Errorf("compaction %d summary is not labelled mechanical: %q", i, c.Summary)
				}
			}
			for i, r := range m.reqs {
				if n := estimate(r, out.State); n > window {
					t.Errorf("request %d estimated at %d tokens, window %d", i, n, window)
				}
			}
			for i, r := range m.summaries {
				if n := estimate(r, out.State); n > window {
					t.Errorf("summary request %d estimated at %d tokens, window %d", i, n, window)
				}
			}
			checkPairs(t, m.reqs)
			// The journal folds again to the same state.
			st, err := agent.Fold(id, e.events(id))
			if err != nil {
				t.Fatal(err)
			}
			if st.ViewStart() != out.State.ViewStart() || len(st.Compactions()) != len(cs) {
				t.Errorf("refold: view %d, %d compactions; want %d, %d", st.ViewStart(), len(st.Compactions()), out.State.ViewStart(), len(cs))
			}
		})
	}
}

// A run whose view is already bigger than the window when it compacts
// (one huge result, answered) still compacts with a summary request
// that fits, and completes. (While the huge result is the newest, the
// request is fitted: a compaction of the small turns before it would
// not shrink what is sent, the newest result taking the room it frees.)
func TestCompactionWhenWindowAlreadyFull(t *testing.T) {
	e := newEnv(t)
	turns := echoTurns(3, 300)
	big, _ := json.Marshal(map[string]string{"text": strings.Repeat("word ", 2500)})
	turns = append(turns[:3:3], model.Message{ToolCalls: []model.ToolCall{tc("big", "echo", string(big))}}, echoTurns(1, 20)[0], answer("finished"))
	m := &turnModel{turns: turns, summary: "Summary: four echoes."}
	const window = 2500
	id := e.create(&agent.RunCreated{Context: &agent.ContextConfig{Window: window, Family: "generic"}, Task: "echo, then echo a lot"})
	p := e.params(m)
	p.Env.MaxResultChars = 40000 // let the huge result reach the view
	out, err := e.rt.Execute(context.Background(), id, p)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusCompleted {
		t.Fatalf("outcome %v %+v", out.Status, out.End)
	}
	full := false
	for _, c := range out.State.Compactions() {
		if c.ViewTokensBefore > window && c.TokensBefore <= window && c.TokensAfter < c.TokensBefore {
			full = true
		}
	}
	if !full {
		t.Fatalf("no compaction started with the window already full: %+v", out.State.Compactions())
	}
	for i, r := range m.summaries {
		if n := estimate(r, out.State); n > window {
			t.Errorf("summary request %d estimated at %d tokens, window %d", i, n, window)
		}
	}
	for i, r := range m.reqs {
		if n := estimate(r, out.State); n > window {
			t.Errorf("request %d estimated at %d tokens, window %d", i, n, window)
		}
	}
}

// A compaction shrinks the view, whatever the summary: the report's
// case is a run whose newest turn alone overfills the window while the
// turns before it are tiny, where a summary (the model's, or Keel's
// mechanical one with its header) is larger than what it replaces. And
// no summary is paid for that cannot help.
func TestCompactionShrinksTheView(t *testing.T) {
	for _, tt := range []struct {
		name       string
		summary    string
		summaryErr error
	}{
		{"model summary", "Goal: echo. Done: echoed.", nil},
		{"model summary larger than what it replaces", strings.Repeat("0123456789 ", 2000), nil},
		{"mechanical summary", "", &model.Error{Kind: model.KindInvalidRequest, Message: "cannot summarise"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			var turns []model.Message
			for i, size := range []int{30000, 10, 10, 30000, 10} {
				args, _ := json.Marshal(map[string]string{"text": fmt.Sprintf("%d:%s", i, strings.Repeat("7", size))})
				turns = append(turns, model.Message{Content: "step", ToolCalls: []model.ToolCall{tc(fmt.Sprintf("c%d", i), "echo", string(args))}})
			}
			turns = append(turns, answer("done"))
			m := &turnModel{turns: turns, summary: tt.summary, summaryErr: tt.summaryErr}
			id := e.create(&agent.RunCreated{Context: &agent.ContextConfig{Window: 8000, Family: "generic"}})
			out, err := e.rt.Execute(context.Background(), id, e.params(m))
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != journal.StatusCompleted {
				t.Fatalf("outcome %v %+v", out.Status, out.End)
			}
			cs := out.State.Compactions()
			if len(cs) == 0 {
				t.Fatal("no compaction")
			}
			calls := 0
			for i, c := range cs {
				t.Logf("compaction %d: steps %d–%d, %d → %d tokens, mechanical %v, attempts %+v", i, c.FirstStep, c.LastStep, c.TokensBefore, c.TokensAfter, c.Mechanical, c.Attempts)
				if c.TokensAfter >= c.TokensBefore {
					t.Errorf("compaction %d grew the view: %d → %d tokens", i, c.TokensBefore, c.TokensAfter)
				}
				if !c.Mechanical {
					calls++
				}
				calls += len(c.Attempts)
			}
			if calls != len(m.summaries) {
				t.Errorf("%d summary calls, %d journaled", len(m.summaries), calls)
			}
			for i, r := range m.summaries {
				if r.MaxOutputTokens < 64 {
					t.Errorf("summary call %d asked for at most %d tokens: it could not help", i, r.MaxOutputTokens)
				}
			}
		})
	}
}

// Compaction never loops: when nothing can be compacted (the task alone
// passes the threshold), the run calls the model with a fitted request.
func TestCompactionNeverLoops(t *testing.T) {
	e := newEnv(t)
	m := &turnModel{turns: echoTurns(4, 100), summary: "s"}
	id := e.create(&agent.RunCreated{Task: strings.Repeat("a long task description ", 200), Context: &agent.ContextConfig{Window: 1200, Family: "generic"}})
	out, err := e.rt.Execute(context.Background(), id, e.params(m))
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusCompleted {
		t.Fatalf("outcome %v %+v", out.Status, out.End)
	}
	// Each compaction consumes at least one message.
	if n, msgs := len(out.State.Compactions()), len(out.State.Messages); n >= msgs {
		t.Errorf("%d compactions for %d messages", n, msgs)
	}
}

// A corrupt compaction range is reported, not folded.
func TestCompactionRangeChecked(t *testing.T) {
	e := newEnv(t)
	m := &turnModel{turns: echoTurns(2, 10)}
	id := e.create(&agent.RunCreated{})
	if _, err := e.rt.Execute(context.Background(), id, e.params(m)); err != nil {
		t.Fatal(err)
	}
	evs := e.events(id)
	evs = evs[:len(evs)-1] // drop run.completed
	bad, _ := json.Marshal(&agent.ContextCompacted{From: 3, To: 2, Summary: "x"})
	evs = append(evs, journal.Event{RunID: id, Seq: int64(len(evs) + 1), Type: journal.ContextCompacted, Payload: bad})
	var ce *journal.CorruptError
	if _, err := agent.Fold(id, evs); !errors.As(err, &ce) {
		t.Fatalf("Fold = %v, want a CorruptError", err)
	}
}

// The plan (todo calls) is folded from the journal and shown with the
// summary after a compaction.
func TestPlanSurvivesCompaction(t *testing.T) {
	e := newEnv(t)
	tool.Add(e.reg, &tool.Tool{Name: agent.PlanTool, Description: "plan", Effect: tool.ReadOnly, Scope: func(json.RawMessage) []string { return []string{} }},
		func(ctx context.Context, req *tool.Request, in struct {
			Items []agent.PlanItem `json:"items"`
		}) (*tool.Result, error) {
			return tool.Text("ok"), nil
		})
	plan := `{"items":[{"content":"read the code","status":"done"},{"content":"fix the bug","status":"in_progress"},{"content":"run the tests","status":"pending"}]}`
	turns := append([]model.Message{{ToolCalls: []model.ToolCall{tc("p1", agent.PlanTool, plan)}}}, echoTurns(12, 1000)...)
	m := &turnModel{turns: turns, summary: "Summary."}
	id := e.create(&agent.RunCreated{Context: &agent.ContextConfig{Window: 2500, Family: "generic"}})
	out, err := e.rt.Execute(context.Background(), id, e.params(m))
	if err != nil {
		t.Fatal(err)
	}
	want := []agent.PlanItem{{"read the code", "done"}, {"fix the bug", "in_progress"}, {"run the tests", "pending"}}
	if diff := cmp.Diff(want, out.State.Plan()); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
	if len(out.State.Compactions()) == 0 {
		t.Fatal("no compaction")
	}
	last := m.reqs[len(m.reqs)-1]
	if len(last.Messages) < 2 || !strings.Contains(last.Messages[1].Content, "[>] fix the bug") {
		t.Errorf("the request after compaction does not show the plan: %q", last.Messages[1].Content)
	}
	for _, r := range last.Messages {
		for _, c := range r.ToolCalls {
			if c.ID == "p1" {
				t.Errorf("the plan call is still in the view after compaction")
			}
		}
	}
}

// keel runs handoff: a resumed run continues in a fresh context from the
// summary and the workspace notes.
func TestHandoff(t *testing.T) {
	e := newEnv(t)
	turns := echoTurns(6, 50)
	// The first model knows three turns and then fails the run.
	first := &turnModel{turns: turns[:3]}
	id := e.create(&agent.RunCreated{})
	if out, err := e.rt.Execute(context.Background(), id, e.params(first)); err != nil || out.End.Reason != "model_error" {
		t.Fatalf("first execution: %+v, %v", out.End, err)
	}
	m := &turnModel{turns: turns, summary: "Summary of the work."}
	if err := os.WriteFile(filepath.Join(e.ws.Root(), agent.DefaultNotesFile), []byte("next: echo 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := e.params(m)
	p.Handoff = true
	p.Message = "go on"
	out, err := e.rt.Execute(context.Background(), id, p)
	if err != nil {
		t.Fatal(err)
	}
	cs := out.State.Compactions()
	if len(cs) != 1 || !cs[0].Handoff || cs[0].Reason != "requested" || cs[0].Notes != "next: echo 4\n" {
		t.Fatalf("compactions = %+v", cs)
	}
	// The fresh context: task, handoff summary with notes, the message.
	var got []string
	for _, msg := range m.reqs[len(m.reqs)-1].Messages[:3] {
		got = append(got, string(msg.Role)+": "+firstLineOf(msg.Content))
	}
	want := []string{"user: do the thing", "user: [Keel: handoff. You continue this task in a fresh context. Everything before this message was replaced by the summary below; it covers steps 1–3. The workspace still holds all their changes, and long outputs remain in the files their results named.]", "user: go on"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("request after handoff (-want +got):\n%s", diff)
	}
	if !strings.Contains(m.reqs[len(m.reqs)-1].Messages[1].Content, "next: echo 4") {
		t.Error("the handoff message lacks the notes")
	}
}

func firstLineOf(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

// Every tool's result is bounded by the runtime: a long result is saved
// whole as an artifact that the result names.
func TestLongResultsBecomeArtifacts(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("0123456789abcdef\n", 3000)
	tool.Add(e.reg, &tool.Tool{Name: "dump", Description: "dump", Effect: tool.ReadOnly, Scope: func(json.RawMessage) []string { return []string{} }},
		func(ctx context.Context, req *tool.Request, in struct{}) (*tool.Result, error) {
			return tool.Text(long), nil
		})
	m := &turnModel{turns: []model.Message{calls(tc("d1", "dump", `{}`)), answer("ok")}}
	id := e.create(&agent.RunCreated{})
	out, err := e.rt.Execute(context.Background(), id, e.params(m))
	if err != nil {
		t.Fatal(err)
	}
	f := out.State.Turns[0].Calls[0].Finished
	if f.Artifact == "" || len([]rune(f.Content)) > tool.DefaultMaxResultChars || !strings.Contains(f.Content, f.Artifact) {
		t.Fatalf("result: artifact %q, %d chars, names artifact: %v", f.Artifact, len([]rune(f.Content)), strings.Contains(f.Content, f.Artifact))
	}
	b, err := e.ws.FS().ReadFile(f.Artifact)
	if err != nil || string(b) != long {
		t.Errorf("artifact holds %d bytes (%v), want the whole %d", len(b), err, len(long))
	}
	if f.OutputBytes != int64(len(long)) {
		t.Errorf("OutputBytes = %d, want %d", f.OutputBytes, len(long))
	}
}

// The step function is deterministic over a folded journal: the same
// events give the same decision, compaction included.
func TestContextStepDeterministic(t *testing.T) {
	e := newEnv(t)
	m := &turnModel{turns: echoTurns(10, 1500), summary: "s"}
	id := e.create(&agent.RunCreated{Context: &agent.ContextConfig{Window: 2000, Family: "generic"}, Limits: agent.Limits{MaxSteps: 6}})
	if _, err := e.rt.Execute(context.Background(), id, e.params(m)); err != nil {
		t.Fatal(err)
	}
	evs := e.events(id)
	for i := 1; i < len(evs); i++ {
		a, err := agent.Fold(id, evs[:i])
		if err != nil {
			t.Fatal(err)
		}
		b, _ := agent.Fold(id, evs[:i])
		// The folded estimate is the estimate of the request itself.
		if n := a.NextRequestTokens(); n <= 1800 {
			if m := estimate(agent.BuildRequest(a, 0), a); m != n {
				t.Errorf("after %d events: NextRequestTokens %d, estimate of BuildRequest %d", i, n, m)
			}
		}
		x, y := agent.Step(a), agent.Step(b)
		if diff := cmp.Diff(x, y); diff != "" {
			t.Fatalf("Step after %d events differs:\n%s", i, diff)
		}
		if x.Kind == agent.ActCompact && evs[i].Type != journal.ContextCompacted {
			t.Errorf("Step after %d events = compact, journal has %s", i, evs[i].Type)
		}
	}
}

// miniBash is mini-swe-agent's bash tool as the recorded run offered it.
var miniBash = model.ToolSpec{Name: "bash", Description: "Execute a bash command",
	Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string","description":"The bash command to execute"}},"required":["command"]}`)}

// Keel's estimate of the recorded requests of the DeepSeek trajectory is
// close to the provider's own prompt_tokens (docs/context.md, "Estimator
// accuracy"): the k-th request is rebuilt from the recording (system
// prompt, task, the k turns before it and their recorded observations).
func TestEstimateMatchesRecordedUsage(t *testing.T) {
	tr, err := replay.Load("../testdata/trajectories/deepseek_chat_dev.traj.json")
	if err != nil {
		t.Fatal(err)
	}
	fam := agent.LookupFamily(tr.Model())
	if fam.Name != "deepseek" {
		t.Fatalf("family of %q = %s", tr.Model(), fam.Name)
	}
	req := &model.Request{System: tr.System(), Tools: []model.ToolSpec{miniBash}, Messages: []model.Message{{Role: model.RoleUser, Content: tr.Task()}}}
	var worst, sum float64
	for _, turn := range tr.Turns() {
		est := agent.EstimateRequest(req, fam)
		d := float64(est-int(turn.Usage.InputTokens)) / float64(turn.Usage.InputTokens)
		worst, sum = max(worst, d, -d), sum+max(d, -d)
		req.Messages = append(req.Messages, turn.Message)
		for _, c := range turn.Message.ToolCalls {
			if r, ok := tr.ToolResult(c.ID); ok {
				req.Messages = append(req.Messages, model.Message{Role: model.RoleTool, ToolCallID: c.ID, Content: r.Content})
			}
		}
	}
	t.Logf("estimate vs recorded prompt_tokens over %d requests: mean error %.1f%%, worst %.1f%%", tr.Len(), 100*sum/float64(tr.Len()), 100*worst)
	if worst > 0.07 {
		t.Errorf("worst estimate error %.1f%%, want at most 7%%", 100*worst)
	}
}

// A call whose arguments break the tool's schema gets an error that
// echoes the value it rejects; that error, in gate.decided and in the
// result the model sees, is bounded like every result.
func TestValidationErrorsBounded(t *testing.T) {
	e := newEnv(t)
	e.reg.Add(&tool.Tool{Name: "pick", Description: "pick one", Effect: tool.ReadOnly, Scope: func(json.RawMessage) []string { return nil },
		InputSchema: json.RawMessage(`{"type":"object","properties":{"status":{"enum":["pending","done"]}}}`)},
		func(ctx context.Context, req *tool.Request) (*tool.Result, error) { return tool.Text("ok"), nil })
	huge := strings.Repeat("x", 200_000)
	args, _ := json.Marshal(map[string]any{"status": huge})
	m := &turnModel{turns: []model.Message{calls(tc("p1", "pick", string(args))), answer("done")}}
	id := e.create(&agent.RunCreated{})
	out, err := e.rt.Execute(context.Background(), id, e.params(m))
	if err != nil {
		t.Fatal(err)
	}
	f := out.State.Turns[0].Calls[0].Finished
	if !f.IsError || len([]rune(f.Content)) > tool.DefaultMaxResultChars {
		t.Errorf("the result of an invalid call: error %v, %d characters (bound %d)", f.IsError, len([]rune(f.Content)), tool.DefaultMaxResultChars)
	}
	for _, ev := range e.events(id) {
		if (ev.Type == journal.GateDecided || ev.Type == journal.ToolFinished) && len(ev.Payload) > 3*tool.DefaultMaxResultChars {
			t.Errorf("%s is %d bytes", ev.Type, len(ev.Payload))
		}
	}
}

// A handoff of a run whose turns are shorter than any summary of them
// carries the turns as they were: the report's case was a tiny run that
// a handoff grew from 3,810 to 3,931 tokens with a mechanical summary
// larger than the one turn it replaced. What the handoff adds is only
// its header (no notes, no plan here).
func TestHandoffOfShortTurnsCarriesThem(t *testing.T) {
	e := newEnv(t)
	events := onSQLite(t, e)
	turns := []model.Message{{Content: "I echo once.", ToolCalls: []model.ToolCall{tc("c0", "echo", `{"text":"hello"}`)}}, answer("done")}
	first := &turnModel{turns: turns[:1]}
	id := e.create(&agent.RunCreated{Context: &agent.ContextConfig{Window: 32768, Family: "generic"}})
	if out, err := e.rt.Execute(context.Background(), id, e.params(first)); err != nil || out.End.Reason != "model_error" {
		t.Fatalf("first execution: %+v, %v", out.End, err)
	}
	m := &turnModel{turns: turns, summaryErr: &model.Error{Kind: model.KindInvalidRequest, Message: "cannot summarise"}}
	p := e.params(m)
	p.Handoff = true
	out, err := e.rt.Execute(context.Background(), id, p)
	if err != nil {
		t.Fatal(err)
	}
	cs := out.State.Compactions()
	if len(cs) != 1 || !cs[0].Handoff {
		t.Fatalf("compactions = %+v", cs)
	}
	c := cs[0]
	t.Logf("handoff: %d → %d tokens, carried %v, %d summary calls", c.TokensBefore, c.TokensAfter, c.Carried, len(m.summaries))
	header := agent.EstimateText("[Keel: handoff. You continue this task in a fresh context. Everything before this message is below, as text (it was shorter than a summary); it covers steps 1–1. The workspace still holds all their changes, and long outputs remain in the files their results named.]")
	// The header is a message of its own (4 pieces), and the carried
	// turn's labels ("[step 1: assistant]", "[call echo]", "[result]")
	// cost about what its messages' framing did.
	if most := header + 4 + 8; !c.Carried || c.TokensAfter-c.TokensBefore > most {
		t.Errorf("handoff of one short turn: %d → %d tokens (carried %v), it may add at most %d tokens, its header's", c.TokensBefore, c.TokensAfter, c.Carried, most)
	}
	sum := m.reqs[len(m.reqs)-1].Messages[1].Content
	if !strings.Contains(sum, "I echo once.") || !strings.Contains(sum, `{"text":"hello"}`) || !strings.Contains(sum, "[result]\nhello") {
		t.Errorf("the fresh context does not carry the turn:\n%s", sum)
	}
	var sent int64
	evs := events(id)
	for i := range evs {
		ev := &evs[i]
		if ev.Type == journal.ModelResponded {
			v, _ := agent.Decode(ev)
			sent = v.(*agent.ModelResponded).EstimatedInputTokens
		}
	}
	if sent != int64(c.TokensAfter) {
		t.Errorf("the handoff reported %d tokens after, the request sent was estimated at %d", c.TokensAfter, sent)
	}
}
