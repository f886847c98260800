package service_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/realpath"
	"github.com/keel-run/keel/internal/testrun"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// A run is named alike in every front end (report 13, P7: Keel's local
// MCP server took whole ids only): its id, a unique prefix, the web UI's
// short form, or "last" where the caller has a directory; a miss is
// not_found, an ambiguous prefix invalid_request naming the runs.
func TestResolveRun(t *testing.T) {
	ctx := t.Context()
	store := mem.New()
	a := testrun.Paused(t, store, nil, "rm a.log", 0)
	b := testrun.Paused(t, store, nil, "rm b.log", 0)
	n := 0
	for n < len(a) && a[n] == b[n] {
		n++
	}
	rt := agent.NewRuntime(store, nil)
	wsB := created(t, ctx, rt, b).Workspace
	elsewhere := realpath.Resolve(t.TempDir())
	for _, c := range []struct {
		name, ref, dir, want, code, msg string
	}{
		{"whole id", a, "", a, "", ""},
		{"prefix", b[:n+1], "", b, "", ""},
		{"upper case", strings.ToUpper(a[:n+1]), "", a, "", ""},
		{"short form", b[:4] + "…" + b[len(b)-6:], "", b, "", ""},
		{"ambiguous", a[:max(n, 4)], "", "", api.CodeInvalidRequest, "matches 2 runs"},
		{"unknown", "01zzzzzzzz", "", "", api.CodeNotFound, `no run "01zzzzzzzz"`},
		{"too short", "01", "", "", api.CodeNotFound, `no run "01"`},
		{"a fork's source", b + "@21", "", "", api.CodeNotFound, fmt.Sprintf("give the run (%s), and the event where the command takes one (keel runs fork %s --at 21)", b, b)},
		{"an event of no run", "01zzzzzzzz@21", "", "", api.CodeNotFound, `no run "01zzzzzzzz@21"`},
		{"too long", a + strings.Repeat("x", 200), "", "", api.CodeNotFound, "(226 characters: a run id has 26)"},
		{"last here", "last", wsB, b, "", ""},
		// It names the newest run and where it worked (a demo works in a
		// directory of its own; fresh-user trial 17, F1).
		{"last elsewhere", "last", elsewhere, "", api.CodeNotFound, fmt.Sprintf("no run in this workspace (%s); the newest run, %s, worked in %s", elsewhere, b, wsB)},
		{"last without a directory", "last", "", "", api.CodeNotFound, "give the run's id"},
	} {
		t.Run(c.name, func(t *testing.T) {
			id, err := service.ResolveRun(ctx, store, c.ref, c.dir)
			if c.code == "" {
				if err != nil || id != c.want {
					t.Fatalf("ResolveRun(%q) = %q, %v; want %s", c.ref, id, err, c.want)
				}
				return
			}
			wantCode(t, err, c.code)
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("ResolveRun(%q): %v, want %q", c.ref, err, c.msg)
			}
		})
	}
}

// A front end on a team server finds "last" in the server's list by the
// same rule: the newest run, not a child's, working in the directory.
func TestLastIn(t *testing.T) {
	ws, other := t.TempDir(), t.TempDir()
	runs := []api.Run{{ID: "child", Workspace: ws, Parent: "lead"}, {ID: "elsewhere", Workspace: other}, {ID: "lead", Workspace: ws}, {ID: "older", Workspace: ws}}
	if id, err := service.LastIn(runs, ws); err != nil || id != "lead" {
		t.Errorf("LastIn = %q, %v; want lead", id, err)
	}
	_, err := service.LastIn(runs, t.TempDir())
	wantCode(t, err, api.CodeNotFound)
	if want := "the newest run, elsewhere, worked in " + other; !strings.Contains(err.Error(), want) {
		t.Errorf("LastIn elsewhere: %v, want %q", err, want)
	}
}

// A call is named alike in every front end (report 13, P12; report 12,
// B11: the API and the MCP tools took whole call ids only, and said the
// call had "no pending approval"): its id, a unique prefix, or nothing
// when one waits.
func TestResolveCall(t *testing.T) {
	two := []api.Approval{{CallID: "call_00_ryaC8miT", Tool: "bash"}, {CallID: "call_01_xq", Tool: "edit_file"}}
	one := two[:1]
	for _, c := range []struct {
		name, ref       string
		pending         []api.Approval
		want, code, msg string
	}{
		{"whole id", "call_01_xq", two, "call_01_xq", "", ""},
		{"unique prefix", "call_00", two, "call_00_ryaC8miT", "", ""},
		{"none given, one waits", "", one, "call_00_ryaC8miT", "", ""},
		{"none given, two wait", "", two, "", api.CodeInvalidRequest, "waits for 2 approvals: name the call (its id, or the start of it):\n  call_00_ryaC8miT (bash)\n  call_01_xq (edit_file)"},
		{"ambiguous", "call_0", two, "", api.CodeInvalidRequest, "call call_0 of run R is ambiguous: 2 waiting calls start with it"},
		{"not waiting", "call_02", two, "", api.CodeNoApproval, "run R does not wait for call call_02 (decided already, or never asked); it waits for:\n  call_00_ryaC8miT (bash)"},
		{"nothing waits", "call_00", nil, "", api.CodeNoApproval, "run R waits for no approval, so not for call call_00"},
		{"nothing waits, none given", "", nil, "", api.CodeNoApproval, "run R waits for no approval"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := service.ResolveCall("R", c.ref, c.pending)
			if c.code == "" {
				if err != nil || got != c.want {
					t.Fatalf("ResolveCall(%q) = %q, %v; want %q", c.ref, got, err, c.want)
				}
				return
			}
			wantCode(t, err, c.code)
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("ResolveCall(%q): %v, want %q", c.ref, err, c.msg)
			}
		})
	}
}

// An input request is named as a call is (ResolveCall's rule), among
// the requests of its own run only.
func TestResolveInput(t *testing.T) {
	all := []api.Input{{RunID: "R", ID: "input-1", Server: "gh", Message: "which repo?"}, {RunID: "R", ID: "input-2", Server: "gh", Message: "which branch?"}, {RunID: "S", ID: "input-3", Server: "gh"}}
	for _, c := range []struct {
		name, ref       string
		pending         []api.Input
		want, code, msg string
	}{
		{"whole id", "input-2", all, "input-2", "", ""},
		{"none given, one waits", "", all[1:], "input-2", "", ""},
		{"none given, two wait", "", all, "", api.CodeInvalidRequest, "run R waits for 2 inputs: name the input (its id, or the start of it):\n  input-1 (gh: which repo?)\n  input-2 (gh: which branch?)"},
		{"ambiguous", "input-", all, "", api.CodeInvalidRequest, "input input- of run R is ambiguous: 2 waiting inputs start with it"},
		{"another run's", "input-3", all, "", api.CodeNoInput, "run R does not wait for input input-3 (answered already, or never asked); it waits for:\n  input-1"},
		{"nothing waits", "", all[2:], "", api.CodeNoInput, "run R waits for no input"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := service.ResolveInput("R", c.ref, c.pending)
			if c.code == "" {
				if err != nil || got != c.want {
					t.Fatalf("ResolveInput(%q) = %q, %v; want %q", c.ref, got, err, c.want)
				}
				return
			}
			wantCode(t, err, c.code)
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("ResolveInput(%q): %v, want %q", c.ref, err, c.msg)
			}
		})
	}
}

// A decision names its call as every front end does, and a denial
// without a reason is refused whoever sends it (report 13, P5: the API
// recorded one, which the command line, the web UI and MCP refuse);
// a refusal journals nothing.
func TestDecideResolvesTheCallAndNeedsAReason(t *testing.T) {
	ctx := t.Context()
	rt := agent.NewRuntime(mem.New(), nil)
	id := testrun.Paused(t, rt.Store(), nil, "rm old.log", 0)
	svc := service.New(rt, &service.Options{NoExecution: true})
	defer svc.Shutdown(context.WithoutCancel(ctx))
	me := service.Local("ada")
	before, err := rt.Store().Read(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		call, reason string
		code         string
	}{
		{"c1", "", api.CodeInvalidRequest},
		{"c1", " \n", api.CodeInvalidRequest},
		{"", "", api.CodeInvalidRequest},
		{"x", "no", api.CodeNoApproval},
	} {
		_, err := svc.Decide(ctx, me, &service.Decision{RunID: id, CallID: c.call, Effect: policy.Deny, Decide: api.Decide{Reason: c.reason}})
		wantCode(t, err, c.code)
	}
	if evs, err := rt.Store().Read(ctx, id, 1); err != nil || len(evs) != len(before) {
		t.Fatalf("after the refusals the journal has %d events (%v), want %d", len(evs), err, len(before))
	}
	run, err := svc.Decide(ctx, me, &service.Decision{RunID: id, CallID: "c", Effect: policy.Deny, Decide: api.Decide{Reason: "keep the log"}})
	if err != nil || len(run.Pending) != 0 {
		t.Fatalf("deny by a prefix = %+v, %v", run, err)
	}
	evs, err := rt.Store().Read(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	last := &evs[len(evs)-1]
	v, err := agent.Decode(last)
	if res, ok := v.(*agent.ApprovalResolved); err != nil || !ok || res.CallID != "c1" || res.Decision != policy.Deny || res.Reason != "keep the log" {
		t.Errorf("newest event %s %s, want the denial of c1", last.Type, last.Payload)
	}
	if last.Type != journal.ApprovalResolved {
		t.Errorf("newest event %s", last.Type)
	}
}
