package service_test

import (
	"context"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/testrun"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// A decision wrong in several ways is refused for the first of them in
// one order, whichever front end sends it (report 15, Q4: the command
// line checked the decision's flags before the run, the API the run
// first, so the same request got different errors): the decision's own
// form (a denial's reason, remember, prefix), then the run, then the
// call it names, then what the decision may do to that run. Nothing is
// journaled.
func TestDecideChecksInOneOrder(t *testing.T) {
	ctx := t.Context()
	rt := agent.NewRuntime(mem.New(), nil)
	id := testrun.Paused(t, rt.Store(), nil, "rm old.log", 0)
	svc := service.New(rt, &service.Options{NoExecution: true})
	defer svc.Shutdown(context.WithoutCancel(ctx))
	before, err := rt.Store().Read(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	const unknown = "01zzzzzzzzzzzzzzzzzzzzzzzz"
	cases := []struct {
		name        string
		run, call   string
		effect      policy.Effect
		req         api.Decide
		code, words string
	}{
		{"no reason, no run", unknown, "c1", policy.Deny, api.Decide{}, api.CodeInvalidRequest, "a denial needs a reason"},
		{"no reason, wrong call", id, "c9", policy.Deny, api.Decide{}, api.CodeInvalidRequest, "a denial needs a reason"},
		{"bad remember, no run", unknown, "c1", policy.Allow, api.Decide{Remember: "forever"}, api.CodeInvalidRequest, `remember "forever": want run or agent`},
		{"bad remember, wrong call", id, "c9", policy.Allow, api.Decide{Remember: "forever"}, api.CodeInvalidRequest, `remember "forever": want run or agent`},
		{"prefix alone, wrong call", id, "c9", policy.Allow, api.Decide{Prefix: []string{"rm"}}, api.CodeInvalidRequest, "prefix needs remember run or agent"},
		{"no run, wrong call", unknown, "c9", policy.Allow, api.Decide{}, api.CodeNotFound, "no run"},
		{"wrong call", id, "c9", policy.Allow, api.Decide{}, api.CodeNoApproval, "run " + id + " does not wait for call c9"},
		{"a remembered denial, wrong call", id, "c9", policy.Deny, api.Decide{Reason: "no", Remember: "run"}, api.CodeInvalidRequest, "remember run is for approvals: a denial is not remembered"},
		{"not a decision", id, "c1", policy.Effect("maybe"), api.Decide{}, api.CodeInvalidRequest, `decision "maybe": want approve or deny`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := svc.Decide(ctx, service.Local("ada"), &service.Decision{RunID: c.run, CallID: c.call, Effect: c.effect, Decide: c.req})
			e, _ := service.Classify(err)
			if err == nil || e.Code != c.code || !strings.Contains(e.Message, c.words) {
				t.Errorf("Decide = %v (code %s), want %s %q", err, e.Code, c.code, c.words)
			}
			if cerr := service.CheckDecision(c.effect, &c.req); (cerr != nil) != (c.code == api.CodeInvalidRequest) {
				t.Errorf("CheckDecision = %v, want the decision's form refused: %v", cerr, c.code == api.CodeInvalidRequest)
			}
		})
	}
	after, err := rt.Store().Read(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) || after[len(after)-1].Type != journal.ApprovalRequested {
		t.Errorf("the refusals journaled: %d events, then %d", len(before), len(after))
	}
}
