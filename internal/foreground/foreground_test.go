package foreground

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/internal/tui"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool"
)

// script answers the k-th request with turns[k], k counting the
// assistant messages in the request.
type script []model.Message

func (s script) Generate(_ context.Context, req *model.Request) (*model.Response, error) {
	k := 0
	for _, m := range req.Messages {
		if m.Role == model.RoleAssistant {
			k++
		}
	}
	if k >= len(s) {
		return nil, &model.Error{Kind: model.KindExhausted, Message: "script exhausted"}
	}
	m := s[k]
	m.Role = model.RoleAssistant
	return &model.Response{Message: m}, nil
}

// newRun creates a run whose model calls note once, which the policy
// asks a person about, and then answers "done".
func newRun(t *testing.T) (*agent.Runtime, *assemble.Run, string) {
	t.Helper()
	ws, err := tool.NewWorkspace(t.TempDir(), "/workspace", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	reg := tool.NewRegistry()
	type noteArgs struct {
		Text string `json:"text"`
	}
	tool.Add(reg, &tool.Tool{Name: "note", Description: "note text", Effect: tool.ReadOnly, Scope: func(json.RawMessage) []string { return nil }},
		func(_ context.Context, _ *tool.Request, in noteArgs) (*tool.Result, error) {
			return tool.Text("noted " + in.Text), nil
		})
	m := script{{ToolCalls: []model.ToolCall{{ID: "c1", Name: "note", Arguments: `{"text":"hi"}`}}}, {Content: "done"}}
	ask := func(_ context.Context, c *policy.Call) policy.Decision {
		return policy.Decision{Effect: policy.Ask, Reason: "a person decides notes"}
	}
	rt := agent.NewRuntime(mem.New(), nil)
	id, err := rt.Create(context.Background(), &agent.RunCreated{Task: "note hi", Model: "script", Principal: identity.LocalAgent, Tools: agent.ToolInfos(reg), Limits: agent.Limits{MaxSteps: 5}, Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return rt, &assemble.Run{Wiring: agent.Wiring{Model: m, Tools: reg, Env: &tool.Env{Workspace: ws}, Policy: ask}}, id
}

func TestExecuteAtTheTerminal(t *testing.T) {
	for _, tt := range []struct {
		name       string
		wait       bool
		standIn    string
		status     journal.Status
		stderrHas  string
		decidedBy  string
		stdoutHas  string
		wantNoDone bool
	}{
		// Nobody at the terminal, no stand-in: the run pauses at the
		// question and says how to decide it.
		{name: "pauses", status: journal.StatusPaused, stderrHas: "keel approve"},
		// keel demo's stand-in approves what nobody at the terminal can.
		{name: "stand-in", wait: true, standIn: "keel demo (stand-in)", status: journal.StatusCompleted, stderrHas: "approved by keel demo (stand-in)", decidedBy: "keel demo (stand-in)", stdoutHas: "done"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rt, run, id := newRun(t)
			var stdout, stderr bytes.Buffer
			var by string
			decide := func(ctx context.Context, runID, callID string, res *agent.ApprovalResolved) error {
				by = res.By
				return rt.Resolve(ctx, runID, callID, res)
			}
			x := &Execution{Runtime: rt, Run: run, Wait: tt.wait, StandIn: tt.standIn,
				Terminal: &Terminal{Stdout: &stdout, Stderr: &stderr, Prompt: &tui.Prompt{Err: &stderr}, Keel: "keel", Person: "ana", Decide: decide}}
			out, err := x.Execute(context.Background(), id, nil, "")
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != tt.status {
				t.Errorf("status %s, want %s\nstderr:\n%s", out.Status, tt.status, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.stderrHas) {
				t.Errorf("stderr lacks %q:\n%s", tt.stderrHas, stderr.String())
			}
			if by != tt.decidedBy {
				t.Errorf("decided by %q, want %q", by, tt.decidedBy)
			}
			if !strings.Contains(stdout.String(), tt.stdoutHas) {
				t.Errorf("stdout lacks %q:\n%s", tt.stdoutHas, stdout.String())
			}
		})
	}
}

func TestBusyErrorSaysTheMessageWasNotDelivered(t *testing.T) {
	err := withMessage(Busy(context.Background(), mem.New(), "r1"), "please stop")
	if !errors.Is(err, agent.ErrRunBusy) {
		t.Errorf("%v does not wrap agent.ErrRunBusy", err)
	}
	for _, want := range []string{"run r1 is being executed by another process", "your message was NOT delivered"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if err := withMessage(Busy(context.Background(), mem.New(), "r1"), ""); strings.Contains(err.Error(), "NOT delivered") {
		t.Errorf("no message given, yet: %v", err)
	}
}
