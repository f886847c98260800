package cli_test

import (
	"strings"
	"testing"

	"github.com/keel-run/keel/identity"
	"github.com/keel-run/keel/policy"
)

// `keel --server URL agents grants NAME` lists an agent's standing
// approvals as the local command does, and `agents ungrant NAME GRANT`
// removes one through the server (whose token names who did it).
func TestAgentGrantsThroughServer(t *testing.T) {
	db := setup(t)
	store := openDB(t, db)
	dir := identity.NewDirectory(store, nil)
	for _, g := range []policy.Grant{
		{ID: "r1#0", Scope: policy.ScopeAgent, Tool: "bash", Prefix: []string{"go", "test"}, By: "alice", Run: "r1", Call: "c1"},
		{ID: "r2#0", Scope: policy.ScopeAgent, Tool: "write_file", Exact: "README", By: "bob", Run: "r2", Call: "c2"},
	} {
		if err := dir.Grant(t.Context(), identity.LocalAgent, g); err != nil {
			t.Fatal(err)
		}
	}
	s := startServe(t)
	for _, args := range [][]string{{"agents", "grants", "keel-cli"}, {"agents", "grants", "keel-cli", "--json"}} {
		_, local, _ := keel(t, args...)
		code, remote, errOut := keel(t, append([]string{"--server", s.url}, args...)...)
		if code != 0 || remote != local {
			t.Errorf("%s with --server = %d %s\n%s\nlocally:\n%s", strings.Join(args, " "), code, errOut, remote, local)
		}
	}
	if code, _, errOut := keel(t, "--server", s.url, "agents", "ungrant", "keel-cli", "r1#0", "--by", "mallory"); code != 2 || !strings.Contains(errOut, "--by cannot be used") {
		t.Errorf("ungrant --by with --server = %d %s, want a usage error", code, errOut)
	}
	code, out, errOut := keel(t, "--server", s.url, "agents", "ungrant", "keel-cli", "r1#0", "--reason", "too broad")
	if code != 0 || out != "removed standing approval r1#0 of agent keel-cli\n" {
		t.Fatalf("ungrant with --server = %d %q %s", code, out, errOut)
	}
	ag, err := dir.Get(t.Context(), identity.LocalAgent)
	if err != nil {
		t.Fatal(err)
	}
	if len(ag.Grants) != 1 || ag.Grants[0].ID != "r2#0" {
		t.Errorf("after the removal the agent has %+v, want r2#0 only", ag.Grants)
	}
	// Again: a conflict saying when and by whom (report 15, R9).
	if code, _, errOut := keel(t, "--server", s.url, "agents", "ungrant", "keel-cli", "r1#0"); code != 1 || !strings.Contains(errOut, "standing approval r1#0 of agent keel-cli was revoked already (") {
		t.Errorf("removing it again = %d %s", code, errOut)
	}
}
