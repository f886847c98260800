package agent

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The files a run's stdio MCP servers run are the arguments of their
// commands that name a path under the mount.
func TestMCPFiles(t *testing.T) {
	t.Parallel()
	cr := &RunCreated{MCP: []MCPServer{
		{Name: "local", Command: []string{"python3", "/workspace/mcp_srv.py"}},
		{Name: "node", Command: []string{"node", "./tools/server.js", "--config=conf/mcp.json", "-v"}},
		{Name: "host", Command: []string{"/usr/bin/mcp-server", "--root", "/etc/x.conf"}},
		{Name: "http", URL: "https://h.example/mcp"},
	}}
	want := []string{"/workspace/mcp_srv.py", "/workspace/tools/server.js", "/workspace/conf/mcp.json"}
	if diff := cmp.Diff(want, mcpFiles(cr)); diff != "" {
		t.Errorf("mcpFiles (-want +got):\n%s", diff)
	}
}
