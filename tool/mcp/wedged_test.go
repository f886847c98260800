package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
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
