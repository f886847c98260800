package identity_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/policy"
)

// TestSubAgents: a child agent's identity "PARENT/NAME" exists while its
// parent does, acts only while every agent above it may, holds its own
// standing approvals and its parents', can be revoked and restored alone,
// and is listed once something happened to it.
func TestSubAgents(t *testing.T) {
	ctx := t.Context()
	store := mem.New()
	d := identity.NewDirectory(store, nil)
	if _, err := d.Create(ctx, &identity.CreateParams{Name: "lead", Kind: identity.Assistant}); err != nil {
		t.Fatal(err)
	}
	grant := func(id string) policy.Grant {
		return policy.Grant{ID: id, Scope: policy.ScopeAgent, Tool: "bash", Exact: "make " + id}
	}
	if err := d.Grant(ctx, "lead", grant("g1")); err != nil {
		t.Fatal(err)
	}
	if err := d.Grant(ctx, "lead/editor", grant("g2")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		principal, user string
		grants          int
		err             error
	}{
		{"lead/editor", "ann", 2, nil},
		{"lead/investigator", "ann", 1, nil},
		{"lead/investigator/reader", "ann", 1, nil},
		{"lead/investigator", "", 0, identity.ErrInvalid}, // an assistant's child acts for a user too
		{"nobody/editor", "ann", 0, identity.ErrUnknown},
		{"lead/Bad Name", "ann", 0, identity.ErrUnknown},
		{"lead/", "ann", 0, identity.ErrUnknown},
	} {
		g, err := d.Check(ctx, tt.principal, tt.user)
		if tt.err == nil && (err != nil || len(g) != tt.grants) || tt.err != nil && (!errors.Is(err, tt.err) || !errors.Is(err, policy.ErrRevoked)) {
			t.Errorf("Check(%q, %q) = %d grants, %v; want %d, %v", tt.principal, tt.user, len(g), err, tt.grants, tt.err)
		}
	}
	if _, err := d.Revoke(ctx, "lead/investigator", &identity.RevokeParams{By: "ann", Reason: "looped"}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{"lead/investigator": true, "lead/investigator/reader": true, "lead/editor": false, "lead": false} {
		if _, err := d.Check(ctx, p, "ann"); errors.Is(err, identity.ErrRevokedAgent) != want {
			t.Errorf("after revoking lead/investigator, Check(%s) = %v", p, err)
		}
	}
	// Another directory over the same journal sees the same.
	d2 := identity.NewDirectory(store, nil)
	if _, err := d2.Check(ctx, "lead/investigator", "ann"); !errors.Is(err, identity.ErrRevokedAgent) {
		t.Errorf("a second directory: %v", err)
	}
	list, err := d2.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range list {
		names = append(names, a.Name)
	}
	if got := strings.Join(names, " "); got != "keel-cli keel-demo lead lead/editor lead/investigator" {
		t.Errorf("List = %s", got)
	}
	if _, err := d.Restore(ctx, "lead/investigator", &identity.RestoreParams{By: "ann"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Check(ctx, "lead/investigator", "ann"); err != nil {
		t.Errorf("restored: %v", err)
	}
	if _, err := d.Revoke(ctx, "lead", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Check(ctx, "lead/editor", "ann"); !errors.Is(err, identity.ErrRevokedAgent) {
		t.Errorf("child of a revoked agent: %v", err)
	}
}
