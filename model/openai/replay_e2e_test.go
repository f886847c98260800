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
// model: once as a whole answer, and once streamed (what `keel run` asks
// for, as it shows the text as it arrives), where the text told to the
// observer must also be the recorded text.
func TestReplayServerEndToEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file   string
		stream bool
	}{
		{"deepseek_chat_dev.traj.json", false},
		{"deepseek_chat_dev_rerun.traj.json", false},
		{"deepseek_chat_dev.traj.json", true},
		{"deepseek_chat_dev_rerun.traj.json", true},
	} {
		file := tc.file
		name := file
		if tc.stream {
			name += "/stream"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			var text strings.Builder
			if tc.stream {
				ctx = model.WithObserver(ctx, &model.Observer{Text: func(d string) { text.WriteString(d) }})
			}
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
				text.Reset()
				got, err := served.Generate(ctx, req)
				if err != nil {
					t.Fatalf("turn %d: openai adapter: %v", k+1, err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("turn %d (-direct +served):\n%s", k+1, diff)
				}
				if tc.stream && text.String() != want.Message.Content {
					t.Fatalf("turn %d: streamed text %q, want %q", k+1, text.String(), want.Message.Content)
				}
				req.Messages = append(req.Messages, got.Message)
				for _, c := range got.Message.ToolCalls {
					r, _ := tr.ToolResult(c.ID)
					req.Messages = append(req.Messages, model.Message{Role: model.RoleTool, ToolCallID: c.ID, Content: r.Content, IsError: r.ExitCode != 0})
				}
			}
			_, err = served.Generate(ctx, req)
			if model.KindOf(err) != model.KindInvalidRequest || !strings.Contains(err.Error(), "request asks for turn") {
				t.Errorf("past the last turn: %v; want the handler's exhausted error as invalid_request", err)
			}
		})
	}
}
