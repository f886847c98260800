package cli_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/client"
	"github.com/keel-run/keel/journal"
	"github.com/keel-run/keel/server/api"
)

// Runs created through keel serve's API offer the tools of the server's
// MCP servers (config.toml), or only those of their agent: the stdio
// server starts in the run's sandbox on the server, the servers and pins
// are journaled in run.created, and a run names no server it may not use.
func TestServeRunsOfferMCPTools(t *testing.T) {
	dir := mcpNpm(t)
	db := setup(t)
	everything := mcpJS(dir, "server-everything")
	cfg := fmt.Sprintf(`
[[mcp.servers]]
name = "everything"
command = ["node", %q, "stdio"]
read_only = [%q]

[[mcp.servers]]
name = "second"
command = ["node", %q, "stdio"]
read_only = [%q]
tools = ["get-sum"]
`, everything, filepath.Join(dir, "node_modules"), everything, filepath.Join(dir, "node_modules"))
	if err := os.WriteFile(filepath.Join(os.Getenv("KEEL_HOME"), "config.toml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	m := &scriptedModel{turns: [][]scriptedCall{{{"e1", "everything__echo", `{"message":"hello from a server run"}`}}}}
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	serve := startServe(t, "--model", "openai-compatible:scripted@"+srv.URL+"/v1")
	cl := serve.apiClient(t)
	ctx := t.Context()
	if _, err := cl.CreateAgent(ctx, &api.CreateAgent{Name: "echoer", Kind: "employee", Connectors: &api.Connectors{MCP: []string{"everything"}}}); err != nil {
		t.Fatal(err)
	}
	ag, err := cl.Agents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(ag, func(a api.Agent) bool { return a.Name == "echoer" }); i < 0 || ag[i].Connectors == nil || !slices.Equal(ag[i].Connectors.MCP, []string{"everything"}) {
		t.Fatalf("agents: %+v", ag)
	}
	// An agent naming a server the server does not have is refused at
	// creation of its run, with the names it has.
	if _, err := cl.CreateAgent(ctx, &api.CreateAgent{Name: "lost", Kind: "employee", Connectors: &api.Connectors{MCP: []string{"nowhere"}}}); err != nil {
		t.Fatal(err)
	}
	_, err = cl.CreateRun(ctx, &api.CreateRun{Task: "x", Agent: "lost", Workspace: t.TempDir()})
	if !client.IsCode(err, api.CodeInvalidRequest) || !strings.Contains(err.Error(), `"nowhere"`) || !strings.Contains(err.Error(), "everything, second") {
		t.Fatalf("a run of an agent with an unknown server: %v", err)
	}
	// A bad entry is refused when the agent is created.
	if _, err := cl.CreateAgent(ctx, &api.CreateAgent{Name: "bad", Kind: "employee", Connectors: &api.Connectors{SQL: []string{"db=postgres://u:pw@h/db"}}}); !client.IsCode(err, api.CodeInvalidRequest) {
		t.Fatalf("an agent with a DSN: %v", err)
	}

	run, err := cl.CreateRun(ctx, &api.CreateRun{Task: "echo", Agent: "echoer", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if last := untilStopped(t, cl, run.ID, 1); last.Type != journal.RunCompleted {
		t.Fatalf("run ended with %s: %s\n%s", last.Type, last.Payload, serve.stderr)
	}
	m.mu.Lock()
	offered := slices.Clone(m.tools)
	m.mu.Unlock()
	if !slices.Contains(offered, "everything__echo") || slices.ContainsFunc(offered, func(s string) bool { return strings.HasPrefix(s, "second__") }) {
		t.Errorf("the model was offered %v", offered)
	}
	st, evs := loadRun(t, db, run.ID)
	if len(st.Created.MCP) != 1 || st.Created.MCP[0].Name != "everything" {
		t.Errorf("run.created MCP: %+v", st.Created.MCP)
	}
	pinned := 0
	for _, ti := range st.Created.Tools {
		if ti.Server == "everything" && ti.Pin != "" {
			pinned++
		}
	}
	if pinned < 5 {
		t.Errorf("%d tools of everything pinned in run.created", pinned)
	}
	var result string
	for _, e := range evs {
		if e.Type == journal.ToolFinished {
			var f agent.ToolFinished
			json.Unmarshal(e.Payload, &f)
			if f.CallID == "e1" {
				result = f.Result.Content
			}
		}
	}
	if !strings.Contains(result, "hello from a server run") {
		t.Errorf("echo result: %q", result)
	}

	// An agent without connectors gets the server's; a run narrows them.
	run2, err := cl.CreateRun(ctx, &api.CreateRun{Task: "sum", Workspace: t.TempDir(), Connectors: &api.Connectors{MCP: []string{"second"}}})
	if err != nil {
		t.Fatal(err)
	}
	untilStopped(t, cl, run2.ID, 1)
	st2, _ := loadRun(t, db, run2.ID)
	var names []string
	for _, ti := range st2.Created.Tools {
		if ti.Server != "" {
			names = append(names, ti.Name)
		}
	}
	if len(st2.Created.MCP) != 1 || !slices.Equal(names, []string{"second__get-sum"}) {
		t.Errorf("narrowed run: servers %+v, tools %v", st2.Created.MCP, names)
	}
	if _, err := cl.CreateRun(ctx, &api.CreateRun{Task: "x", Agent: "echoer", Workspace: t.TempDir(), Connectors: &api.Connectors{MCP: []string{"second"}}}); !client.IsCode(err, api.CodeInvalidRequest) {
		t.Errorf("a run naming a server its agent may not use: %v", err)
	}
	// keel run --server names the server's connectors.
	code, _, errOut := keel(t, "--server", serve.url, "run", "--workspace", t.TempDir(), "--mcp", "x=node y", "task")
	if code != 2 || !strings.Contains(errOut, "name the server's connectors") {
		t.Errorf("keel run --server --mcp NAME=SPEC = %d\n%s", code, errOut)
	}
}
