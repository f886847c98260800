package demo_test

import (
	"strings"
	"testing"

	"github.com/keel-run/keel/internal/demo"
	"github.com/keel-run/keel/model"
)

// The scripted model claims only what happened: it goes on with its
// script only when the results of its earlier calls are what the script
// needs, and otherwise stops with an error saying what did not happen;
// after a person's deny, with an answer saying so.
func TestScriptClaimsOnlyWhatHappened(t *testing.T) {
	t.Parallel()
	tools := []model.ToolSpec{{Name: "bash"}, {Name: "edit_file"}, {Name: "read_file"}}
	listing := "README.md 120 B\ntest_textstats.py 900 B\ntextstats.py 250 B"
	source := "     6\t    return len(text.split(\" \"))"
	// conversation answers the first n turns with the given results.
	conversation := func(results map[string]model.Message) []model.Message {
		m := demo.NewModel()
		msgs := []model.Message{{Role: model.RoleUser, Content: demo.Task}}
		for {
			resp, err := m.Generate(t.Context(), &model.Request{Messages: msgs, Tools: tools})
			if err != nil || len(resp.Message.ToolCalls) == 0 {
				return msgs
			}
			msgs = append(msgs, resp.Message)
			for _, c := range resp.Message.ToolCalls {
				r, ok := results[c.ID]
				if !ok {
					return msgs
				}
				r.Role, r.ToolCallID = model.RoleTool, c.ID
				msgs = append(msgs, r)
			}
		}
	}
	good := map[string]model.Message{
		"demo_1": {Content: listing},
		"demo_2": {Content: source},
		"demo_3": {Content: "exit code: 1\nFAILED (failures=2)"},
		"demo_4": {Content: "edited textstats.py"},
		"demo_5": {Content: "exit code: 0\nOK"},
	}
	with := func(id string, r model.Message) map[string]model.Message {
		m := map[string]model.Message{}
		for k, v := range good {
			m[k] = v
		}
		m[id] = r
		return m
	}
	for _, tt := range []struct {
		name    string
		results map[string]model.Message
		wantErr string // "" : the script ends with its claim
	}{
		{"the bundled project", good, ""},
		{"another repository", with("demo_1", model.Message{Content: "go.mod 30 B\nmain.go 1 KB"}), "not the demo's bundled project"},
		{"the line is not there", with("demo_2", model.Message{Content: "     6\t    return 0"}), "does not have the line the script fixes"},
		{"the edit was denied", with("demo_4", model.Message{Content: "a person denied this call: not now", IsError: true}), ""},
		{"the edit was denied by the policy", with("demo_4", model.Message{Content: "the policy denied this call: no writes", IsError: true}), "the edit of textstats.py did not happen (the policy denied this call: no writes)"},
		{"the edit failed", with("demo_4", model.Message{Content: "old_string not found", IsError: true}), "the edit of textstats.py did not happen"},
		{"the tests still fail", with("demo_5", model.Message{Content: "exit code: 1\nFAILED (failures=1)"}), "the tests still fail after the edit (exit code: 1)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			msgs := conversation(tt.results)
			resp, err := demo.NewModel().Generate(t.Context(), &model.Request{Messages: msgs, Tools: tools})
			if tt.name == "the edit was denied" {
				// A person's no is an answer, not a model error (F7).
				if err != nil || !strings.Contains(resp.Message.Content, "You denied the edit of textstats.py (not now)") ||
					!strings.Contains(resp.Message.Content, "the tests still fail") || strings.Contains(resp.Message.Content, "all tests pass") {
					t.Fatalf("after a person's deny = %+v, %v; want an answer saying nothing changed", resp, err)
				}
				// A follow-up is answered as after the whole script
				// (trial 18, U7: it failed with a mismatch about an edit
				// that never happened).
				msgs = append(msgs, resp.Message, model.Message{Role: model.RoleUser, Content: "try again with split()"})
				resp, err = demo.NewModel().Generate(t.Context(), &model.Request{Messages: msgs, Tools: tools})
				if err != nil || !strings.Contains(resp.Message.Content, `Follow-up received: "try again with split()"`) {
					t.Fatalf("a follow-up after the deny = %+v, %v; want the follow-up answer", resp, err)
				}
				return
			}
			if tt.wantErr == "" {
				if err != nil || !strings.Contains(resp.Message.Content, "all tests pass") {
					t.Fatalf("end of the script = %v, %v; want the claim that the tests pass", resp, err)
				}
				msgs = append(msgs, resp.Message, model.Message{Role: model.RoleUser, Content: "thanks"})
				if resp, err = demo.NewModel().Generate(t.Context(), &model.Request{Messages: msgs, Tools: tools}); err != nil || !strings.Contains(resp.Message.Content, `Follow-up received: "thanks"`) {
					t.Fatalf("a follow-up = %+v, %v; want the follow-up answer", resp, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("the model went on (%q) after: %s", resp.Message.Content, tt.wantErr)
			}
			if model.KindOf(err) != model.KindMismatch || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error = %v, want a mismatch saying %q", err, tt.wantErr)
			}
		})
	}
}
