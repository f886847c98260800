package mcpserver

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/testrun"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// connect returns a function that calls a tool of srv over an in-memory
// MCP session and returns its text and whether it is an error result.
func connect(t *testing.T, srv *sdk.Server) func(tool string, args map[string]any) (string, bool) {
	t.Helper()
	ctx := t.Context()
	ct, sst := sdk.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, sst, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return func(tool string, args map[string]any) (string, bool) {
		t.Helper()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*sdk.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String(), res.IsError
	}
}

// Keel's MCP server does what the other front ends do with a run it
// started (report 15, R3): list runs, remember an approval, cancel,
// resume with a message and a raised limit, and answer inputs, each
// through the service's operation, journaled as every front end's.
func TestLocalToolsRunOperations(t *testing.T) {
	ctx := t.Context()
	rt := agent.NewRuntime(mem.New(), nil)
	id := testrun.Paused(t, rt.Store(), nil, "rm old.log", 0)
	other := testrun.Paused(t, rt.Store(), nil, "rm new.log", 0)
	// The runs are handed to workers (a dispatcher that keeps their ids),
	// so a resume is journaled here, as on a cluster.
	d := &dispatched{}
	svc := service.New(rt, &service.Options{Dispatcher: d})
	defer svc.Shutdown(context.WithoutCancel(ctx))
	call := connect(t, Local(svc, service.Local("ada"), nil))
	newest := func(run string) journal.Event {
		t.Helper()
		evs, err := rt.Store().Read(ctx, run, 1)
		if err != nil {
			t.Fatal(err)
		}
		return evs[len(evs)-1]
	}

	text, isErr := call("list_runs", map[string]any{"status": []string{"paused"}})
	var list struct{ Runs []runLine }
	if isErr || json.Unmarshal([]byte(text), &list) != nil || len(list.Runs) != 2 || list.Runs[0].RunID != other || list.Runs[1].Waiting != 1 {
		t.Errorf("list_runs = %s (error %v), want both paused runs, newest first, each waiting", text, isErr)
	}
	if text, isErr := call("list_runs", map[string]any{"status": []string{"sleeping"}}); !isErr || !strings.Contains(text, "sleeping") {
		t.Errorf("list_runs of an unknown status = %q (error %v), want the service's refusal", text, isErr)
	}

	// Remember run: the decision carries it, as keel approve --remember run's does.
	if text, isErr := call("answer_approval", map[string]any{"run_id": id[:10], "decision": "approve", "remember": "run", "prefix": []string{"rm"}}); isErr {
		t.Fatalf("answer_approval remember run = %s", text)
	}
	var res agent.ApprovalResolved
	if e := newest(id); e.Type != journal.ApprovalResolved || json.Unmarshal(e.Payload, &res) != nil || res.Remember != "run" || len(res.Prefix) != 1 || res.By != "ada" {
		t.Errorf("newest event %s %s, want approval.resolved remembering rm for the run, by ada", e.Type, e.Payload)
	}
	if text, isErr := call("answer_approval", map[string]any{"run_id": other, "decision": "approve", "remember": "forever"}); !isErr || !strings.Contains(text, `remember "forever": want run or agent`) {
		t.Errorf("answer_approval remember forever = %q (error %v), want the service's refusal", text, isErr)
	}

	// Cancel, twice: the second is no error, as the API's is not.
	for range 2 {
		text, isErr := call("cancel_run", map[string]any{"run_id": other[:10]})
		var st runStatus
		if isErr || json.Unmarshal([]byte(text), &st) != nil || st.Status != "canceled" {
			t.Errorf("cancel_run = %s (error %v), want canceled", text, isErr)
		}
	}
	if e := newest(other); e.Type != journal.RunCanceled {
		t.Errorf("newest event of the canceled run %s, want run.canceled", e.Type)
	}

	// Resume with a message and a raised step limit: run.resumed carries
	// both, as keel runs resume --max-steps journals them.
	if text, isErr := call("resume_run", map[string]any{"run_id": other[:10], "message": "go on", "max_steps": 7}); isErr {
		t.Fatalf("resume_run = %s", text)
	}
	var resumed agent.RunResumed
	evs, err := rt.Store().Read(ctx, other, 1)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs {
		if e.Type == journal.RunResumed && json.Unmarshal(e.Payload, &resumed) == nil && resumed.Limits != nil && resumed.Limits.MaxSteps == 7 {
			found = true
		}
	}
	if !found || !d.has(other) {
		t.Errorf("no run.resumed with max_steps 7 in %d events, or the run not handed to the workers (%v)", len(evs), d.ids)
	}
	if text, isErr := call("resume_run", map[string]any{"run_id": other[:10], "max_steps": -1}); !isErr || !strings.Contains(text, "-1") {
		t.Errorf("resume_run max_steps -1 = %q (error %v), want the service's refusal", text, isErr)
	}

	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"run_id": id[:10], "action": "accept"}, "waits for no input"},
		{map[string]any{"run_id": id[:10], "input_id": "input-9", "action": "decline"}, "does not wait for input input-9"},
		{map[string]any{"run_id": id[:10], "action": "maybe"}, `action "maybe": want accept, decline or cancel`},
		{map[string]any{"run_id": id[:10], "action": "decline", "content": map[string]any{"a": 1}}, "decline takes no content"},
	} {
		if text, isErr := call("answer_input", c.args); !isErr || !strings.Contains(text, c.want) {
			t.Errorf("answer_input %v = %q (error %v), want the error %q", c.args, text, isErr, c.want)
		}
	}
	if text, isErr := call("list_inputs", nil); isErr || !strings.Contains(text, `"inputs": []`) {
		t.Errorf("list_inputs = %q (error %v), want none", text, isErr)
	}
}

// dispatched is a service.Dispatcher that keeps the ids of the runs
// handed to it.
type dispatched struct {
	mu  sync.Mutex
	ids []string
}

func (d *dispatched) Dispatch(_ context.Context, id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ids = append(d.ids, id)
	return nil
}

func (d *dispatched) Adopt(ctx context.Context, id string) error { return d.Dispatch(ctx, id) }

func (d *dispatched) has(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Contains(d.ids, id)
}

// stillWaiting is a backend whose run waits for two calls: a decision of
// one leaves it paused on the other (queued says whether the decision
// queued it anyway); settle counts the waits.
type stillWaiting struct {
	backend
	queued  bool
	settled int
}

func (b *stillWaiting) resolve(_ context.Context, _ *sdk.CallToolRequest, ref string) (string, error) {
	return ref, nil
}

func (b *stillWaiting) decide(_ context.Context, _ *sdk.CallToolRequest, d *service.Decision) (api.Run, error) {
	return api.Run{ID: d.RunID, Status: "paused", Events: 9, Queued: b.queued, Pending: []api.Approval{{RunID: d.RunID, CallID: "c2", Tool: "bash"}}}, nil
}

func (b *stillWaiting) run(_ context.Context, _ *sdk.CallToolRequest, id string) (api.Run, error) {
	return api.Run{ID: id, Status: "paused", Pending: []api.Approval{{RunID: id, CallID: "c2", Tool: "bash"}}}, nil
}

func (b *stillWaiting) settle(context.Context, *sdk.CallToolRequest, string, int64, time.Duration) {
	b.settled++
}

func (b *stillWaiting) errText(err error) string { return err.Error() }

// answer_approval answers at once when the decision leaves the run
// waiting for another call (report 15, R14: the server's /mcp waited out
// its two minutes, as nothing would move the run), and waits for a run
// the decision queued.
func TestAnswerWaitsOnlyForARunThatMoves(t *testing.T) {
	for _, queued := range []bool{false, true} {
		b := &stillWaiting{queued: queued}
		call := connect(t, newServer[*remoteStart](b, time.Hour, nil, texts{}))
		text, isErr := call("answer_approval", map[string]any{"run_id": "r1", "call_id": "c1", "decision": "approve"})
		if isErr || !strings.Contains(text, `"call_id": "c2"`) {
			t.Errorf("queued %v: answer_approval = %s (error %v), want the run still waiting for c2", queued, text, isErr)
		}
		if want := map[bool]int{false: 0, true: 1}[queued]; b.settled != want {
			t.Errorf("queued %v: waited %d times, want %d", queued, b.settled, want)
		}
	}
}
