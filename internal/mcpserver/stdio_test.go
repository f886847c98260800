package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// endSignal closes ended when the reader under it returns io.EOF.
type endSignal struct {
	r     io.Reader
	ended chan struct{}
	once  bool
}

func (e *endSignal) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF && !e.once {
		e.once = true
		close(e.ended)
	}
	return n, err
}

// A line that is not JSON, or JSON that is not a JSON-RPC message, is
// answered and skipped; the requests around it are answered, including
// one still executing when the client's input ends.
func TestStdioSurvivesBadLinesAndDrains(t *testing.T) {
	lines := []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow","arguments":{}}}`,
		`garbage{`,
		`{}`,
		`{"id":"x","method":"ping"}`,
		``,
		`{"jsonrpc":"2.0","id":3,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":4,"method":"tools/list"}`,
	}
	in := &endSignal{r: strings.NewReader(strings.Join(lines, "\n")), ended: make(chan struct{})}
	srv := sdk.NewServer(&sdk.Implementation{Name: "t", Version: "0"}, nil)
	sdk.AddTool(srv, &sdk.Tool{Name: "slow"}, func(ctx context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
		// Answer only after the client's input has ended.
		select {
		case <-in.ended:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "done"}}}, nil, nil
	})
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := srv.Run(ctx, Stdio(in, &out, time.Minute)); err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	type answer struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	got := map[string]int{} // id -> error code (0: a result)
	var nullErrors []int
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var a answer
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatalf("output line %q: %v", sc.Text(), err)
		}
		code := 0
		if a.Error != nil {
			code = a.Error.Code
		}
		if string(a.ID) == "null" {
			nullErrors = append(nullErrors, code)
			continue
		}
		got[string(a.ID)] = code
	}
	want := map[string]int{"1": 0, "2": 0, `"x"`: -32600, "3": 0, "4": 0}
	for id, code := range want {
		if c, ok := got[id]; !ok || c != code {
			t.Errorf("id %s: answered %v with code %d, want code %d\n%s", id, ok, c, code, out.String())
		}
	}
	if len(nullErrors) != 2 || nullErrors[0] != -32700 || nullErrors[1] != -32600 {
		t.Errorf("answers with id null: %v, want [-32700 -32600]", nullErrors)
	}
}
