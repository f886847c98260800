package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/tool"
)

// onSQLite makes e's runtime journal to a real SQLite file in a
// temporary directory, and returns a function reading a run's events
// back from it.
func onSQLite(t *testing.T, e *env) func(id string) []journal.Event {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "j.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	n := 0
	e.rt = agent.NewRuntime(st, &agent.RuntimeOptions{
		Clock: func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) },
		NewID: func() string { n++; return fmt.Sprintf("run%d", n) },
	})
	return func(id string) []journal.Event {
		evs, err := st.Read(context.Background(), id, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := journal.Verify(id, evs); err != nil {
			t.Fatal(err)
		}
		return evs
	}
}

// withDump adds the tool "dump": {"seed": N, "chars": C} returns C
// characters of numbered lines of digits (the output of a file read or
// a seq), distinct per seed.
func withDump(e *env) {
	tool.Add(e.reg, &tool.Tool{Name: "dump", Description: "dump lines", Effect: tool.ReadOnly, Scope: func(json.RawMessage) []string { return []string{} }},
		func(ctx context.Context, req *tool.Request, in struct {
			Seed  int `json:"seed"`
			Chars int `json:"chars"`
		}) (*tool.Result, error) {
			return tool.Text(dumpText(in.Seed, in.Chars)), nil
		})
}

func dumpText(seed, chars int) string {
	var b strings.Builder
	for i := 0; b.Len() < chars; i++ {
		fmt.Fprintf(&b, "%d.%06d 0123456789\n", seed, i)
	}
	return b.String()[:chars]
}

func dumpCall(id string, seed, chars int) model.ToolCall {
	return tc(id, "dump", fmt.Sprintf(`{"seed":%d,"chars":%d}`, seed, chars))
}

var fittedNote = regexp.MustCompile(`\[Keel: (\d+) of this result's (\d+) characters were left out of this request to fit the context window\. The whole result is in (\S+): `)

// The newest turn's results reach the model at least once, however much
// more than the window they are: the report's case is the default
// 32,768-token window and one turn that read 8 source files. Before,
// Keel compacted that turn at once ("steps 1–1") and the model got a
// summary instead of the results. Now the request is fitted: each
// result is bounded to its share of the room, naming the file with the
// whole result (the tool's artifact, or one Keel saves), and only
// turns the model has answered are compacted.
func TestNewestResultsReachTheModel(t *testing.T) {
	e := newEnv(t)
	withDump(e)
	events := onSQLite(t, e)
	first := []model.ToolCall{}
	for i := range 8 {
		first = append(first, dumpCall(fmt.Sprintf("r%d", i), i, 9000+100*i)) // each under the 10,000-character bound: no artifact
	}
	first = append(first, dumpCall("big", 8, 30000)) // bounded by the runtime, with an artifact
	second := []model.ToolCall{dumpCall("s0", 20, 9000), dumpCall("s1", 21, 9000), dumpCall("s2", 22, 9000), dumpCall("s3", 23, 9000)}
	m := &turnModel{turns: []model.Message{calls(first...), calls(second...), answer("done")}, summary: "Summary: read files."}
	const window = 32768
	id := e.create(&agent.RunCreated{Context: &agent.ContextConfig{Window: window, Family: "generic"}})
	out, err := e.rt.Execute(context.Background(), id, e.params(m))
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusCompleted {
		t.Fatalf("outcome %v %+v", out.Status, out.End)
	}
	if len(m.reqs) != 3 {
		t.Fatalf("%d model requests, want 3", len(m.reqs))
	}
	checkPairs(t, m.reqs)
	fs := e.ws.FS()
	for ri, turn := range []int{0, 1} {
		req := m.reqs[ri+1]
		if n := estimate(req, out.State); n > window {
			t.Errorf("request %d estimated at %d tokens, window %d", ri+1, n, window)
		}
		results := map[string]string{}
		for _, msg := range req.Messages {
			if msg.Role == model.RoleTool {
				results[msg.ToolCallID] = msg.Content
			}
		}
		cut := 0
		for _, c := range out.State.Turns[turn].Calls {
			got, ok := results[c.ID]
			if !ok {
				t.Errorf("request %d lacks the result of %s, which the model has not seen", ri+1, c.ID)
				continue
			}
			whole := c.Finished.Content
			if got == whole {
				continue
			}
			cut++
			mm := fittedNote.FindStringSubmatch(got)
			if mm == nil {
				t.Errorf("request %d: the cut result of %s names no file: %q", ri+1, c.ID, got[:min(len(got), 300)])
				continue
			}
			if want := fmt.Sprint(len([]rune(whole))); mm[2] != want {
				t.Errorf("result of %s: note says %s characters, the result has %s", c.ID, mm[2], want)
			}
			b, err := fs.ReadFile(mm[3])
			if err != nil {
				t.Errorf("result of %s: %v", c.ID, err)
				continue
			}
			if c.Finished.Artifact != "" {
				if mm[3] != c.Finished.Artifact {
					t.Errorf("result of %s names %s, its artifact is %s", c.ID, mm[3], c.Finished.Artifact)
				}
			} else if string(b) != whole {
				t.Errorf("file %s holds %d bytes, want the whole result (%d)", mm[3], len(b), len(whole))
			}
			// What the model sees is the head and the tail.
			head, _, _ := strings.Cut(got, "\n[Keel: ")
			if !strings.HasPrefix(whole, head) || len(head) < 200 {
				t.Errorf("result of %s: the head shown (%d chars) is not the result's", c.ID, len(head))
			}
		}
		if cut == 0 {
			t.Errorf("request %d: no result was cut, the test does not overfill the window", ri+1)
		}
	}
	// Only answered turns were compacted: none before the second model
	// call, and none that took the newest turn.
	responded := 0
	for _, ev := range events(id) {
		switch ev.Type {
		case journal.ModelResponded:
			responded++
		case journal.ContextCompacted:
			v, err := agent.Decode(&ev)
			if err != nil {
				t.Fatal(err)
			}
			c := v.(*agent.ContextCompacted)
			if c.LastStep >= responded {
				t.Errorf("compaction of steps %d–%d after %d model calls: the model had not seen step %d's results", c.FirstStep, c.LastStep, responded, c.LastStep)
			}
		}
	}
}

// A compaction whose saving is tiny is not made, nor its summary paid
// for: the report's case compacted a single short message, a paid
// summary call for 35,808 → 35,728 tokens of a 32,768-token window. The
// view over the window is fitted instead, and the run goes on.
func TestNoTinyCompaction(t *testing.T) {
	e := newEnv(t)
	withDump(e)
	events := onSQLite(t, e)
	var big []model.ToolCall
	for i := range 12 {
		big = append(big, dumpCall(fmt.Sprintf("b%d", i), i, 9000))
	}
	m := &turnModel{turns: []model.Message{
		calls(tc("e1", "echo", fmt.Sprintf(`{"text":%q}`, strings.Repeat("lorem ipsum ", 80)))),
		calls(big...),
		answer("done"),
	}, summary: "Summary."}
	const window = 16000
	id := e.create(&agent.RunCreated{Context: &agent.ContextConfig{Window: window, Family: "generic"}})
	out, err := e.rt.Execute(context.Background(), id, e.params(m))
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusCompleted {
		t.Fatalf("outcome %v %+v", out.Status, out.End)
	}
	for i, c := range out.State.Compactions() {
		if saved := c.TokensBefore - c.TokensAfter; saved < window/32 {
			t.Errorf("compaction %d (steps %d–%d) saved %d tokens (%d → %d), less than a 32nd of the window", i, c.FirstStep, c.LastStep, saved, c.TokensBefore, c.TokensAfter)
		}
	}
	if len(m.summaries) > 0 {
		t.Errorf("%d summary calls, want none", len(m.summaries))
	}
	for i, r := range m.reqs {
		if n := estimate(r, out.State); n > window {
			t.Errorf("request %d estimated at %d tokens, window %d", i, n, window)
		}
	}
	// The request after the big turn holds all its results, fitted.
	last := m.reqs[len(m.reqs)-1]
	n := 0
	for _, msg := range last.Messages {
		if msg.Role == model.RoleTool && strings.HasPrefix(msg.ToolCallID, "b") {
			n++
		}
	}
	if n != len(big) {
		t.Errorf("the last request holds %d of the %d newest results", n, len(big))
	}
	var compactions int
	for _, ev := range events(id) {
		if ev.Type == journal.ContextCompacted {
			compactions++
		}
	}
	if compactions != len(out.State.Compactions()) {
		t.Errorf("journal has %d compactions, state %d", compactions, len(out.State.Compactions()))
	}
}

// Every summary call is paid, whether or not its summary is used: a
// call that returns no text, a tool call instead of text, or an error
// after it reported usage still has its usage and cost in the
// compaction's attempts, in its total, and so in the run's totals that
// the limits check.
func TestFailedSummaryCallsAreCounted(t *testing.T) {
	paid := model.Usage{InputTokens: 5000, OutputTokens: 2000}
	for _, tt := range []struct {
		name string
		kind string
		fn   func() (*model.Response, error)
	}{
		{"empty text", "empty", func() (*model.Response, error) {
			return &model.Response{Message: model.Message{Role: model.RoleAssistant}, Usage: paid}, nil
		}},
		{"tool call instead of text", "tool_call", func() (*model.Response, error) {
			return &model.Response{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{tc("x", "echo", `{}`)}}, Usage: paid}, nil
		}},
		{"error after usage", "retryable", func() (*model.Response, error) {
			return &model.Response{Message: model.Message{Role: model.RoleAssistant, Content: "partial"}, Usage: paid}, &model.Error{Kind: model.KindRetryable, Message: "stream cut"}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			events := onSQLite(t, e)
			m := &turnModel{turns: echoTurns(24, 1200), summaryFn: tt.fn}
			id := e.create(&agent.RunCreated{Context: &agent.ContextConfig{Window: 3000, Family: "generic"}})
			p := e.params(m)
			p.Price = func(u model.Usage) float64 { return float64(u.InputTokens)*1e-6 + float64(u.OutputTokens)*1e-5 }
			out, err := e.rt.Execute(context.Background(), id, p)
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != journal.StatusCompleted {
				t.Fatalf("outcome %v %+v", out.Status, out.End)
			}
			cs := out.State.Compactions()
			if len(cs) == 0 || len(m.summaries) == 0 {
				t.Fatalf("%d compactions, %d summary calls", len(cs), len(m.summaries))
			}
			perCall := p.Price(paid)
			var want model.Usage
			var wantCost float64
			for _, ev := range events(id) {
				v, err := agent.Decode(&ev)
				if err != nil {
					t.Fatal(err)
				}
				switch x := v.(type) {
				case *agent.ModelResponded:
					want, wantCost = want.Add(x.Usage), wantCost+x.Cost
				case *agent.ContextCompacted:
					if len(x.Attempts) == 0 || !x.Mechanical {
						t.Fatalf("compaction: mechanical %v, attempts %+v", x.Mechanical, x.Attempts)
					}
					var sum model.Usage
					for _, a := range x.Attempts {
						if a.Kind != tt.kind || a.Usage == nil || *a.Usage != paid || a.Cost != perCall {
							t.Errorf("attempt %+v (usage %v), want kind %s with usage %v and cost %v", a, a.Usage, tt.kind, paid, perCall)
							continue
						}
						sum = sum.Add(*a.Usage)
					}
					if diff := cmp.Diff(sum, x.Usage); diff != "" {
						t.Errorf("compaction usage is not its attempts' (-attempts +event):\n%s", diff)
					}
					want, wantCost = want.Add(x.Usage), wantCost+x.Cost
				}
			}
			calls := int64(len(m.summaries))
			if got := want.InputTokens; got < calls*paid.InputTokens {
				t.Errorf("journaled input tokens %d, want at least %d for %d summary calls", got, calls*paid.InputTokens, calls)
			}
			if diff := cmp.Diff(want, out.State.Usage); diff != "" {
				t.Errorf("run usage is not the journaled calls' (-journal +state):\n%s", diff)
			}
			if d := out.State.Cost - wantCost; d > 1e-9 || d < -1e-9 || out.State.Cost < float64(calls)*perCall {
				t.Errorf("run cost $%.4f, journaled $%.4f, %d summary calls at $%.4f", out.State.Cost, wantCost, calls, perCall)
			}
		})
	}
}

// Loop health counts a turn that repeats the same call with the same
// output as a repeat even when the output is long: its artifact's name
// holds the call id, which differs from call to call.
func TestRepeatedLongOutputNudged(t *testing.T) {
	e := newEnv(t)
	withDump(e)
	var turns []model.Message
	for i := range 4 {
		turns = append(turns, calls(dumpCall(fmt.Sprintf("d%d", i), 1, 30000)))
	}
	m := &turnModel{turns: append(turns, answer("done"))}
	id := e.create(&agent.RunCreated{})
	out, err := e.rt.Execute(context.Background(), id, e.params(m))
	if err != nil {
		t.Fatal(err)
	}
	if a := out.State.Turns[0].Calls[0].Finished.Artifact; a == "" {
		t.Fatal("the long output has no artifact: the test does not test names")
	}
	nudged := 0
	for _, ev := range e.events(id) {
		if ev.Type == journal.UserMessage && strings.Contains(string(ev.Payload), "keel.health") {
			nudged++
		}
	}
	if nudged != 1 {
		t.Errorf("%d health nudges after 4 identical turns, want 1", nudged)
	}
}

// A requested handoff takes the newest turn before the model has seen
// its results, so the model's next calls cannot be "the same call with
// the same result": loop health starts counting afresh.
func TestHandoffForgetsRepeats(t *testing.T) {
	e := newEnv(t)
	same := func(id string) model.Message { return calls(tc(id, "echo", `{"text":"same"}`)) }
	first := &turnModel{turns: []model.Message{same("a1"), same("a2")}}
	id := e.create(&agent.RunCreated{})
	if out, err := e.rt.Execute(context.Background(), id, e.params(first)); err != nil || out.End.Reason != "model_error" {
		t.Fatalf("first execution: %+v, %v", out.End, err)
	}
	m := &turnModel{turns: []model.Message{same("a1"), same("a2"), same("a3"), answer("done")}, summary: "Summary."}
	p := e.params(m)
	p.Handoff = true
	out, err := e.rt.Execute(context.Background(), id, p)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusCompleted {
		t.Fatalf("outcome %v %+v", out.Status, out.End)
	}
	for _, ev := range e.events(id) {
		if ev.Type == journal.UserMessage && strings.Contains(string(ev.Payload), "keel.health") {
			t.Errorf("nudged after a handoff for repeating calls whose results the model never saw: %s", ev.Payload)
		}
	}
	if n := out.State.RepeatStreak(); n != 1 {
		t.Errorf("repeat streak %d after the handoff, want 1", n)
	}
}

// A compaction is decided on the request sent, not on the view: the
// report's case is a turn per step whose result (a 14 KB seq) passes the
// window by itself. The view, with whole results, grew far over the
// window while the fitted request (older results clipped, the newest
// given the room left) stayed at about 5,220 tokens: a paid summary call
// on nearly every step compacted the view from 18,845 to 11,342 tokens
// and left the request as it was. Now no compaction is made that does
// not shrink the request sent by a 32nd of the window, and the numbers
// journaled are those of the requests sent.
func TestCompactionDecidedOnRequestSent(t *testing.T) {
	e := newEnv(t)
	withDump(e)
	events := onSQLite(t, e)
	var turns []model.Message
	for i := range 12 {
		turns = append(turns, calls(dumpCall(fmt.Sprintf("s%d", i), i, 14000)))
	}
	turns = append(turns, answer("done"))
	m := &turnModel{turns: turns, summary: "SUMMARY"}
	const window = 5800
	id := e.create(&agent.RunCreated{Context: &agent.ContextConfig{Window: window, Family: "generic"}})
	p := e.params(m)
	p.Env.MaxResultChars = 20000
	out, err := e.rt.Execute(context.Background(), id, p)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusCompleted {
		t.Fatalf("outcome %v %+v", out.Status, out.End)
	}
	evs := events(id)
	var pending *agent.ContextCompacted
	compactions := 0
	for i := range evs {
		v, err := agent.Decode(&evs[i])
		if err != nil {
			t.Fatal(err)
		}
		switch x := v.(type) {
		case *agent.ContextCompacted:
			compactions++
			t.Logf("compaction steps %d–%d: sent %d → %d, view %d → %d", x.FirstStep, x.LastStep, x.TokensBefore, x.TokensAfter, x.ViewTokensBefore, x.ViewTokensAfter)
			if x.TokensBefore > window || x.TokensBefore-x.TokensAfter < window/32 {
				t.Errorf("compaction of steps %d–%d: the request sent went from %d to %d tokens of %d", x.FirstStep, x.LastStep, x.TokensBefore, x.TokensAfter, window)
			}
			pending = x
		case *agent.ModelResponded:
			if x.EstimatedInputTokens > window {
				t.Errorf("a request was estimated at %d tokens, window %d", x.EstimatedInputTokens, window)
			}
			if pending != nil && int64(pending.TokensAfter) != x.EstimatedInputTokens {
				t.Errorf("compaction of steps %d–%d reported %d tokens after, the next request sent was estimated at %d", pending.FirstStep, pending.LastStep, pending.TokensAfter, x.EstimatedInputTokens)
			}
			pending = nil
		}
	}
	if calls := len(m.summaries); calls > compactions {
		t.Errorf("%d summary calls for %d compactions", calls, compactions)
	}
	if len(m.summaries) > 2 {
		t.Errorf("%d summary calls in %d steps: the fitted request did not need them", len(m.summaries), len(turns))
	}
	// Every newest result reached the model, fitted, naming its file.
	for i, r := range m.reqs[1:] {
		last := r.Messages[len(r.Messages)-1]
		if last.Role != model.RoleTool || last.ToolCallID != fmt.Sprintf("s%d", i) || !fittedNote.MatchString(last.Content) {
			t.Errorf("request %d does not end with the fitted result of s%d: %.200q", i+2, i, last.Content)
		}
	}
}
