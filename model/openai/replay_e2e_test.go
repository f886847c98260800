package openai_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/openai"
	"github.com/keel-run/keel/model/replay"
)

// TestReplayServerEndToEnd drives the real openai-go path (request
// encoding, HTTP, idle transport, response decoding) against
// replay.NewHandler for every turn of both trajectories, offline, and
// checks that each answer maps to the same response as the direct replay
// model.
func TestReplayServerEndToEnd(t *testing.T) {
	t.Parallel()
	for _, file := range []string{"deepseek_chat_dev.traj.json", "deepseek_chat_dev_rerun.traj.json"} {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			tr := loadTrajectory(t, file)
			srv := httptest.NewServer(replay.NewHandler(tr))
			t.Cleanup(srv.Close)
			served, err := openai.New(&openai.Options{Model: tr.Model(), BaseURL: srv.URL + "/v1"})
			if err != nil {
				t.Fatal(err)
			}
			direct := replay.New(tr, nil)
			req := &model.Request{System: tr.System(), Messages: []model.Message{{Role: model.RoleUser, Content: tr.Task()}}, Tools: userRequest().Tools}
			for k := range tr.Len() {
				want, err := direct.Generate(t.Context(), req)
				if err != nil {
					t.Fatalf("turn %d: direct replay: %v", k+1, err)
				}
				got, err := served.Generate(t.Context(), req)
				if err != nil {
					t.Fatalf("turn %d: openai adapter: %v", k+1, err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("turn %d (-direct +served):\n%s", k+1, diff)
				}
				req.Messages = append(req.Messages, got.Message)
				for _, c := range got.Message.ToolCalls {
					r, _ := tr.ToolResult(c.ID)
					req.Messages = append(req.Messages, model.Message{Role: model.RoleTool, ToolCallID: c.ID, Content: r.Content, IsError: r.ExitCode != 0})
				}
			}
			_, err = served.Generate(t.Context(), req)
			if model.KindOf(err) != model.KindInvalidRequest || !strings.Contains(err.Error(), "request asks for turn") {
				t.Errorf("past the last turn: %v; want the handler's exhausted error as invalid_request", err)
			}
		})
	}
}
