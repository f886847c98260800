package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/mcp"
)

// A server that stops answering (every tool waits for a lock a call
// never gives back) is called no more after two timeouts in a row: the
// calls after them get a result at once saying why, instead of each
// waiting the whole timeout.
func TestWedgedServerIsNoLongerCalled(t *testing.T) {
	var wedge sync.Mutex
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	s := sdk.NewServer(&sdk.Implementation{Name: "wedged", Version: "1"}, nil)
	calls := 0
	var cmu sync.Mutex
	s.AddTool(&sdk.Tool{Name: "work", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			cmu.Lock()
			calls++
			first := calls == 1
			cmu.Unlock()
			if first {
				wedge.Lock() // held until the test ends: the server is wedged
				<-release
				return nil, fmt.Errorf("released")
			}
			select {
			case <-release:
			case <-ctx.Done():
				// ignores the cancellation as a wedged server would
				<-release
			}
			return nil, fmt.Errorf("released")
		})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil)}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	u := fmt.Sprintf("http://localhost:%d/", l.Addr().(*net.TCPAddr).Port)
	e := newEnv(t, nil, []string{strings.TrimSuffix(strings.TrimPrefix(u, "http://"), "/")})
	c, err := mcp.Connect(t.Context(), mcp.Server{Name: "w", URL: u}, &mcp.Options{Network: e.env.Network, CallTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := tool.NewRegistry()
	if _, err := c.Register(r, nil); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{
		"no answer within 300ms",
		"left 2 calls in a row unanswered, so Keel no longer calls it in this execution",
		"not called: the MCP server w did not answer 2 calls in a row",
	} {
		res := call(t, r, e.env, fmt.Sprintf("c%d", i), "w__work", "{}")
		if !res.IsError || !strings.Contains(res.Content, want) {
			t.Errorf("call %d = %q, want an error with %q", i+1, res.Content, want)
		}
	}
	cmu.Lock()
	n := calls
	cmu.Unlock()
	if n > 2 {
		t.Errorf("the server was called %d times, want at most 2 (none after the second timeout)", n)
	}
}

// wedgingServer is a stdio MCP server in Python with one tool, work: the
// first process to be called never answers (it sleeps, reading nothing,
// as a wedged server does, and leaves a mark in the workspace); a later
// process answers "fresh".
const wedgingServer = `import sys, json, os, time
def send(m):
    sys.stdout.write(json.dumps(m) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    m = json.loads(line)
    i, meth = m.get("id"), m.get("method")
    if meth == "initialize":
        send({"jsonrpc": "2.0", "id": i, "result": {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "w", "version": "1"}}})
    elif meth == "tools/list":
        send({"jsonrpc": "2.0", "id": i, "result": {"tools": [{"name": "work", "inputSchema": {"type": "object"}}]}})
    elif meth == "tools/call":
        if not os.path.exists("/workspace/wedged"):
            open("/workspace/wedged", "w").close()
            time.sleep(3600)
        send({"jsonrpc": "2.0", "id": i, "result": {"content": [{"type": "text", "text": "fresh"}]}})
    elif i is not None:
        send({"jsonrpc": "2.0", "id": i, "error": {"code": -32601, "message": "unknown method"}})
`

// A stdio server that leaves a call unanswered is stopped and started
// again for the next call, which it answers: the wedged process does not
// hold the run's later calls (issue 29, item 11).
func TestWedgedStdioServerIsRestarted(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	e := newEnv(t, nil, nil)
	if err := os.WriteFile(filepath.Join(e.ws.Root(), "srv.py"), []byte(wedgingServer), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := mcp.Connect(t.Context(), mcp.Server{Name: "w", Command: []string{"/usr/bin/python3", "/workspace/srv.py"}},
		&mcp.Options{Sandbox: e.sb, CallTimeout: 2 * time.Second, StartTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := tool.NewRegistry()
	if _, err := c.Register(r, nil); err != nil {
		t.Fatal(err)
	}
	res := call(t, r, e.env, "c1", "w__work", "{}")
	if !res.IsError || !strings.Contains(res.Content, "no answer within 2s") || !strings.Contains(res.Content, "Keel stopped the server (it did not answer in time) and starts it again for the next call") {
		t.Fatalf("the unanswered call = %q", res.Content)
	}
	if res := call(t, r, e.env, "c2", "w__work", "{}"); res.IsError || !strings.Contains(res.Content, "fresh") {
		t.Errorf("the call after the restart = %q, want the restarted server's answer", res.Content)
	}
}
