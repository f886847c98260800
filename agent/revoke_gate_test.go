package agent_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/policy"
	"github.com/keel-run/keel/tool"
)

// Revoking the agent while its run executes (here from inside a tool
// call, through another directory handle, as another process would) takes
// effect at the next gate decision: the run pauses with reason revoked,
// nothing more runs, and when the run is finally canceled every call has
// exactly one result.
func TestRevocationDuringRun(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	dir := identity.NewDirectory(e.store, nil)
	if _, err := dir.Create(ctx, &identity.CreateParams{Name: "worker", By: "ann"}); err != nil {
		t.Fatal(err)
	}
	admin := identity.NewDirectory(e.store, nil) // another process's view
	tool.Add(e.reg, &tool.Tool{Name: "bash", Description: "run", Effect: tool.External},
		func(ctx context.Context, req *tool.Request, in struct {
			Command string `json:"command"`
		}) (*tool.Result, error) {
			e.log.add("bash " + in.Command)
			if in.Command == "step 2" {
				if _, err := admin.Revoke(ctx, "worker", &identity.RevokeParams{By: "sec", Reason: "leaked token"}); err != nil {
					return nil, err
				}
			}
			return tool.Text("ok"), nil
		})
	m := &script{turns: []model.Message{
		calls(bash("c1", "step 1")),
		calls(bash("c2", "step 2"), bash("c3", "step 2b")),
		calls(bash("c4", "step 3")),
		answer("done"),
	}}
	id := e.create(&agent.RunCreated{Principal: "worker", Policy: agent.NewPolicyRef(policy.Default())})
	p := e.params(m)
	p.Principals = dir.Check
	out, err := e.rt.Execute(ctx, id, p)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != journal.StatusPaused || out.End.Reason != "revoked" {
		t.Fatalf("outcome %s %+v", out.Status, out.End)
	}
	// c2 and c3 were decided together before the revocation; c2 revoked
	// the agent while it ran, so c3 (not started) must not run, and c4
	// is never decided.
	if diff := cmp.Diff([]string{"bash step 1", "bash step 2"}, e.log.get()); diff != "" {
		t.Errorf("ran (-want +got):\n%s", diff)
	}
	// Resuming while revoked pauses again without running anything.
	out, err = e.rt.Execute(ctx, id, p)
	if err != nil || out.Status != journal.StatusPaused || out.End.Reason != "revoked" {
		t.Fatalf("resume while revoked: %v %+v", err, out)
	}
	if len(e.log.get()) != 2 {
		t.Errorf("ran %v", e.log.get())
	}
	st, err := e.rt.Cancel(ctx, id, "sec")
	if err != nil {
		t.Fatal(err)
	}
	checkOneResult(t, st)
	checkPairs(t, m.reqs)
}

func checkOneResult(t *testing.T, st *agent.State) {
	t.Helper()
	for _, turn := range st.Turns {
		for _, c := range turn.Calls {
			if c.Finished == nil {
				t.Errorf("call %s has no result", c.ID)
			}
		}
	}
}

func TestPrincipalCheckOutcomes(t *testing.T) {
	for _, tt := range []struct {
		name          string
		principal     string
		onBehalfOf    string
		setup         func(*identity.Directory) error
		status        journal.Status
		runtimeFailed bool
	}{
		{"built-in local agent", identity.LocalAgent, "", nil, journal.StatusCompleted, false},
		{"unknown agent", "ghost", "", nil, journal.StatusPaused, false},
		{"assistant for a user", "helper", "alice", func(d *identity.Directory) error {
			_, err := d.Create(context.Background(), &identity.CreateParams{Name: "helper", Kind: identity.Assistant})
			return err
		}, journal.StatusCompleted, false},
		{"assistant for nobody", "helper", "", func(d *identity.Directory) error {
			_, err := d.Create(context.Background(), &identity.CreateParams{Name: "helper", Kind: identity.Assistant})
			return err
		}, journal.StatusPaused, false},
		{"employee claiming a user", "worker", "alice", func(d *identity.Directory) error {
			_, err := d.Create(context.Background(), &identity.CreateParams{Name: "worker"})
			return err
		}, journal.StatusPaused, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			withBash(e)
			dir := identity.NewDirectory(e.store, nil)
			if tt.setup != nil {
				if err := tt.setup(dir); err != nil {
					t.Fatal(err)
				}
			}
			m := &script{turns: []model.Message{calls(bash("c1", "ls")), answer("done")}}
			id := e.create(&agent.RunCreated{Principal: tt.principal, OnBehalfOf: tt.onBehalfOf})
			p := e.params(m)
			p.Principals = dir.Check
			out, err := e.rt.Execute(t.Context(), id, p)
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != tt.status {
				t.Errorf("status %s (%+v), want %s", out.Status, out.End, tt.status)
			}
		})
	}
}

// A principal check that fails for another reason (the directory cannot
// be read) stops the execution without running anything: fail closed.
func TestPrincipalCheckFailsClosed(t *testing.T) {
	e := newEnv(t)
	withBash(e)
	m := &script{turns: []model.Message{calls(bash("c1", "ls")), answer("done")}}
	id := e.create(&agent.RunCreated{Principal: "worker"})
	p := e.params(m)
	boom := errors.New("disk on fire")
	p.Principals = func(context.Context, string, string) ([]policy.Grant, error) { return nil, boom }
	if _, err := e.rt.Execute(t.Context(), id, p); !errors.Is(err, boom) {
		t.Errorf("Execute = %v, want the check's error", err)
	}
	if len(e.log.get()) != 0 {
		t.Errorf("ran %v", e.log.get())
	}
}
