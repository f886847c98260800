package server_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/model/modeltest"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/service"
	"github.com/keel-run/keel/tool"
)

// A run that a local keel run started on the server's journal and that
// the server may not execute (its workspace is outside the server's
// roots, or it decides by another policy) is left as that process left
// it: a restart does not resume it, an approval's passed deadline does
// not execute it, and nothing is journaled in it (no synthetic result
// saying an interrupted call did not run, no run.failed). The local user
// continues it with keel runs resume, which applies the deadline too.
func TestServerLeavesLocalRunsItMayNotExecute(t *testing.T) {
	deadlines := func(s *service.Service) ([]string, error) { return s.ExpireApprovals(t.Context()) }
	authorizations := func(s *service.Service) ([]string, error) { return s.ResumeAuthorized(t.Context()) }
	outside, err := os.MkdirTemp("", "keel-outside-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(outside) })
	write := modeltest.Call("w1", "write_file", map[string]string{"path": "out.txt", "content": "half"})
	allow := policy.Decision{Effect: policy.Allow, Policies: []string{"allow"}, Reason: "allowed"}
	// interrupted journals a run killed (kill -9) while its call ran: the
	// call started, wrote part of its file, and has no result.
	interrupted := func(t *testing.T, ws string) []journal.Draft {
		if err := os.WriteFile(filepath.Join(ws, "out.txt"), []byte("ha"), 0o644); err != nil {
			t.Fatal(err)
		}
		return []journal.Draft{
			draft(t, journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{write}}}),
			draft(t, journal.GateDecided, &agent.GateDecided{CallID: "w1", Tool: "write_file", Decision: allow}),
			draft(t, journal.ToolStarted, &agent.ToolStarted{CallID: "w1", Tool: "write_file", Arguments: json.RawMessage(write.Arguments), Attempt: 1}),
		}
	}
	// expired journals a run paused for an approval whose deadline (the
	// local run's --approval-timeout 3s) has passed.
	expired := func(t *testing.T, _ string) []journal.Draft {
		part := policy.Part{Text: "out.txt", Effect: policy.Ask, Policies: []string{"ask"}, Reason: "a person approves this"}
		d := policy.Decision{Effect: policy.Ask, Policies: part.Policies, Reason: part.Reason, Parts: []policy.Part{part}}
		deadline := time.Now().Add(-time.Minute)
		return []journal.Draft{
			draft(t, journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{write}}}),
			draft(t, journal.GateDecided, &agent.GateDecided{CallID: "w1", Tool: "write_file", Decision: d}),
			draft(t, journal.ApprovalRequested, &agent.ApprovalRequested{CallID: "w1", Tool: "write_file", Arguments: json.RawMessage(write.Arguments),
				Reason: part.Reason, Action: "out.txt", Parts: d.Parts, Expires: &deadline, Default: policy.Deny}),
			draft(t, journal.RunPaused, &agent.RunEnded{Reason: "approval", Message: "waiting for approval of w1"}),
		}
	}
	// authorized journals a run whose call waited for an authorization
	// that keel auth connect then gave.
	authorized := func(t *testing.T, _ string) []journal.Draft {
		return []journal.Draft{
			draft(t, journal.ModelResponded, &agent.ModelResponded{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{write}}}),
			draft(t, journal.GateDecided, &agent.GateDecided{CallID: "w1", Tool: "write_file", Decision: allow}),
			draft(t, journal.AuthRequired, &agent.AuthRequired{CallID: "w1", Tool: "write_file",
				AuthRequiredError: tool.AuthRequiredError{Provider: "example", Agent: identity.LocalAgent, Reason: tool.AuthMissing}}),
			draft(t, journal.RunPaused, &agent.RunEnded{Reason: "auth", Message: "waiting for authorization"}),
			draft(t, journal.AuthResolved, &agent.AuthResolved{CallID: "w1", Grant: "g1", By: "ada"}),
		}
	}
	for _, tt := range []struct {
		name string
		// inside puts the run's workspace under the server's roots;
		// otherwise it is outside them.
		inside bool
		// local is the run's policy: the server's, or another one.
		local  *policy.Engine
		events func(*testing.T, string) []journal.Draft
		// sweep is the service's periodic work that would execute the
		// run (ExpireApprovals, ResumeAuthorized); nil: a restart.
		sweep func(*service.Service) ([]string, error)
		// why is what the server says of the run.
		why string
	}{
		{"interrupted, workspace outside the roots", false, nil, interrupted, nil, "its workspace is not allowed"},
		{"deadline passed, workspace outside the roots", false, nil, expired, deadlines, "its workspace is not allowed"},
		{"authorized, workspace outside the roots", false, nil, authorized, authorizations, "its workspace is not allowed"},
		{"interrupted, another policy", true, service.DemoPolicy(), interrupted, nil, "another policy"},
		{"deadline passed, another policy", true, service.DemoPolicy(), expired, deadlines, "another policy"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			ctx := t.Context()
			ws := t.TempDir()
			if !tt.inside {
				ws = filepath.Join(outside, strings.ReplaceAll(tt.name, " ", "-"))
				if err := os.Mkdir(ws, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			pol := tt.local
			if pol == nil {
				pol = e.policy
			}
			id := e.journalRun(&agent.RunCreated{Task: "local", Model: "test:none", Workspace: ws, MountPath: "/workspace", Sandbox: e.sandbox,
				Principal: identity.LocalAgent, Policy: agent.NewPolicyRef(pol), Limits: agent.Limits{MaxSteps: 10},
				Approval: &agent.ApprovalSettings{Timeout: agent.Duration(3 * time.Second)}},
				tt.events(t, ws)...)
			before := e.events(id)
			if tt.sweep != nil {
				ids, err := tt.sweep(e.svc)
				if err != nil {
					t.Fatal(err)
				}
				if slices.Contains(ids, id) {
					t.Errorf("the sweep submitted the run for execution")
				}
			} else {
				var ids []string
				e, ids = e.restart()
				if slices.Contains(ids, id) {
					t.Errorf("the restart resumed the run")
				}
			}
			e.waitIdle(id)
			after := e.events(id)
			for _, ev := range after[len(before):] {
				t.Errorf("the server journaled in the run it leaves alone: %s %s", ev.Type, ev.Payload)
			}
			if got, _ := os.ReadFile(filepath.Join(ws, "out.txt")); string(got) != "ha" && tt.sweep == nil {
				t.Errorf("out.txt = %q, want the interrupted call's %q", got, "ha")
			}
			if got := e.svc.Elsewhere(ctx, id); !strings.Contains(got, "this server does not continue this run: ") || !strings.Contains(got, tt.why) ||
				!strings.Contains(got, "keel runs resume "+id+" without --server") {
				t.Errorf("Elsewhere = %q, want it to say why (%s) and where the run goes on", got, tt.why)
			}
		})
	}
}
