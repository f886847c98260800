package modeltest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/modeltest"
)

func TestScriptedPlaysTurnsInOrder(t *testing.T) {
	t.Parallel()
	boom := &model.Error{Kind: model.KindRateLimited, Provider: "scripted", Message: "slow down"}
	s := modeltest.NewScripted([]modeltest.Turn{
		modeltest.Calls("looking", modeltest.Call("c1", "bash", map[string]string{"command": "ls"})),
		modeltest.Fail(boom),
		modeltest.Text("done"),
	}, nil)
	req := &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}

	got, err := s.Generate(t.Context(), req)
	if err != nil {
		t.Fatalf("Generate #1 error = %v", err)
	}
	want := &model.Response{
		Message:    model.Message{Role: model.RoleAssistant, Content: "looking", ToolCalls: []model.ToolCall{{ID: "c1", Name: "bash", Arguments: `{"command":"ls"}`}}},
		StopReason: "tool_calls",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Generate #1 (-want +got):\n%s", diff)
	}
	// The returned message is a copy: changing it does not change the script.
	got.Message.ToolCalls[0].Name = "changed"

	if _, err := s.Generate(t.Context(), req); !errors.Is(err, boom) {
		t.Errorf("Generate #2 error = %v, want %v", err, boom)
	}
	got, err = s.Generate(t.Context(), req)
	if err != nil || got.Message.Content != "done" {
		t.Errorf("Generate #3 = %+v, %v; want text done", got, err)
	}
	_, err = s.Generate(t.Context(), req)
	if model.KindOf(err) != model.KindExhausted {
		t.Errorf("Generate #4 error = %v, want kind exhausted", err)
	}
	if want := "model scripted: exhausted: script has 3 turns; request asks for turn 4"; err == nil || err.Error() != want {
		t.Errorf("Generate #4 error text = %v, want %q", err, want)
	}
	if n := len(s.Requests()); n != 4 {
		t.Errorf("len(Requests()) = %d, want 4", n)
	}
	if s.Remaining() != 0 {
		t.Errorf("Remaining() = %d, want 0", s.Remaining())
	}
}

func TestScriptedRecordsDeepCopies(t *testing.T) {
	t.Parallel()
	s := modeltest.NewScripted([]modeltest.Turn{modeltest.Text("a")}, &modeltest.ScriptedOptions{Name: "scripted:demo"})
	temp := 0.5
	req := &model.Request{
		System:      "sys",
		Messages:    []model.Message{{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "x", Name: "bash", Arguments: "{}"}}}},
		Tools:       modeltest.Tools(),
		Temperature: &temp,
	}
	want := modeltest.CloneRequest(req)
	if _, err := s.Generate(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	req.Messages[0].ToolCalls[0].ID = "mutated"
	req.Tools[0].Parameters[0] = 'X'
	temp = 2
	if diff := cmp.Diff([]*model.Request{want}, s.Requests()); diff != "" {
		t.Errorf("Requests() changed with the caller's request (-want +got):\n%s", diff)
	}
	if s.Name() != "scripted:demo" {
		t.Errorf("Name() = %q, want scripted:demo", s.Name())
	}
}

func TestScriptedCanceledTakesNoTurn(t *testing.T) {
	t.Parallel()
	s := modeltest.NewScripted([]modeltest.Turn{modeltest.Text("a")}, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Generate(ctx, modeltest.FirstRequest()); !errors.Is(err, context.Canceled) {
		t.Errorf("Generate(canceled) error = %v, want context.Canceled", err)
	}
	if s.Remaining() != 1 {
		t.Errorf("Remaining() = %d after a canceled call, want 1", s.Remaining())
	}
}

func TestScriptedConformance(t *testing.T) {
	t.Parallel()
	modeltest.Run(t, func(t *testing.T) model.Model {
		return modeltest.NewScripted([]modeltest.Turn{
			modeltest.Calls("", modeltest.Call("call_1", "echo", map[string]string{"text": "hi"}), modeltest.Call("call_2", "bash", map[string]string{"command": "true"})),
			modeltest.Text("done"),
		}, nil)
	})
}

func TestScriptedErrorConformance(t *testing.T) {
	t.Parallel()
	modeltest.RunErrors(t, func(t *testing.T, kind model.ErrorKind) model.Model {
		if kind == model.KindExhausted {
			return modeltest.NewScripted(nil, nil)
		}
		// A scripted failure is returned as given: script well-formed ones.
		e := &model.Error{Kind: kind, Provider: "scripted", Message: "scripted failure"}
		switch kind {
		case model.KindRateLimited:
			e.RetryAfter = 1e9
		case model.KindStalled:
			e.Message = "no bytes for 2m0s on 3 attempts"
		}
		return modeltest.NewScripted([]modeltest.Turn{modeltest.Fail(e)}, nil)
	})
}
