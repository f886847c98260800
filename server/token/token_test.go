package token_test

import (
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/server/api"
	"github.com/keel-run/keel/server/token"
)

// Two processes on one journal: a token created by one authenticates in
// the other at once; a revocation takes effect within the refresh time.
func TestTokensAcrossProcesses(t *testing.T) {
	db := filepath.Join(t.TempDir(), "keel.db")
	s1, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	s2, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var elapsed atomic.Int64
	now := func() time.Time { return t0.Add(time.Duration(elapsed.Load())) }
	cli := token.New(s1, &token.Options{Clock: now})
	srv := token.New(s2, &token.Options{Clock: now, Refresh: time.Second})
	ctx := t.Context()

	tok, err := cli.Create(ctx, &token.Params{Name: "ada", Scopes: []string{api.ScopeRunsRead, api.ScopeApprovalsWrite}, By: "keel tokens create"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := srv.Authenticate(ctx, tok.Secret)
	if err != nil {
		t.Fatal(err)
	}
	want := api.Token{ID: tok.ID, Name: "ada", Scopes: []string{api.ScopeRunsRead, api.ScopeApprovalsWrite}, CreatedBy: "keel tokens create", Created: now()}
	if diff := cmp.Diff(want, *got); diff != "" {
		t.Errorf("Authenticate (-want +got):\n%s", diff)
	}
	if !token.HasScope(got, api.ScopeApprovalsWrite) || token.HasScope(got, api.ScopeRunsWrite) {
		t.Errorf("scopes of %v", got.Scopes)
	}
	if err := cli.Revoke(ctx, tok.ID, "ada"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Authenticate(ctx, tok.Secret); err != nil {
		t.Errorf("within the refresh interval the server's view may be stale: %v", err)
	}
	elapsed.Add(int64(2 * time.Second))
	if _, err := srv.Authenticate(ctx, tok.Secret); !errors.Is(err, token.ErrBad) {
		t.Errorf("after the refresh interval: %v, want ErrBadToken", err)
	}
	for _, bad := range []string{"", "keel_", "keel__x", tok.Secret + "x", "Bearer " + tok.Secret, "keel_" + tok.ID + "_wrong"} {
		if _, err := srv.Authenticate(ctx, bad); !errors.Is(err, token.ErrBad) {
			t.Errorf("Authenticate(%q) = %v, want ErrBadToken", bad, err)
		}
	}
	if err := cli.Revoke(ctx, "nosuch", "ada"); !errors.Is(err, token.ErrNotFound) {
		t.Errorf("Revoke(unknown) = %v", err)
	}
	// Revoking again is refused, saying when and by whom; the first
	// revocation's time stays (report 14, Q17).
	elapsed.Add(int64(time.Hour))
	err = srv.Revoke(ctx, tok.ID, "bob")
	if !errors.Is(err, token.ErrRevoked) || !strings.Contains(err.Error(), "since 2026-01-02 03:04:05 UTC, by ada") {
		t.Errorf("Revoke again = %v", err)
	}
	list, err := srv.List(ctx)
	if err != nil || len(list) != 1 || list[0].Revoked == nil || !list[0].Revoked.Equal(t0) {
		t.Errorf("after a second revoke: %+v, %v", list, err)
	}
	for _, tt := range []struct {
		name   string
		scopes []string
	}{{"no scopes", nil}, {"unknown scope", []string{"root"}}} {
		if _, err := cli.Create(ctx, &token.Params{Name: "x", Scopes: tt.scopes}); err == nil {
			t.Errorf("Create with %s: no error", tt.name)
		}
	}
	n, err := srv.Count(ctx)
	if err != nil || n != 0 {
		t.Errorf("Count() = %d, %v; want 0 live tokens", n, err)
	}
}
