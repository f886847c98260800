package cli

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// serveMCPHTTP serves keel mcp serve's tools (srv) over streamable HTTP
// on addr, a loopback address: like the stdio form it acts with the local
// user's rights (on the local journal, or with their token), so it is
// not offered to other machines (and the SDK refuses requests whose Host is not local, against
// DNS rebinding).
func (a *app) serveMCPHTTP(ctx context.Context, srv *sdk.Server, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(a.stderr, "keel mcp serve: streamable HTTP on http://%s/mcp\n", ln.Addr())
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return hs.Shutdown(sctx)
	case err := <-done:
		return err
	}
}

// checkLoopback refuses an --http address that is not a loopback one.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("--http %q: want HOST:PORT", addr)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return usagef("--http %s: keel mcp serve acts with your rights and listens on loopback addresses only (127.0.0.1:PORT); for a team, keel serve offers MCP at /mcp behind its tokens", addr)
	}
	return nil
}
