package service_test

import (
	"context"
	"slices"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/service"
)

// The child agents of a team are agents like any other once a run acted
// as one (report 15, Q6): the agents list shows them before anything
// happened to them, and a sub-agent name no run acted as (a typo) is
// refused as no agent by revoke, restore and grants, as any name that
// names nothing; the real one is revoked.
func TestSubAgentsThatActedAreKnown(t *testing.T) {
	ctx := t.Context()
	rt := agent.NewRuntime(mem.New(), nil)
	child := identity.LocalAgent + "/reader"
	if _, err := rt.Create(ctx, &agent.RunCreated{Task: "read the docs", Workspace: t.TempDir(), MountPath: "/workspace", Principal: child}); err != nil {
		t.Fatal(err)
	}
	svc := service.New(rt, &service.Options{NoExecution: true})
	defer svc.Shutdown(context.WithoutCancel(ctx))
	who := service.Local("ada")
	names := func() []string {
		t.Helper()
		list, err := svc.Agents(ctx, who)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, a := range list {
			out = append(out, a.Name)
		}
		return out
	}
	if got := names(); !slices.Contains(got, child) || !slices.IsSorted(got) {
		t.Errorf("agents %v, want %s among them, sorted", got, child)
	}
	typo := identity.LocalAgent + "/raeder"
	checks := map[string]func() error{
		"revoke":  func() error { _, err := svc.RevokeAgent(ctx, who, typo, "typo"); return err },
		"restore": func() error { _, err := svc.RestoreAgent(ctx, who, typo, "typo"); return err },
		"grants":  func() error { _, err := svc.Grants(ctx, who, typo); return err },
	}
	for name, check := range checks {
		err := check()
		if e, _ := service.Classify(err); err == nil || e.Code != api.CodeNotFound {
			t.Errorf("%s %s = %v, want not_found", name, typo, err)
		}
	}
	if slices.Contains(names(), typo) {
		t.Errorf("the typo %s is listed", typo)
	}
	a, err := svc.RevokeAgent(ctx, who, child, "done")
	if err != nil || !a.Revoked {
		t.Fatalf("revoke %s = %+v %v", child, a, err)
	}
	n := 0
	for _, name := range names() {
		if name == child {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the revoked %s is listed %d times, want once", child, n)
	}
}
