package cli_test

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/server/api"
)

// A connector of the server's config.toml that cannot be reached refuses
// a run that would use it, with the whole cause on one line and the
// password masked, in the API and the web UI alike; the demo, which
// uses no connector (as it uses no memory nor skills), is not refused
// because of it, nor is keel demo on the journal's machine (report 15,
// R15).
func TestUnreachableConnectorSparesTheDemo(t *testing.T) {
	setup(t)
	const password = "s3cretDSN"
	config := "[[sql.databases]]\nname = \"shop\"\ndsn = \"postgres://agent:" + password + "@127.0.0.1:1/shop\"\n"
	if err := os.WriteFile(filepath.Join(os.Getenv("KEEL_HOME"), "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t)
	c := s.apiClient(t)
	web := webSession(t, s.url, s.savedToken(t))

	if _, err := c.CreateRun(t.Context(), &api.CreateRun{Demo: true}); err != nil {
		t.Fatalf("the demo through the API: %v", err)
	}
	if _, refusal := web.post(t, "/ui/runs/demo", url.Values{}); refusal != "" {
		t.Errorf("the web UI's demo: %s", refusal)
	}
	if code, out, errOut := keel(t, "demo", "--no-wait"); code != 3 {
		t.Errorf("keel demo --no-wait = %d, want 3 at the approval\n%s%s", code, out, errOut)
	}

	ws := demoProject(t)
	_, err := c.CreateRun(t.Context(), &api.CreateRun{Task: "count orders", Model: "scripted:demo", Workspace: ws})
	const cause = "the run cannot be set up on this server: sql database shop: connect to 127.0.0.1:1/shop: failed to connect to `user=agent database=shop`: 127.0.0.1:1 (127.0.0.1): dial error: dial tcp 127.0.0.1:1: connect: connection refused"
	if !client.IsCode(err, api.CodeInvalidRequest) || !strings.Contains(err.Error(), cause) {
		t.Errorf("a run with the unreachable database through the API: %v\nwant %s", err, cause)
	}
	_, refusal := web.post(t, "/ui/runs/new", url.Values{"task": {"count orders"}, "model": {"scripted:demo"}, "workspace": {ws}})
	if !strings.Contains(refusal, cause) {
		t.Errorf("a run with the unreachable database through the web UI: %s\nwant %s", refusal, cause)
	}
	for _, said := range []string{err.Error(), refusal} {
		if strings.Contains(said, password) {
			t.Errorf("the refusal shows the database's password: %s", said)
		}
	}
}
