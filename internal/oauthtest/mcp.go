package oauthtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// MCPServer is a real MCP server (the official Go SDK's, streamable
// HTTP) behind the SDK's bearer-token middleware, which checks each token
// by introspection at the OP and answers 401 with the server's protected
// resource metadata (RFC 9728). Its one tool, whoami, answers "you are
// SUBJECT" for the token's user.
type MCPServer struct {
	// URL is the MCP endpoint (http://localhost:PORT/mcp); Host its
	// host:port, for a network allowlist.
	URL, Host string

	mu       sync.Mutex
	tokens   []string
	requests atomic.Int64
}

// StartMCP runs an MCP server protected by op until the test ends.
// authServers are the authorization servers its metadata names (default:
// op's issuer).
func StartMCP(t testing.TB, op *OP, authServers ...string) *MCPServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &MCPServer{Host: fmt.Sprintf("localhost:%d", l.Addr().(*net.TCPAddr).Port)}
	m.URL = "http://" + m.Host + "/mcp"
	if len(authServers) == 0 {
		authServers = []string{op.Issuer}
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "tickets", Version: "1"}, nil)
	s.AddTool(&sdk.Tool{Name: "whoami", Description: "Says who the token is for.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "you are " + req.Extra.TokenInfo.UserID}}}, nil
		})
	verify := func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		m.mu.Lock()
		m.tokens = append(m.tokens, token)
		m.mu.Unlock()
		in, err := op.Introspect(ctx, token)
		if err != nil || !in.Active {
			return nil, auth.ErrInvalidToken
		}
		user := in.Username
		if user == "" {
			user = in.Subject
		}
		return &auth.TokenInfo{Scopes: strings.Fields(in.Scope), UserID: user, Expiration: time.Now().Add(time.Minute)}, nil
	}
	prm := "http://" + m.Host + "/.well-known/oauth-protected-resource/mcp"
	mux := http.NewServeMux()
	mux.Handle("/.well-known/oauth-protected-resource/mcp", auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: m.URL, AuthorizationServers: authServers, ScopesSupported: []string{"openid", "offline_access"}}))
	mux.Handle("/mcp", auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{ResourceMetadataURL: prm})(
		sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil)))
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.requests.Add(1)
		mux.ServeHTTP(w, r)
	})}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	return m
}

// Received returns the bearer tokens the server was sent.
func (m *MCPServer) Received() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.tokens...)
}

// Requests returns how many HTTP requests reached the server.
func (m *MCPServer) Requests() int64 { return m.requests.Load() }
