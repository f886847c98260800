package builder

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/keel-run/keel/agent"
	"github.com/keel-run/keel/internal/assemble"
	"github.com/keel-run/keel/internal/config"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/service"
	"github.com/keel-run/keel/tool"
)

// Bad context settings are usage errors naming the flag; good ones fix
// the window and the text mode's marker in run.created.
func TestContextSettingsApply(t *testing.T) {
	a := &assemble.Assembler{Home: t.TempDir()}
	for _, tt := range []struct {
		name    string
		s       ContextSettings
		wantErr string
	}{
		{"threshold zero", ContextSettings{Threshold: 0, ActionMode: "tools"}, "--compact-threshold 0"},
		{"threshold above one", ContextSettings{Threshold: 1.5}, "--compact-threshold 1.5"},
		{"negative handoff", ContextSettings{Threshold: 0.8, HandoffAfter: -1}, "--handoff-after -1"},
		{"unknown action mode", ContextSettings{Threshold: 0.8, ActionMode: "voice"}, `--action-mode "voice"`},
		{"text mode", ContextSettings{Threshold: 0.8, ActionMode: "text", Window: -1, NoMemory: true}, ""},
		{"family window", ContextSettings{Threshold: 0.8, NotesFile: "NOTES.md", NoMemory: true}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &agent.RunCreated{Workspace: t.TempDir(), Task: "fix it"}
			err := tt.s.Apply(a, c, "gpt-4o")
			if tt.wantErr != "" {
				var ue *assemble.UsageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Apply = %v, want a usage error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Apply = %v", err)
			}
			if tt.s.ActionMode == "text" && (c.CompletionMarker != service.DefaultCompletionMarker || c.Context != nil) {
				t.Errorf("text mode: marker %q, context %+v", c.CompletionMarker, c.Context)
			}
			if tt.s.Window == 0 && (c.Context == nil || c.Context.Window <= 0 || c.Context.NotesFile != "NOTES.md") {
				t.Errorf("context %+v, want the family's window", c.Context)
			}
		})
	}
}

// A run's MCP servers are the configuration's, then the flags', a later
// one replacing an earlier one of its name; None leaves the
// configuration's out; a malformed flag is a usage error.
func TestConnectorsMCPServers(t *testing.T) {
	cs := &Connectors{
		Config:  &config.Config{MCP: config.MCP{Servers: []config.MCPServer{{Name: "docs", URL: "https://docs.example/mcp"}, {Name: "fs", Command: []string{"fs-server"}, Env: map[string]string{"B": "2", "A": "1"}}}}},
		Project: &config.Config{MCP: config.MCP{Servers: []config.MCPServer{{Name: "docs", URL: "https://project.example/mcp"}}}},
	}
	for _, tt := range []struct {
		name    string
		cs      *Connectors
		f       ConnectorFlags
		want    []agent.MCPServer
		wantErr string
	}{
		{"configuration", cs, ConnectorFlags{}, []agent.MCPServer{{Name: "docs", URL: "https://project.example/mcp"}, {Name: "fs", Command: []string{"fs-server"}, Env: []string{"A=1", "B=2"}}}, ""},
		{"a flag replaces", cs, ConnectorFlags{MCP: []string{"fs=https://fs.example/mcp"}}, []agent.MCPServer{{Name: "docs", URL: "https://project.example/mcp"}, {Name: "fs", URL: "https://fs.example/mcp"}}, ""},
		{"none", cs, ConnectorFlags{None: true, MCP: []string{"x=run me"}}, []agent.MCPServer{{Name: "x", Command: []string{"run", "me"}}}, ""},
		{"no configuration", nil, ConnectorFlags{}, nil, ""},
		{"no spec", cs, ConnectorFlags{MCP: []string{"x="}}, nil, `--mcp "x="`},
		{"a scheme in capitals", nil, ConnectorFlags{MCP: []string{"fs=HTTPS://fs.example/mcp"}}, []agent.MCPServer{{Name: "fs", URL: "HTTPS://fs.example/mcp"}}, ""},
		{"a credential behind a scheme in capitals", nil, ConnectorFlags{MCP: []string{"fs=HTTPS://u:Canary7pw@fs.example/mcp"}}, nil, "mcp server fs:"},
		{"a header with a credential", nil, ConnectorFlags{MCP: []string{`fs=npx mcp-remote https://h/mcp --header "Authorization: Bearer Canary7tok"`}}, nil, "the value of the header Authorization"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.cs.MCPServers(&tt.f)
			if tt.wantErr != "" {
				var ue *assemble.UsageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("MCPServers = %v, want a usage error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("MCPServers (-want +got):\n%s", diff)
			}
		})
	}
}

// The journaled DSN of a database has no password; the full one stays
// in this process.
func TestConnectorsSQLDatabases(t *testing.T) {
	cs := &Connectors{}
	dbs, full, err := cs.SQLDatabases(&ConnectorFlags{SQL: []string{"app=postgres://u:hunter2@db.example/app"}, SQLWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(dbs) != 1 || strings.Contains(dbs[0].DSN, "hunter2") || !dbs[0].AllowWrites || full["app"] != "postgres://u:hunter2@db.example/app" {
		t.Errorf("databases %+v, full %v", dbs, full)
	}
}

// A server's replay recording that is missing or not a trajectory is the
// same user-safe error, which reveals nothing of the file.
func TestModelRecordingUnavailable(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret.txt")
	if err := os.WriteFile(secret, []byte("CANARY-4f1e first line"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := &Builder{Assembler: &assemble.Assembler{Home: dir}}
	for _, path := range []string{secret, filepath.Join(dir, "missing.json"), dir} {
		_, err := b.Model(t.Context(), "replay:"+path)
		if !errors.Is(err, service.ErrInvalid) || !strings.Contains(err.Error(), "is not available on this server") || strings.Contains(err.Error(), "CANARY") {
			t.Errorf("Model(replay:%s) = %v", path, err)
		}
	}
}

// fetch_url and http_request are offered to a run that may reach a host,
// and kept for a run whose run.created lists them (journaled before they
// were left out of runs without a network), never because a connector
// has a tool of that name.
func TestNetworkTools(t *testing.T) {
	old := []agent.ToolInfo{{ToolSpec: model.ToolSpec{Name: "bash"}}, {ToolSpec: model.ToolSpec{Name: "fetch_url"}}}
	mcpTool := []agent.ToolInfo{{ToolSpec: model.ToolSpec{Name: "http_request"}, Server: "web"}}
	for _, tt := range []struct {
		name string
		c    agent.RunCreated
		want bool
	}{
		{"no network", agent.RunCreated{}, false},
		{"allowed host", agent.RunCreated{Network: []string{"api.example.com"}}, true},
		{"journaled with them", agent.RunCreated{Tools: old}, true},
		{"a connector's tool of the name", agent.RunCreated{Tools: mcpTool}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := assemble.NetworkTools(&tt.c); got != tt.want {
				t.Fatalf("NetworkTools = %v, want %v", got, tt.want)
			}
			var names []string
			for _, ti := range assemble.Tools(agent.DefaultSettings(), tt.want) {
				names = append(names, ti.Name)
			}
			for _, n := range []string{"fetch_url", "http_request"} {
				if slices.Contains(names, n) != tt.want {
					t.Errorf("tools %v: %s offered %v, want %v", names, n, !tt.want, tt.want)
				}
			}
			if !slices.Contains(names, "bash") {
				t.Errorf("tools %v: no bash", names)
			}
		})
	}
}

// memory_search is offered to a run offered memory entries, or one whose
// run.created already lists it; memory_write to every run offered memory.
func TestMemoryTools(t *testing.T) {
	search := []agent.ToolInfo{{ToolSpec: model.ToolSpec{Name: "memory_search"}}}
	for _, tt := range []struct {
		name string
		c    agent.RunCreated
		want []string
	}{
		{"no memory", agent.RunCreated{}, nil},
		{"no entry", agent.RunCreated{Recall: &agent.Recall{}}, []string{"memory_write"}},
		{"an entry", agent.RunCreated{Recall: &agent.Recall{Entries: []agent.RecalledMemory{{ID: "m1"}}}}, []string{"memory_search", "memory_write"}},
		{"entries over the budget", agent.RunCreated{Recall: &agent.Recall{Omitted: 2}}, []string{"memory_search", "memory_write"}},
		{"journaled with it", agent.RunCreated{Recall: &agent.Recall{}, Tools: search}, []string{"memory_search", "memory_write"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.c
			c.Principal, c.Workspace = "keel-cli", t.TempDir()
			r := tool.NewRegistry()
			AddMemoryTools(r, &c, nil)
			if diff := cmp.Diff(tt.want, r.Names(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("tools (-want +got):\n%s", diff)
			}
		})
	}
}
