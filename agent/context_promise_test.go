package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/tool"
)

// promisePlan is the plan of the context-promise tests, and its
// rendering as the view shows it.
const promisePlan = `{"items":[{"content":"read the code","status":"done"},{"content":"fix the bug","status":"in_progress"},{"content":"run the tests","status":"pending"}]}`

const promisePlanShown = "[x] read the code\n[>] fix the bug\n[ ] run the tests"

// boundedOutput is a command's output as tool.Output bounds it: head,
// a marker naming the artifact in the middle, tail.
func boundedOutput(artifact string, chars int) string {
	half := strings.Repeat("line of output\n", chars/30)
	return "exit code: 1\n" + half + fmt.Sprintf("[… 48,211 bytes elided; the whole output is in %s …]\n", artifact) + half + "FAILED test_a\n"
}

// foldPromiseRun folds a run whose first turn sets the plan, whose second
// runs a command with a bounded output (an artifact), then n echo
// turns of size characters each.
func foldPromiseRun(t *testing.T, window, n, size int) *agent.State {
	t.Helper()
	var evs []journal.Event
	add := func(typ journal.Type, v any) {
		b, _ := json.Marshal(v)
		evs = append(evs, journal.Event{RunID: "r", Seq: int64(len(evs) + 1), Type: typ, Payload: b})
	}
	add(journal.RunCreated, &agent.RunCreated{Task: "the task", Context: &agent.ContextConfig{Window: window, Family: "generic"}})
	add(journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Content: "plan first", ToolCalls: []model.ToolCall{tc("p1", agent.PlanTool, promisePlan)}}})
	add(journal.ToolFinished, &agent.ToolFinished{CallID: "p1", Tool: agent.PlanTool, Result: *tool.Text("ok")})
	add(journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Content: "run the tests", ToolCalls: []model.ToolCall{tc("b1", "echo", `{"text":"pytest"}`)}}})
	bounded := tool.Text(boundedOutput("artifacts/r/b1.out", 3000))
	bounded.Artifact, bounded.OutputBytes = "artifacts/r/b1.out", 52000
	add(journal.ToolFinished, &agent.ToolFinished{CallID: "b1", Tool: "echo", Result: *bounded})
	for i := range n {
		id := fmt.Sprintf("c%d", i)
		add(journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Content: strings.Repeat("thinking ", 20), ToolCalls: []model.ToolCall{tc(id, "echo", `{"text":"x"}`)}}})
		add(journal.ToolFinished, &agent.ToolFinished{CallID: id, Tool: "echo", Result: *tool.Text(strings.Repeat("output ", size/7))})
	}
	st, err := agent.Fold("r", evs)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// What docs/context.md and the tools' descriptions promise survives
// fitting a request to the window, not only compaction: the plan (the
// todo tool: "shown to you again after older turns are summarised"),
// and the file holding a bounded output's whole result (bash: "the path
// of a file holding the whole output"). Before, fitting left the plan's
// turn out with no plan in its place, and clipped an older result's
// middle, where its marker names the file.
func TestFittingKeepsPromises(t *testing.T) {
	for _, tt := range []struct {
		name            string
		window, n, size int
		wantLeftOut     bool // whole older turns left out
		wantResultClip  bool // b1's result clipped, not left out
	}{
		{name: "older results clipped", window: 4000, n: 12, size: 2100, wantResultClip: true},
		{name: "older turns left out", window: 1500, n: 12, size: 2100, wantLeftOut: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := foldPromiseRun(t, tt.window, tt.n, tt.size)
			req := agent.BuildRequest(st, 0)
			if got := req.PriorTurns > 0; got != tt.wantLeftOut {
				t.Fatalf("PriorTurns %d: the request was not fitted as the case needs: %q", req.PriorTurns, roles(req))
			}
			if req.Messages[0].Content != "the task" {
				t.Errorf("the task is not first: %q", req.Messages[0].Content)
			}
			var planCall, planText bool
			var b1 string
			for _, m := range req.Messages {
				for _, c := range m.ToolCalls {
					if c.ID == "p1" && c.Arguments == promisePlan {
						planCall = true
					}
				}
				if m.Role == model.RoleUser && strings.Contains(m.Content, promisePlanShown) {
					planText = true
				}
				if m.Role == model.RoleTool && m.ToolCallID == "b1" {
					b1 = m.Content
				}
			}
			if !planCall && !planText {
				t.Errorf("the request shows the plan neither as its call nor as text: %q", roles(req))
			}
			if tt.wantResultClip {
				if b1 == "" || len(b1) >= len(boundedOutput("artifacts/r/b1.out", 3000)) {
					t.Fatalf("b1's result is not clipped: %d characters", len(b1))
				}
				if !strings.Contains(b1, "artifacts/r/b1.out") {
					t.Errorf("b1's clipped result no longer names its artifact:\n%s", b1)
				}
			}
			checkPairs(t, []*model.Request{req})
		})
	}
}

// A compaction's summary covers everything before it: the summary
// request's transcript names the files holding bounded outputs (their
// marker is in the middle its clipping leaves out), and after a handoff
// the next summary request carries the notes the handoff brought (the
// view shows them with the handoff's summary only). The mechanical
// summary names both too.
func TestSummaryRequestKeepsPromises(t *testing.T) {
	for _, mechanical := range []bool{false, true} {
		t.Run(fmt.Sprintf("mechanical=%v", mechanical), func(t *testing.T) {
			e := newEnv(t)
			withDump(e)
			const notes = "NOTE: the bug is in parse_date"
			if err := os.WriteFile(filepath.Join(e.ws.Root(), agent.DefaultNotesFile), []byte(notes+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			var turns []model.Message
			for i := range 14 {
				turns = append(turns, calls(dumpCall(fmt.Sprintf("d%d", i), i, 14000)))
			}
			turns = append(turns, answer("done"))
			m := &turnModel{turns: turns, summary: "Summary: read files."}
			if mechanical {
				m.summaryErr = &model.Error{Kind: model.KindInvalidRequest, Message: "no summaries"}
			}
			id := e.create(&agent.RunCreated{Context: &agent.ContextConfig{Window: 20000, Family: "generic", HandoffAfter: 1}})
			out, err := e.rt.Execute(context.Background(), id, e.params(m))
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != journal.StatusCompleted {
				t.Fatalf("outcome %v %+v", out.Status, out.End)
			}
			comps := out.State.Compactions()
			handoff := -1
			for i, c := range comps {
				if c.Handoff && c.Notes != "" {
					handoff = i
					break
				}
			}
			if handoff < 0 || handoff == len(comps)-1 {
				t.Fatalf("%d compactions, handoff at %d: the case needs one after a handoff", len(comps), handoff)
			}
			// Each compaction's input: the summary request (a model
			// summary) or the summary itself (a mechanical one).
			inputs := make([]string, len(comps))
			if mechanical {
				for i, c := range comps {
					inputs[i] = c.Summary
				}
			} else {
				if len(m.summaries) != len(comps) {
					t.Fatalf("%d summary requests for %d compactions", len(m.summaries), len(comps))
				}
				for i, r := range m.summaries {
					inputs[i] = r.Messages[0].Content
				}
			}
			artifacts := 0
			for _, tr := range out.State.Turns {
				for _, c := range tr.Calls {
					if c.Finished == nil || c.Finished.Artifact == "" {
						continue
					}
					artifacts++
					shown := "[call dump] " + c.Arguments + "\n[result]\n"
					for i, in := range inputs {
						if !mechanical && strings.Contains(in, shown) && !strings.Contains(in, c.Finished.Artifact) {
							t.Errorf("summary request %d shows %s's result without its file %s", i, c.ID, c.Finished.Artifact)
						}
					}
				}
			}
			if artifacts == 0 {
				t.Fatal("no result had an artifact")
			}
			named := 0
			for i := range comps {
				if strings.Contains(inputs[i], ".out") {
					named++
				}
			}
			if named == 0 {
				t.Errorf("no summary input names an artifact")
			}
			for i := handoff + 1; i < len(comps); i++ {
				if !strings.Contains(inputs[i], notes) {
					t.Errorf("compaction %d (after the handoff %d) lost the handoff's notes:\n%s", i, handoff, inputs[i])
				}
			}
		})
	}
}
