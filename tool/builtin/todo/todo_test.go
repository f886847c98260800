package todo_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/builtin/todo"
)

func TestTodo(t *testing.T) {
	r := tool.NewRegistry()
	todo.Register(r)
	for _, tt := range []struct {
		name    string
		args    string
		invalid string // substring of the validation error
		want    string
	}{
		{"plan", `{"items":[{"content":"read","status":"done"},{"content":"fix","status":"in_progress"},{"content":"test","status":"pending"}]}`, "",
			"Plan updated: 3 items (1 done, 1 in progress, 1 pending).\n[x] read\n[>] fix\n[ ] test"},
		{"two in progress", `{"items":[{"content":"a","status":"in_progress"},{"content":"b","status":"in_progress"}]}`, "",
			"Plan updated: 2 items (0 done, 2 in progress, 0 pending).\n[>] a\n[>] b\nNote: 2 items are in progress; finish one before starting the next."},
		{"cleared", `{"items":[]}`, "", "Plan cleared (no items)."},
		{"bad status", `{"items":[{"content":"a","status":"started"}]}`, "do not match its schema", ""},
		{"no items", `{}`, "do not match its schema", ""},
		{"empty content", `{"items":[{"content":"","status":"pending"}]}`, "do not match its schema", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args, res := r.Validate(model.ToolCall{Name: todo.Name, Arguments: tt.args})
			if tt.invalid != "" {
				if res == nil || !strings.Contains(res.Content, tt.invalid) {
					t.Fatalf("Validate = %v, want an error containing %q", res, tt.invalid)
				}
				return
			}
			if res != nil {
				t.Fatalf("Validate: %s", res.Content)
			}
			got, err := r.Run(context.Background(), todo.Name, &tool.Request{Arguments: args, Env: &tool.Env{}})
			if err != nil || got.IsError {
				t.Fatalf("Run = %+v, %v", got, err)
			}
			if diff := cmp.Diff(tt.want, got.Content); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			// The runtime folds the same arguments into the run's plan.
			if _, err := agent.ParsePlan(args); err != nil {
				t.Errorf("agent.ParsePlan: %v", err)
			}
		})
	}
	if todo.Name != agent.PlanTool {
		t.Errorf("tool name %q, agent folds plans of %q", todo.Name, agent.PlanTool)
	}
}
