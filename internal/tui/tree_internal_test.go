package tui

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/tool"
)

// leadModel spawns one child and answers; the child answers at once.
type leadModel struct{}

func (leadModel) Generate(_ context.Context, req *model.Request) (*model.Response, error) {
	done := len(req.Messages) > 1
	if req.Messages[0].Content != "lead" || done {
		return &model.Response{Message: model.Message{Role: model.RoleAssistant, Content: "done"}, Usage: model.Usage{InputTokens: 100, OutputTokens: 5}}, nil
	}
	args, _ := json.Marshal(map[string]any{"task": "child", "limits": map[string]any{"max_steps": 3}})
	return &model.Response{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "s1", Name: agent.SpawnTool, Arguments: string(args)}}},
		Usage: model.Usage{InputTokens: 100, OutputTokens: 5}}, nil
}

func TestShowTree(t *testing.T) {
	store := mem.New()
	rt := agent.NewRuntime(store, &agent.RuntimeOptions{NewID: func() string { return "lead" }})
	ws, err := tool.NewWorkspace(t.TempDir(), "/workspace", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	wiring := agent.Wiring{Model: leadModel{}, Tools: tool.NewRegistry(), Env: &tool.Env{Workspace: ws}}
	team := &agent.LocalTeam{Runtime: rt, Wire: func(context.Context, *agent.RunCreated) (*agent.Wiring, io.Closer, error) {
		w := wiring
		return &w, nil, nil
	}}
	id, err := rt.Create(t.Context(), &agent.RunCreated{Task: "lead", Tools: agent.TeamTools(), Limits: agent.Limits{MaxSteps: 10, MaxChildren: 2}})
	if err != nil {
		t.Fatal(err)
	}
	p := &agent.ExecParams{Wiring: wiring}
	p.Team = team
	out, err := rt.Execute(t.Context(), id, p)
	if err != nil || out.Status != journal.StatusCompleted {
		t.Fatalf("%v %v", out, err)
	}
	team.Close()
	var b bytes.Buffer
	showTree(&b, out.State, func(id string) ([]journal.Event, error) { return store.Read(t.Context(), id, 1) })
	for _, want := range []string{
		"lead  completed answer",
		"spent 2 steps, 210 tok, 1 tool calls, 1 children · with children 3 steps, 315 tok, 1 tool calls, 1 children",
		"limits 10 steps, 2 children · left 7 steps, 1 children",
		"  lead.s1  completed answer",
		"limits 3 steps · left 2 steps",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("tree lacks %q:\n%s", want, b.String())
		}
	}
}
