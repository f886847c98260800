package cli_test

import (
	"os/exec"
	"strings"
	"testing"
)

// `keel --server URL run` without --agent lets the server choose the
// agent: a token bound to one agent runs as it (the CLI used to send its
// local default, keel-cli, which such a token may not act as).
func TestClientRunTakesTheTokensAgent(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: .ci/run installs it")
	}
	setup(t)
	s := startServe(t)
	if code, _, errOut := keel(t, "--server", s.url, "agents", "create", "ci-bot"); code != 0 {
		t.Fatalf("agents create = %d %s", code, errOut)
	}
	code, tok, errOut := keel(t, "--server", s.url, "tokens", "create", "--name", "bob", "--scope", "runs:write", "--agent", "ci-bot")
	if code != 0 {
		t.Fatalf("tokens create = %d %s", code, errOut)
	}
	code, _, errOut = keel(t, "--server", s.url, "--token", strings.TrimSpace(tok), "run", "--model", "scripted:demo", "--workspace", demoProject(t), "fix it")
	if code != 0 || !strings.Contains(errOut, "completed (answer)") {
		t.Fatalf("run with an agent-bound token = %d\n%s", code, errOut)
	}
	code, out, errOut := keel(t, "--server", s.url, "runs", "list", "--json")
	if code != 0 {
		t.Fatalf("runs list = %d %s", code, errOut)
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(out, `{"run_id":"`), `"`)
	code, out, _ = keel(t, "--server", s.url, "runs", "show", "--json", id)
	if code != 0 || !strings.Contains(out, `"principal":"ci-bot"`) {
		t.Errorf("the run did not act as ci-bot:\n%s", out)
	}
}
