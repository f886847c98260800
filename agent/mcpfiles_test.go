package agent

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The files a run's stdio MCP servers run are the arguments of their
// commands that name a path under the mount, and the modules a Python
// or Node script may import from its directory (fresh-user trial 5, M7:
// json.py beside the server's script).
func TestMCPFiles(t *testing.T) {
	t.Parallel()
	cr := &RunCreated{MCP: []MCPServer{
		{Name: "local", Command: []string{"python3", "/workspace/mcp_srv.py"}},
		{Name: "node", Command: []string{"node", "./tools/server.js", "--config=conf/mcp.json", "-v"}},
		{Name: "host", Command: []string{"/usr/bin/mcp-server", "--root", "/etc/x.conf"}},
		{Name: "http", URL: "https://h.example/mcp"},
	}}
	want := []string{"/workspace/mcp_srv.py", "/workspace/**/*.py", "/workspace/**/*.pyc", "/workspace/**/*.so",
		"/workspace/tools/server.js",
		"/workspace/tools/**/*.js", "/workspace/tools/**/*.mjs", "/workspace/tools/**/*.cjs", "/workspace/tools/**/*.ts",
		"/workspace/tools/**/*.mts", "/workspace/tools/**/*.cts", "/workspace/tools/**/*.json", "/workspace/tools/**/*.node",
		"/workspace/tools/node_modules/**/*", "/workspace/tools/package.json",
		"/workspace/node_modules/**/*", "/workspace/package.json",
		"/workspace/conf/mcp.json"}
	if diff := cmp.Diff(want, mcpFiles(cr)); diff != "" {
		t.Errorf("mcpFiles (-want +got):\n%s", diff)
	}
}
