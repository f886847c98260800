package server_test

import (
	"encoding/json"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// The API names a run's call as every front end does (report 13, P12:
// keel approve took a prefix, the API answered "no pending approval"),
// and refuses a denial without a reason as the command line, the web UI
// and Keel's MCP tools do (report 13, P5: it recorded one).
func TestDecisionByCallPrefixNeedsAReasonToDeny(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	run, err := e.admin.CreateRun(ctx, &api.CreateRun{Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	asked := e.waitStop(run.ID, 1)
	_, err = e.admin.Deny(ctx, run.ID, "demo_4", &api.Decide{})
	wantAPIError(t, err, api.CodeInvalidRequest, "a denial needs a reason")
	_, err = e.admin.Deny(ctx, run.ID, "demo_4", &api.Decide{Reason: "  "})
	wantAPIError(t, err, api.CodeInvalidRequest, "a denial needs a reason")
	_, err = e.admin.Approve(ctx, run.ID, "demo_9", nil)
	wantAPIError(t, err, api.CodeNoApproval, "does not wait for call demo_9 (decided already, or never asked); it waits for:\n  demo_4")
	if got := e.events(run.ID); int64(len(got)) != asked.Seq {
		t.Fatalf("the refusals journaled: %d events, want %d", len(got), asked.Seq)
	}
	if _, err := e.admin.Approve(ctx, run.ID[:10], "demo_", nil); err != nil {
		t.Fatalf("approve by prefixes: %v", err)
	}
	var res *agent.ApprovalResolved
	for _, ev := range e.events(run.ID) {
		if ev.Type == journal.ApprovalResolved {
			res = &agent.ApprovalResolved{}
			if err := json.Unmarshal(ev.Payload, res); err != nil {
				t.Fatal(err)
			}
		}
	}
	if res == nil || res.CallID != "demo_4" {
		t.Errorf("approval.resolved %+v, want demo_4's", res)
	}
}
