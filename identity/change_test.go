package identity_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/policy"
)

// A standing approval can be removed, and its removal is seen by every
// handle on the journal: the agent's calls ask again.
func TestUngrant(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := mem.New()
	d := identity.NewDirectory(store, &identity.Options{Clock: clock()})
	if _, err := d.Create(ctx, &identity.CreateParams{Name: "ci"}); err != nil {
		t.Fatal(err)
	}
	g1 := policy.Grant{ID: "r1/c1#0", Scope: policy.ScopeAgent, Tool: "bash", Exact: "rm -rf build"}
	g2 := policy.Grant{ID: "r1/c2#0", Scope: policy.ScopeAgent, Tool: "bash", Prefix: []string{"make"}}
	for _, g := range []policy.Grant{g1, g2} {
		if err := d.Grant(ctx, "ci", g); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Ungrant(ctx, "ci", g1.ID, &identity.UngrantParams{By: "ann", Reason: "too broad"}); err != nil {
		t.Fatal(err)
	}
	other := identity.NewDirectory(store, nil)
	grants, err := other.Check(ctx, "ci", "")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]policy.Grant{g2}, grants); diff != "" {
		t.Errorf("grants after ungrant (-want +got):\n%s", diff)
	}
	for _, tt := range []struct{ agent, id string }{{"ci", g1.ID}, {"ci", "nope"}, {"nobody", g2.ID}} {
		if err := other.Ungrant(ctx, tt.agent, tt.id, nil); !errors.Is(err, identity.ErrUnknown) {
			t.Errorf("Ungrant(%s, %s) = %v, want ErrUnknown", tt.agent, tt.id, err)
		}
	}
}

// A revoked built-in agent can be restored (it cannot be created again),
// without its old standing approvals; a created agent's revocation is
// permanent.
func TestRestoreBuiltin(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := mem.New()
	d := identity.NewDirectory(store, &identity.Options{Clock: clock()})
	if _, err := d.Restore(ctx, identity.LocalAgent, nil); !errors.Is(err, identity.ErrNotRestorable) {
		t.Errorf("Restore of an active agent = %v", err)
	}
	if err := d.Grant(ctx, identity.LocalAgent, policy.Grant{ID: "g", Scope: policy.ScopeAgent, Tool: "bash", Exact: "ls"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Revoke(ctx, identity.LocalAgent, &identity.RevokeParams{By: "sec"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Check(ctx, identity.LocalAgent, ""); !errors.Is(err, policy.ErrRevoked) {
		t.Fatalf("Check after revoke = %v", err)
	}
	if _, err := d.Create(ctx, &identity.CreateParams{Name: identity.LocalAgent}); !errors.Is(err, identity.ErrExists) {
		t.Errorf("Create of the built-in name = %v", err)
	}
	a, err := d.Restore(ctx, identity.LocalAgent, &identity.RestoreParams{By: "ann", Reason: "revoked by mistake"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Revoked || len(a.Grants) != 0 || a.RestoredBy != "ann" || !a.RestoredAt.Equal(t0) {
		t.Errorf("restored agent %+v", a)
	}
	other := identity.NewDirectory(store, nil)
	if grants, err := other.Check(ctx, identity.LocalAgent, ""); err != nil || len(grants) != 0 {
		t.Errorf("Check after restore = %v, %v", grants, err)
	}
	if _, err := other.Create(ctx, &identity.CreateParams{Name: "bot"}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Revoke(ctx, "bot", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Restore(ctx, "bot", nil); !errors.Is(err, identity.ErrNotRestorable) {
		t.Errorf("Restore of a created agent = %v", err)
	}
	if _, err := other.Restore(ctx, "nobody", nil); !errors.Is(err, identity.ErrUnknown) {
		t.Errorf("Restore of an unknown agent = %v", err)
	}
}
