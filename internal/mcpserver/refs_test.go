package mcpserver

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/internal/testrun"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/server"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
	"github.com/keel-run/keel/service"
)

// Keel's MCP server on the local journal names runs and calls as every
// other front end does (report 13, P7 and P12; report 12, B11): a
// run's id, a unique prefix of it, the web UI's short form, or "last" in
// the server's directory; a call's id, a unique prefix, or none when
// one waits. A miss says so as the command line and the API do, as a
// tool error; a denial without a reason is the service's refusal.
func TestLocalToolsResolveRunsAndCalls(t *testing.T) {
	ctx := t.Context()
	rt := agent.NewRuntime(mem.New(), nil)
	id := testrun.Paused(t, rt.Store(), nil, "rm old.log", 0)
	st, _, err := rt.Load(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	svc := service.New(rt, &service.Options{NoExecution: true})
	defer svc.Shutdown(context.WithoutCancel(ctx))
	call := connect(t, Local(svc, service.Local("ada"), &LocalOptions{Dir: st.Created.Workspace}))
	for _, ref := range []string{id, id[:10], id[:4] + "…" + id[len(id)-6:], "last"} {
		text, isErr := call("run_status", map[string]any{"run_id": ref})
		var got runStatus
		if isErr || json.Unmarshal([]byte(text), &got) != nil || got.RunID != id || len(got.Waiting) != 1 {
			t.Errorf("run_status %q = %s (error %v), want run %s waiting", ref, text, isErr, id)
		}
		if text, isErr := call("run_timeline", map[string]any{"run_id": ref}); isErr || !strings.Contains(text, "approval.requested") {
			t.Errorf("run_timeline %q = %s (error %v)", ref, text, isErr)
		}
		if text, isErr := call("list_approvals", map[string]any{"run_id": ref}); isErr || !strings.Contains(text, `"call_id": "c1"`) {
			t.Errorf("list_approvals %q = %s (error %v)", ref, text, isErr)
		}
	}
	for ref, want := range map[string]string{"01zzzzzzzz": `no run "01zzzzzzzz"`, "01": `no run "01"`} {
		if text, isErr := call("run_status", map[string]any{"run_id": ref}); !isErr || text != want {
			t.Errorf("run_status %q = %q (error %v), want the error %q", ref, text, isErr, want)
		}
	}
	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"run_id": id[:10], "call_id": "c1", "decision": "deny"}, "a denial needs a reason"},
		{map[string]any{"run_id": id[:10], "call_id": "x", "decision": "deny", "reason": "no"}, "does not wait for call x"},
	} {
		if text, isErr := call("answer_approval", c.args); !isErr || !strings.Contains(text, c.want) {
			t.Errorf("answer_approval %v = %q (error %v), want the error %q", c.args, text, isErr, c.want)
		}
	}
	text, isErr := call("answer_approval", map[string]any{"run_id": id[:10], "decision": "deny", "reason": "keep the log"})
	var got runStatus
	if isErr || json.Unmarshal([]byte(text), &got) != nil || got.RunID != id || len(got.Waiting) != 0 {
		t.Errorf("answer_approval without call_id = %s (error %v), want run %s decided", text, isErr, id)
	}
	evs, err := rt.Store().Read(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if last := evs[len(evs)-1]; last.Type != journal.ApprovalResolved || !strings.Contains(string(last.Payload), `"call_id":"c1"`) {
		t.Errorf("newest event %s %s, want c1's approval.resolved", last.Type, last.Payload)
	}
}

// answer_approval without a call_id, on a run that waits for two calls,
// decides neither: Keel's MCP server on the journal and on a team server
// refuse it as every front end does (service.ResolveCall), naming both
// waiting calls, and journal nothing (report 15, Q6/5).
func TestAnswerApprovalTwoWaitingNamesBoth(t *testing.T) {
	ctx := t.Context()
	store, err := journal.Open(ctx, filepath.Join(t.TempDir(), "keel.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rt := agent.NewRuntime(store, nil)
	id := testrun.PausedCalls(t, store, "rm a.log", "rm b.log")
	svc := service.New(rt, &service.Options{NoExecution: true})
	defer svc.Shutdown(context.WithoutCancel(ctx))
	admin, err := token.New(store, nil).Create(ctx, &token.Params{Name: "ada", Scopes: []string{api.ScopeAdmin}, By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(server.NewHandler(svc, nil))
	defer hs.Close()
	cl, err := client.New(hs.URL, &client.Options{Token: admin.Secret})
	if err != nil {
		t.Fatal(err)
	}
	for name, srv := range map[string]*sdk.Server{
		"local":  Local(svc, service.Local("ada"), nil),
		"remote": Remote(hs.URL, &RemoteOptions{Client: cl}),
	} {
		t.Run(name, func(t *testing.T) {
			call := connect(t, srv)
			for _, args := range []map[string]any{
				{"run_id": id, "decision": "approve"},
				{"run_id": id, "call_id": "", "decision": "deny", "reason": "no"},
			} {
				text, isErr := call("answer_approval", args)
				want := "run " + id + " waits for 2 approvals: name the call (its id, or the start of it):\n  c1 (bash)\n  c2 (bash)"
				if !isErr || text != want {
					t.Errorf("answer_approval %v = %q (error %v), want the error %q", args, text, isErr, want)
				}
			}
			evs, err := store.Read(ctx, id, 1)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evs {
				if e.Type == journal.ApprovalResolved {
					t.Errorf("a call was decided: %s", e.Payload)
				}
			}
		})
	}
}
