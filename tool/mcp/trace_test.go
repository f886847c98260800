package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/mcp"
)

// A tools/call in a traced call carries the W3C traceparent in _meta.
func TestCallCarriesTraceParent(t *testing.T) {
	s := sdk.NewServer(&sdk.Implementation{Name: "meta", Version: "1"}, nil)
	got := make(chan any, 1)
	s.AddTool(&sdk.Tool{Name: "ping", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			got <- req.Params.Meta["traceparent"]
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "pong"}}}, nil
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
	c, err := mcp.Connect(t.Context(), mcp.Server{Name: "m", URL: u}, &mcp.Options{Network: e.env.Network})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := tool.NewRegistry()
	if _, err := c.Register(r, nil); err != nil {
		t.Fatal(err)
	}
	tp := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	a, bad := r.Validate(model.ToolCall{ID: "p1", Name: "m__ping", Arguments: "{}"})
	if bad != nil {
		t.Fatal(bad.Content)
	}
	res, err := r.Run(tool.WithTraceParent(t.Context(), tp), "m__ping", &tool.Request{RunID: "run1", CallID: "p1", Arguments: a, Env: e.env})
	if err != nil || res.IsError {
		t.Fatalf("call = %+v, %v", res, err)
	}
	if v := <-got; v != tp {
		t.Errorf("_meta.traceparent = %v, want %s", v, tp)
	}
}
