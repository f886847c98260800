package mcp_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keel-run/keel/credential"
	"github.com/keel-run/keel/internal/oauthtest"
	"github.com/keel-run/keel/model"
	"github.com/keel-run/keel/sandbox"
	"github.com/keel-run/keel/tool"
	"github.com/keel-run/keel/tool/mcp"
)

type bearer struct {
	tok  string
	base http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.tok)
	return b.base.RoundTrip(r)
}

// BenchmarkVaultAuthorizedCall measures what the vault adds to a call of
// an OAuth-protected MCP server (the Go SDK's behind the zitadel OP,
// which introspects every token): Keel's call (the Authorize check, the
// vault's credential with its fsynced credential.used event, the
// injection, the result's bounding) against a direct SDK call with the
// same token set by hand. Calls alternate; p50 and p99 of each.
//
//	go test -run '^$' -bench VaultAuthorizedCall -benchtime 300x ./tool/mcp/
func BenchmarkVaultAuthorizedCall(b *testing.B) {
	ctx := context.Background()
	e := newVaultEnvTB(b)
	srv := oauthtest.StartMCP(b, e.op)
	network := sandbox.Network{Allow: []string{srv.Host}}
	opts := &mcp.Options{Network: network, Auth: &mcp.Auth{Vault: e.vault, Agent: "helper", ClientID: oauthtest.NativeClient}}
	c, err := mcp.Connect(ctx, mcp.Server{Name: "tickets", URL: srv.URL}, opts)
	if err != nil {
		b.Fatal(err)
	}
	c.Close()
	e.connectTB(b, "mcp-tickets", "helper", "")
	if c, err = mcp.Connect(ctx, mcp.Server{Name: "tickets", URL: srv.URL}, opts); err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	r := tool.NewRegistry()
	c.Register(r, nil)
	cred, err := e.vault.Credential(ctx, &credential.Request{Agent: "helper", Provider: "mcp-tickets", Resource: srv.URL})
	if err != nil {
		b.Fatal(err)
	}
	direct, err := sdk.NewClient(&sdk.Implementation{Name: "direct", Version: "1"}, nil).Connect(ctx,
		&sdk.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: &http.Client{Transport: bearer{cred.Token(), http.DefaultTransport}}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()
	ws, _ := tool.NewWorkspace(b.TempDir(), "/workspace", nil)
	defer ws.Close()
	env := &tool.Env{Workspace: ws, Network: network}
	args, bad := r.Validate(model.ToolCall{ID: "c", Name: "tickets__whoami", Arguments: `{}`})
	if bad != nil {
		b.Fatal(bad.Content)
	}
	var keel, sdkd []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := direct.CallTool(ctx, &sdk.CallToolParams{Name: "whoami"}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		req := &tool.Request{RunID: "bench", CallID: "c", Arguments: args, Principal: "helper", Env: env}
		if err := r.Tool("tickets__whoami").Authorize(ctx, req); err != nil {
			b.Fatal(err)
		}
		res, err := r.Run(ctx, "tickets__whoami", req)
		if err != nil || res.IsError {
			b.Fatal(err, res)
		}
		t2 := time.Now()
		sdkd, keel = append(sdkd, t1.Sub(t0)), append(keel, t2.Sub(t1))
	}
	b.StopTimer()
	q := func(d []time.Duration, p float64) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[int(float64(len(s)-1)*p)]
	}
	b.ReportMetric(float64(q(sdkd, 0.5).Microseconds()), "direct-p50-µs")
	b.ReportMetric(float64(q(sdkd, 0.99).Microseconds()), "direct-p99-µs")
	b.ReportMetric(float64(q(keel, 0.5).Microseconds()), "keel-p50-µs")
	b.ReportMetric(float64(q(keel, 0.99).Microseconds()), "keel-p99-µs")
}
