package agent_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/tool"
)

// A call whose tool needs an authorization waits for it, unstarted, in a
// durable auth.required wait; the run pauses; after auth.resolved the
// next execution runs the same call (asking Authorize again) and the run
// completes. A declined authorization gives the call an error result.
func TestAuthRequiredWait(t *testing.T) {
	for _, declined := range []bool{false, true} {
		e := newEnv(t)
		ctx := t.Context()
		var granted atomic.Bool
		var asked atomic.Int32
		tool.Add(e.reg, &tool.Tool{Name: "api", Description: "call an API", Effect: tool.External,
			Authorize: func(ctx context.Context, req *tool.Request) error {
				asked.Add(1)
				if req.Principal != "helper" || req.OnBehalfOf != "ann" {
					t.Errorf("Authorize saw %q for %q", req.Principal, req.OnBehalfOf)
				}
				if !granted.Load() {
					return &tool.AuthRequiredError{Provider: "crm", Agent: req.Principal, User: req.OnBehalfOf, Scopes: []string{"read"}, Reason: "missing", Hint: "keel auth connect crm"}
				}
				return nil
			}},
			func(ctx context.Context, req *tool.Request, in struct {
				Q string `json:"q"`
			}) (*tool.Result, error) {
				e.log.add("api " + in.Q)
				return tool.Text("42"), nil
			})
		m := &script{turns: []model.Message{calls(tc("c1", "api", `{"q":"x"}`)), answer("done")}}
		id := e.create(&agent.RunCreated{Principal: "helper", OnBehalfOf: "ann"})
		out, err := e.rt.Execute(ctx, id, e.params(m))
		if err != nil {
			t.Fatal(err)
		}
		if out.Status != journal.StatusPaused {
			t.Fatalf("outcome %s, want paused", out.Status)
		}
		st, _, _ := e.rt.Load(ctx, id)
		pa := st.PendingAuths()
		if len(pa) != 1 || pa[0].CallID != "c1" || pa[0].Provider != "crm" || pa[0].Hint == "" {
			t.Fatalf("pending auths = %+v", pa)
		}
		if waits, _ := e.rt.AuthWaits(ctx); len(waits) != 1 {
			t.Errorf("AuthWaits = %+v", waits)
		}
		// A restart: executing again without a resolution waits again and
		// runs nothing.
		if out, err := e.rt.Execute(ctx, id, e.params(m)); err != nil || out.Status != journal.StatusPaused || len(e.log.get()) != 0 {
			t.Fatalf("re-execute while waiting: %v %+v, ran %v", err, out, e.log.get())
		}
		if err := e.rt.ResolveAuth(ctx, id, "nope", &agent.AuthResolved{}); !errors.Is(err, agent.ErrNoAuthWait) {
			t.Errorf("ResolveAuth of an unknown call = %v", err)
		}
		granted.Store(!declined)
		if err := e.rt.ResolveAuth(ctx, id, "c1", &agent.AuthResolved{Grant: "grant_1", By: "ann", Declined: declined}); err != nil {
			t.Fatal(err)
		}
		out, err = e.rt.Execute(ctx, id, e.params(m))
		if err != nil || out.Status != journal.StatusCompleted {
			t.Fatalf("after resolution: %v %+v", err, out)
		}
		st, _, _ = e.rt.Load(ctx, id)
		c := st.Turns[0].Calls[0]
		if declined {
			if !c.Finished.IsError || !c.Finished.Synthetic || len(e.log.get()) != 0 {
				t.Errorf("declined: result %+v, ran %v", c.Finished, e.log.get())
			}
			continue
		}
		if diff := cmp.Diff([]string{"api x"}, e.log.get()); diff != "" {
			t.Errorf("ran (-want +got):\n%s", diff)
		}
		if c.Finished.Content != "42" || c.Attempts != 1 {
			t.Errorf("call after authorization: %+v (attempts %d)", c.Finished, c.Attempts)
		}
		checkOneResult(t, st)
	}
}
