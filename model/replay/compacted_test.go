package replay_test

import (
	"context"
	"testing"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/replay"
)

// A request whose older turns were compacted away says how many in
// PriorTurns; the replay adds them to its count and checks the history
// that remains against the right recorded turns.
func TestPriorTurns(t *testing.T) {
	t.Parallel()
	tr := load(t, "deepseek_chat_dev.traj.json")
	m := replay.New(tr, nil)
	turn := func(k int) model.Message {
		rt, _ := tr.Turn(k)
		return rt.Message
	}
	results := func(k int) []model.Message {
		var out []model.Message
		for _, c := range turn(k).ToolCalls {
			out = append(out, model.Message{Role: model.RoleTool, ToolCallID: c.ID, Content: "x"})
		}
		return out
	}
	for _, tt := range []struct {
		name  string
		prior int
		kept  []int // recorded turns still in the request
		want  int   // turn answered
		kind  model.ErrorKind
	}{
		{"nothing compacted", 0, []int{0, 1}, 2, 0},
		{"five compacted, two kept", 5, []int{5, 6}, 7, 0},
		{"everything compacted", 9, nil, 9, 0},
		{"kept turns out of step", 5, []int{6, 7}, 0, model.KindMismatch},
		{"past the end", 74, nil, 0, model.KindExhausted},
		{"negative", -1, nil, 0, model.KindInvalidRequest},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := &model.Request{Tools: bashTool(), PriorTurns: tt.prior, Messages: []model.Message{{Role: model.RoleUser, Content: tr.Task()}}}
			for _, k := range tt.kept {
				req.Messages = append(req.Messages, turn(k))
				req.Messages = append(req.Messages, results(k)...)
			}
			resp, err := m.Generate(context.Background(), req)
			if tt.kind != 0 {
				if model.KindOf(err) != tt.kind {
					t.Fatalf("Generate error %v, want kind %v", err, tt.kind)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := turn(tt.want); resp.Message.ToolCalls[0].ID != want.ToolCalls[0].ID {
				t.Errorf("answered with call %s, want turn %d's %s", resp.Message.ToolCalls[0].ID, tt.want, want.ToolCalls[0].ID)
			}
		})
	}
}

// A summary request is refused without consuming a turn: the runtime
// writes a mechanical summary instead.
func TestSummaryRequestRefused(t *testing.T) {
	t.Parallel()
	m := replay.New(load(t, "deepseek_chat_dev.traj.json"), nil)
	_, err := m.Generate(context.Background(), &model.Request{Purpose: model.PurposeSummary, Messages: []model.Message{{Role: model.RoleUser, Content: "summarise"}}})
	if model.KindOf(err) != model.KindInvalidRequest {
		t.Fatalf("summary request: %v, want an invalid_request error", err)
	}
}
