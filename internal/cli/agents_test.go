package cli_test

import (
	"strings"
	"testing"
)

func TestAgentsCommands(t *testing.T) {
	db := setup(t)
	ws := t.TempDir()
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"agents", "create", "ci-bot", "--description", "nightly builds"}, 0, "created employee agent ci-bot"},
		{[]string{"agents", "create", "helper", "--kind", "assistant"}, 0, "created assistant agent helper"},
		{[]string{"agents", "create", "ci-bot"}, 1, "already exists"},
		{[]string{"agents", "create", "Bad Name"}, 2, "invalid agent"},
		{[]string{"agents", "create", "x", "--kind", "robot"}, 2, "kind"},
		{[]string{"agents", "list"}, 0, "ci-bot"},
		{[]string{"agents", "show", "ci-bot"}, 0, "nightly builds"},
	} {
		code, out, errOut := keel(t, tt.args...)
		if code != tt.code || !strings.Contains(out+errOut, tt.want) {
			t.Errorf("keel %v = %d\n%s%s\nwant %d and %q", tt.args, code, out, errOut, tt.code, tt.want)
		}
	}
	run := func(extra ...string) (int, string) {
		args := append([]string{"run", "--model", "replay:" + trajectory, "--workspace", ws, "--mount-path", "/testbed", "--max-steps", "2", "-q"}, extra...)
		code, _, errOut := keel(t, args...)
		return code, errOut
	}
	// Limits stop these runs after two steps (exit 1): they did start.
	if code, errOut := run("--agent", "ci-bot"); code != 1 || strings.Contains(errOut, "cannot run") {
		t.Errorf("run as ci-bot = %d %q", code, errOut)
	}
	if code, errOut := run("--agent", "helper"); code != 2 || !strings.Contains(errOut, "must act on behalf of a user") {
		t.Errorf("assistant without a user = %d %q", code, errOut)
	}
	if code, errOut := run("--agent", "helper", "--on-behalf-of", "alice"); code != 1 {
		t.Errorf("assistant for alice = %d %q", code, errOut)
	}
	_, st := lastRun(t, db)
	if st.Created.Principal != "helper" || st.Created.OnBehalfOf != "alice" {
		t.Errorf("run.created principal %q for %q", st.Created.Principal, st.Created.OnBehalfOf)
	}
	if code, out, _ := keel(t, "agents", "revoke", "ci-bot", "--reason", "rotating"); code != 0 || !strings.Contains(out, "revoked agent ci-bot") {
		t.Errorf("revoke = %d %q", code, out)
	}
	if code, errOut := run("--agent", "ci-bot"); code != 2 || !strings.Contains(errOut, "revoked") {
		t.Errorf("run as revoked ci-bot = %d %q", code, errOut)
	}
	code, out, _ := keel(t, "agents", "list")
	if code != 0 || !strings.Contains(out, "revoked") || !strings.Contains(out, "keel-cli") {
		t.Errorf("agents list = %d\n%s", code, out)
	}
	// The directory stream is not a run, and it is audited with the rest.
	code, out, _ = keel(t, "runs", "list")
	if code != 0 || strings.Contains(out, "_keel") {
		t.Errorf("runs list shows the identity stream:\n%s", out)
	}
	code, out, _ = keel(t, "audit", "verify", "--all")
	if code != 0 || !strings.Contains(out, "_keel.identity") || !strings.Contains(out, "3 of 3 streams verified") {
		t.Errorf("audit verify --all = %d\n%s", code, out)
	}
}
