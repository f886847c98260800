package identity_test

import (
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/journal/mem"
	"github.com/keel-run/keel/journal/sqlite"
	"github.com/keel-run/keel/policy"
)

var t0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

func clock() journal.Clock { return func() time.Time { return t0 } }

func TestDirectoryLifecycle(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := mem.New()
	d := identity.NewDirectory(store, &identity.Options{Clock: clock()})
	a, err := d.Create(ctx, &identity.CreateParams{Name: "reviewer", Kind: identity.Assistant, Description: "reviews PRs", By: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	want := &identity.Agent{Name: "reviewer", Kind: identity.Assistant, Description: "reviews PRs", Created: t0, CreatedBy: "ann"}
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("Create (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		name string
		p    identity.CreateParams
		want error
	}{
		{"taken", identity.CreateParams{Name: "reviewer"}, identity.ErrExists},
		{"built in", identity.CreateParams{Name: identity.LocalAgent}, identity.ErrExists},
		{"bad name", identity.CreateParams{Name: "Bad Name"}, identity.ErrInvalid},
		{"empty name", identity.CreateParams{Name: ""}, identity.ErrInvalid},
		{"bad kind", identity.CreateParams{Name: "x", Kind: "robot"}, identity.ErrInvalid},
		// Keel's own principals' names, as token names refuse them.
		{"keel.timeout", identity.CreateParams{Name: "keel.timeout"}, identity.ErrInvalid},
		{"keel-scheduler", identity.CreateParams{Name: "keel-scheduler"}, identity.ErrInvalid},
		{"keel", identity.CreateParams{Name: "keel"}, identity.ErrInvalid},
	} {
		if _, err := d.Create(ctx, &tt.p); !errors.Is(err, tt.want) {
			t.Errorf("%s: Create = %v, want %v", tt.name, err, tt.want)
		}
	}
	// Another handle on the same journal sees the agent and revokes it.
	other := identity.NewDirectory(store, &identity.Options{Clock: clock()})
	if _, err := other.Revoke(ctx, "reviewer", &identity.RevokeParams{By: "sec", Reason: "rotated"}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Revoke(ctx, "reviewer", nil); !errors.Is(err, identity.ErrRevokedAgent) {
		t.Errorf("second Revoke = %v", err)
	}
	if _, err := other.Revoke(ctx, "nobody", nil); !errors.Is(err, identity.ErrUnknown) {
		t.Errorf("Revoke(unknown) = %v", err)
	}
	_, err = d.Check(ctx, "reviewer", "alice")
	if !errors.Is(err, policy.ErrRevoked) || !errors.Is(err, identity.ErrRevokedAgent) {
		t.Errorf("Check(revoked) = %v", err)
	}
	list, err := d.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range list {
		names = append(names, a.Name)
	}
	if diff := cmp.Diff([]string{identity.LocalAgent, identity.DemoAgent, "reviewer"}, names); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if !list[2].Revoked || list[2].RevokedBy != "sec" || list[2].RevokeReason != "rotated" {
		t.Errorf("revoked agent %+v", list[2])
	}
	if identity.Reserved("01jrun") || !identity.Reserved(identity.StreamID) {
		t.Error("Reserved")
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	d := identity.NewDirectory(mem.New(), nil)
	d.Create(ctx, &identity.CreateParams{Name: "bot"})
	d.Create(ctx, &identity.CreateParams{Name: "helper", Kind: identity.Assistant})
	g := policy.Grant{ID: "r1/c1#0", Scope: policy.ScopeAgent, Tool: "bash", Prefix: []string{"make"}}
	if err := d.Grant(ctx, "bot", g); err != nil {
		t.Fatal(err)
	}
	if err := d.Grant(ctx, "bot", g); err != nil {
		t.Errorf("a repeated grant = %v, want ignored", err)
	}
	if err := d.Grant(ctx, "bot", policy.Grant{ID: "x", Scope: policy.ScopeRun, Tool: "bash", Exact: "ls"}); !errors.Is(err, identity.ErrInvalid) {
		t.Errorf("Grant(run scope) = %v", err)
	}
	for _, tt := range []struct {
		principal, obo string
		revoked        bool
		grants         int
	}{
		{"bot", "", false, 1},
		{"bot", "alice", true, 0},
		{"helper", "alice", false, 0},
		{"helper", "", true, 0},
		{"ghost", "", true, 0},
		{identity.LocalAgent, "", false, 0},
	} {
		grants, err := d.Check(ctx, tt.principal, tt.obo)
		if errors.Is(err, policy.ErrRevoked) != tt.revoked || len(grants) != tt.grants {
			t.Errorf("Check(%q, %q) = %v, %v", tt.principal, tt.obo, grants, err)
		}
	}
	a, _ := d.Get(ctx, "bot")
	if diff := cmp.Diff([]policy.Grant{g}, a.Grants); diff != "" {
		t.Errorf("grants (-want +got):\n%s", diff)
	}
}

// Two processes creating agents at the same time on one SQLite file: both
// succeed, and the stream stays one valid chain.
func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "j.db")
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for w := range 2 {
		s, err := sqlite.Open(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		d := identity.NewDirectory(s, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				if _, err := d.Create(t.Context(), &identity.CreateParams{Name: string(rune('a'+w)) + string(rune('a'+i))}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	s, _ := sqlite.Open(db, nil)
	defer s.Close()
	evs, err := journal.ReadVerified(t.Context(), s, identity.StreamID)
	if err != nil || len(evs) != 20 {
		t.Fatalf("%d events, %v", len(evs), err)
	}
	list, _ := identity.NewDirectory(s, nil).List(t.Context())
	if len(list) != 22 {
		t.Errorf("%d agents", len(list))
	}
}

// Editing the directory behind Keel's back (un-revoking an agent in the
// database) breaks the chain: every read reports it, and the gate's
// check fails closed instead of letting the agent act.
func TestTamperingIsDetected(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := filepath.Join(t.TempDir(), "j.db")
	s, err := sqlite.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d := identity.NewDirectory(s, nil)
	d.Create(ctx, &identity.CreateParams{Name: "bot"})
	d.Revoke(ctx, "bot", &identity.RevokeParams{Reason: "compromised"})
	raw, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	// Turn the revocation into a harmless grant of nothing.
	if _, err := raw.Exec(`UPDATE events SET type = 'agent.granted', payload = '{"name":"bot","grant":{"id":"x","scope":"agent","tool":"bash","exact":"true"}}' WHERE run_id = ? AND seq = 2`, identity.StreamID); err != nil {
		t.Fatal(err)
	}
	_, err = identity.NewDirectory(s, nil).Check(ctx, "bot", "")
	var ce *journal.CorruptError
	if !errors.As(err, &ce) || ce.Seq != 2 || errors.Is(err, policy.ErrRevoked) {
		t.Errorf("Check after tampering = %v, want a corrupt-journal error at event 2", err)
	}
}

// BenchmarkCheck measures the gate's principal check on a SQLite journal
// (the incremental read of the directory stream that every gate decision
// and tool start makes).
func BenchmarkCheck(b *testing.B) {
	s, err := sqlite.Open(filepath.Join(b.TempDir(), "j.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	d := identity.NewDirectory(s, nil)
	for i := range 50 {
		d.Create(b.Context(), &identity.CreateParams{Name: "agent" + string(rune('a'+i%26)) + string(rune('a'+i/26))})
	}
	d.Grant(b.Context(), "agentaa", policy.Grant{ID: "g", Scope: policy.ScopeAgent, Tool: "bash", Prefix: []string{"make"}})
	b.ResetTimer()
	for b.Loop() {
		if _, err := d.Check(b.Context(), "agentaa", ""); err != nil {
			b.Fatal(err)
		}
	}
}

// TestConnectorsCredentials: the directory refuses a connector URL that
// carries a credential, naming the part, never the value; an entry
// journaled before it did is shown without it.
func TestConnectorsCredentials(t *testing.T) {
	for _, c := range []*identity.Connectors{
		{MCP: []string{"docs=https://bob:Canary6pw@mcp.example.com/mcp"}},
		{MCP: []string{"docs=https://mcp.example.com/mcp?Token=Canary6pw"}},
		{OpenAPI: []string{"api=https://api.example.com/openapi.json?x=1&api_key=Canary6pw"}},
		{MCP: []string{"docs=https://Canary6pw@mcp.example.com/mcp"}},
		{MCP: []string{"docs=https://mcp.example.com/mcp?key=Canary6pw"}},
		{MCP: []string{"docs=https://mcp.example.com/mcp#token=Canary6pw"}},
		{MCP: []string{"docs=https://mcp.example.com/mcp;token=Canary6pw"}},
		{OpenAPI: []string{"api=https://api.example.com/openapi.json#Canary6pw"}},
		{MCP: []string{"x=/usr/bin/tool --password Canary6pw"}},
		{MCP: []string{"x=/usr/bin/tool --api-key=Canary6pw"}},
		{MCP: []string{"x=env API_KEY=Canary6pw /usr/bin/tool"}},
		{MCP: []string{"x=/usr/bin/tool https://u:Canary6pw@h/x"}},
	} {
		err := c.Check()
		if !errors.Is(err, identity.ErrInvalid) || !strings.Contains(err.Error(), "carries a credential") || strings.Contains(err.Error(), "Canary6") {
			t.Errorf("Check(%v) = %v, want ErrInvalid naming the credential, not its value", c, err)
		}
		r := c.Redacted()
		if strings.Contains(strings.Join(append(append(r.MCP, r.SQL...), r.OpenAPI...), " "), "Canary6") {
			t.Errorf("Redacted(%v) = %v", c, r)
		}
	}
	// A stored command is shown whole with its secret masked, not as
	// "x=" (the rule of the refusal, not a DSN's).
	old := &identity.Connectors{MCP: []string{"x=/usr/bin/tool --api-key=Canary6pw -v", "y=env API_KEY=Canary6pw /usr/bin/tool"}}
	if r := old.Redacted(); strings.Join(r.MCP, " | ") != "x=/usr/bin/tool --api-key=[REDACTED] -v | y=env API_KEY=[REDACTED] /usr/bin/tool" {
		t.Errorf("Redacted(%v) = %q", old.MCP, r.MCP)
	}
	ok := &identity.Connectors{MCP: []string{"docs=https://mcp.example.com/mcp?x=1", "fs=node /srv/fs.js --token-file /run/t", `gh=sh -c 'exec gh-mcp --token "$GH_TOKEN"'`}, SQL: []string{"shop"}}
	if err := ok.Check(); err != nil {
		t.Errorf("Check(%v) = %v", ok, err)
	}
	if r := ok.Redacted(); strings.Join(r.MCP, " ") != strings.Join(ok.MCP, " ") {
		t.Errorf("Redacted changed %v to %v", ok.MCP, r.MCP)
	}
}
